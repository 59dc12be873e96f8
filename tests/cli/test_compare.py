"""``compare`` and ``diff --fail-on significant-regression`` end to end: runs of one
suite of 40 tasks where B flips a few tasks both ways (noise), or fails 15 that A passed."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from evalledger.viewer import create_app

from .helpers import evalledger, write_tasks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs A, NOISE and WORSE of 40 tasks; each task passes while its file exists. A: 30
    pass. NOISE: 2 of those fail and 2 others pass. WORSE: 15 of A's passes fail."""
    root = tmp_path_factory.mktemp("compare")
    flags = root / "pass"
    flags.mkdir()
    write_tasks(root / "tasks", {
        f"t{i:02d}": {"command": f"test -e {flags}/t{i:02d}",
                      "success_criteria": [{"type": "exit_code"}]} for i in range(40)})
    db = root / "ledger.db"

    def run(run_id: str, passing: set[int]) -> None:
        for f in flags.iterdir():
            f.unlink()
        for i in passing:
            (flags / f"t{i:02d}").touch()
        evalledger(root, db, "run", str(root / "tasks"), "--run-id", run_id, "-j", "8")

    run("A", set(range(30)))
    run("NOISE", set(range(2, 32)))
    run("WORSE", set(range(15, 30)))
    return db


def compared(db: Path, *args: str) -> tuple[int, dict]:
    done = evalledger(db.parent, db, "compare", *args, "--json")
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_noise_is_no_significant_regression_but_a_regression_all_the_same(runs: Path) -> None:
    code, c = compared(runs, "A", "NOISE")
    assert code == 0
    assert (c["pairs"], c["worse_in_b"], c["better_in_b"]) == (40, 2, 2)
    assert c["p_value"] == 1.0 and c["verdict"] == "no significant difference"
    assert evalledger(runs.parent, runs, "compare", "A", "NOISE", "--fail-on",
                      "regression").returncode == 1
    assert evalledger(runs.parent, runs, "diff", "A", "NOISE", "--fail-on",
                      "significant-regression").returncode == 0
    assert evalledger(runs.parent, runs, "diff", "A", "NOISE").returncode == 1


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_fifteen_of_forty_lost_is_a_significant_regression_either_way(runs: Path) -> None:
    code, c = compared(runs, "A", "WORSE")
    assert code == 1
    assert (c["worse_in_b"], c["better_in_b"]) == (15, 0)
    # 2^15 sign flips are past the 9,999 resamples: seeded ones, whose p is at least
    # 1 / 10,000 (the exact one is 2 / 2^15).
    assert 2 / 2 ** 15 < c["p_value"] <= 2 / 9_999
    assert c["verdict"] == "significant regression"
    assert c["a"]["pass_rate"] == 0.75 and c["b"]["pass_rate"] == 0.375
    assert c["pass_rate_difference"] == -0.375
    assert c["pass_rate_difference_interval"]["high"] < 0
    for gate in ("regression", "significant-regression"):
        assert evalledger(runs.parent, runs, "diff", "A", "WORSE", "--fail-on",
                          gate).returncode == 1


def test_the_text_says_the_numbers_the_json_holds(runs: Path) -> None:
    _, c = compared(runs, "A", "WORSE")
    text = evalledger(runs.parent, runs, "compare", "A", "WORSE").stdout
    i = c["b"]["pass_rate_interval"]
    assert (f"WORSE: pass rate 37.5% [{i['low']:.1%}, {i['high']:.1%}] (mean of the tasks' "
            "pass rates, 40 graded)" in text)
    d = c["pass_rate_difference_interval"]
    assert (f"pass rate B - A: -37.5 points [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}] "
            "(95% paired bootstrap, seed 0)") in text
    assert f"permutation test on the tasks' pass rates p = {c['p_value']:.4g}" in text
    assert ("with 40 paired tasks the smallest difference that could be significant at 95% "
            "is 15.0 points (6 tasks from always to never passing, all one way)") in text
    assert text.splitlines()[-1] == "verdict: significant regression at 95%"
    # The same seed, the same interval.
    assert compared(runs, "A", "WORSE")[1] == c


def test_markdown_and_junit_name_the_test_and_its_p_value(runs: Path) -> None:
    _, c = compared(runs, "A", "WORSE")
    md = evalledger(runs.parent, runs, "compare", "A", "WORSE", "--format", "markdown")
    assert md.returncode == 1
    assert "paired sign-flip permutation test on the tasks' pass rates: p" in md.stdout
    assert f"| {c['p_value']:.4g} | **significant regression** at 95% |" in md.stdout
    for pair, failed in ((("A", "WORSE"), True), (("A", "NOISE"), False)):
        done = evalledger(runs.parent, runs, "compare", *pair, "--format", "junit")
        suite = ET.fromstring(done.stdout.split("?>", 1)[1])
        [case] = suite.iter("testcase")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["test"] == "paired sign-flip permutation test on the tasks' pass rates"
        assert float(props["p"]) == pytest.approx(compared(runs, *pair)[1]["p_value"],
                                                  rel=1e-5)
        assert (case.find("failure") is not None) == failed
        assert suite.get("failures") == ("1" if failed else "0")


def test_the_numbers_are_the_same_in_the_cli_the_json_the_html_and_the_viewer(
    runs: Path, tmp_path: Path
) -> None:
    """A run's pass rate interval, and a comparison's statistics, everywhere they show."""
    summary = json.loads(evalledger(runs.parent, runs, "show", "WORSE", "--json").stdout)
    i = summary["pass_rate_interval"]
    said = f"37.5% [{i['low']:.1%}, {i['high']:.1%}]"
    assert said == "37.5% [24.2%, 53.0%]"  # Wilson's for 15 of 40
    assert f"pass rate {said} (95% Wilson)" in evalledger(runs.parent, runs, "show",
                                                           "WORSE").stdout
    html = tmp_path / "r.html"
    evalledger(runs.parent, runs, "report", "WORSE", "--format", "html", "-o", str(html))
    assert f"15 of 40 graded ({said})" in html.read_text()
    _, c = compared(runs, "A", "WORSE")
    with TestClient(create_app(runs)) as client:
        assert f"15 of 40 graded ({said})" in client.get("/runs/WORSE").text
        assert client.get("/api/runs/WORSE/summary").json()["pass_rate_interval"] == i
        assert client.get("/api/diff/A/WORSE").json()["paired"] == c
        page = client.get("/diff/A/WORSE").text
    assert "Paired by task: significant regression at 95%" in page
    assert f"sign-flip permutation test on the tasks&#39; pass rates p = {c['p_value']:.4g}" in (
        page)
    d = c["pass_rate_difference_interval"]
    assert f"[{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]" in page


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_several_variants_against_one_are_held_to_holms_correction(tmp_path: Path) -> None:
    """Three variants against a base, over 24 tasks: one loses 7 (alone p = 0.016, Holm
    0.047: still significant), one loses 6 (alone p = 0.031: Holm 0.063, not), one none."""
    flags = tmp_path / "pass"
    flags.mkdir()
    lost = {"base": 0, "seven": 7, "six": 6, "same": 0}
    for variant, n in lost.items():
        for i in range(n, 24):
            (flags / f"{variant}-t{i:02d}").touch()
    write_tasks(tmp_path / "tasks", {
        f"t{i:02d}": {"command": f'test -e "{flags}/$V-t{i:02d}"',
                      "success_criteria": [{"type": "exit_code"}]} for i in range(24)})
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({
        "experiment_id": "holm", "tasks": ["tasks/"],
        "variants": [{"variant_id": v, "env": {"V": v}} for v in lost]}))
    db = tmp_path / "l.db"
    ran = evalledger(tmp_path, db, "run", "-e", str(tmp_path / "exp.yaml"), "--run-id", "R",
                     "-j", "8")
    assert ran.returncode == 1, ran  # some tasks failed, as they should
    done = evalledger(tmp_path, db, "compare", "R", "--baseline", "base", "--json")
    found = {c["b"]["name"]: c for c in json.loads(done.stdout)}
    assert set(found) == {"R/seven", "R/six", "R/same"}
    assert all(c["correction"] == "holm" for c in found.values())
    assert found["R/seven"]["p_value"] == pytest.approx(2 / 2 ** 7)  # exact: 2^7 flips
    assert found["R/seven"]["adjusted_p"] == pytest.approx(3 * 2 / 2 ** 7)
    assert found["R/six"]["adjusted_p"] == pytest.approx(2 * 2 / 2 ** 6)
    assert found["R/same"]["adjusted_p"] == 1.0
    assert [found[v]["verdict"] for v in ("R/seven", "R/six", "R/same")] == [
        "significant regression", "no significant difference", "no significant difference"]
    assert done.returncode == 1  # one of them regressed significantly, corrected or not
    text = evalledger(tmp_path, db, "compare", "R", "--baseline", "base").stdout
    assert re.search(r"pass rates p = 0\.03125, Holm-adjusted p = 0\.0625", text)


def test_each_sides_grade_set_is_named_and_two_gradings_of_one_run_compare(
    tmp_path: Path,
) -> None:
    """#47: a regraded run against a plain one looked like a difference of agents."""
    flags = tmp_path / "pass"
    flags.mkdir()
    for i in range(8):
        (flags / f"t{i}").write_text("hello world" if i < 4 else "hello")
    check = [{"type": "output_contains", "includes": ["hello"]}]
    write_tasks(tmp_path / "tasks", {f"t{i}": {"command": f"cat {flags}/t{i}",
                                               "success_criteria": check} for i in range(8)})
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "R").returncode == 0
    strict = tmp_path / "strict.yaml"
    strict.write_text(json.dumps([{"type": "output_contains", "includes": ["hello world"]}]))
    assert evalledger(tmp_path, db, "regrade", "R", "--criteria", str(strict),
                      "--name", "strict").returncode == 0
    done = evalledger(tmp_path, db, "compare", "R", "--grades", "original",
                      "--grades-b", "strict", "--json")
    c = json.loads(done.stdout)
    assert (c["a"]["grades"], c["b"]["grades"]) == ("original", "strict")
    assert (c["worse_in_b"], c["a"]["pass_rate"], c["b"]["pass_rate"]) == (4, 1.0, 0.5)
    text = evalledger(tmp_path, db, "compare", "R", "--grades", "original", "--grades-b",
                      "strict").stdout
    assert ("grade sets: A original, B strict (different gradings: a difference may be "
            "theirs, not the agents')") in text


def test_a_side_of_nothing_but_infrastructure_failures_fails_every_gate_in_one_line(
    tmp_path: Path,
) -> None:
    """D4 (#47): B's every attempt an infrastructure failure made 0 pairs, and
    `compare --fail-on regression` and `diff --fail-on significant-regression` exit 0."""
    from evalledger.ledger import Ledger, RunFinished, RunStarted
    from evalledger.statuses import FinalStatus, RunStatus

    from ..projections.builders import completed, started

    db = tmp_path / "l.db"
    keys = [f"default/t{i}/00" for i in range(8)]
    with Ledger(db) as ledger:
        for run_id, status in (("A", FinalStatus.SUCCESS), ("B", FinalStatus.ERROR)):
            extra = {"failure_class": "infra"} if status is FinalStatus.ERROR else {}
            ledger.append([RunStarted(run_id=run_id, planned=keys),
                           *(e for k in keys for e in (
                               started(k, run_id=run_id),
                               completed(k, status, run_id=run_id, **extra))),
                           RunFinished(run_id=run_id, status=RunStatus.COMPLETED)])
    for args in (("compare", "A", "B", "--fail-on", "regression"),
                 ("compare", "A", "B"), ("diff", "A", "B", "--fail-on",
                                         "significant-regression")):
        done = evalledger(tmp_path, db, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "nothing to compare (B graded no task (every attempt an infrastructure " \
               "failure))" in done.stderr, (args, done.stderr)
    assert evalledger(tmp_path, db, "compare", "A", "B", "--fail-on", "never").returncode == 0
