"""``compare`` and ``diff --fail-on significant-regression`` end to end: runs of one
suite of 40 tasks where B flips a few tasks both ways (noise), or fails 15 that A passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_noise_is_no_significant_regression_but_a_regression_all_the_same(runs: Path) -> None:
    code, c = compared(runs, "A", "NOISE")
    assert code == 0
    assert (c["pairs"], c["passed_only_a"], c["passed_only_b"]) == (40, 2, 2)
    assert c["mcnemar_p"] == 1.0 and c["verdict"] == "no significant difference"
    assert evalledger(runs.parent, runs, "compare", "A", "NOISE", "--fail-on",
                      "regression").returncode == 1
    assert evalledger(runs.parent, runs, "diff", "A", "NOISE", "--fail-on",
                      "significant-regression").returncode == 0
    assert evalledger(runs.parent, runs, "diff", "A", "NOISE").returncode == 1


def test_fifteen_of_forty_lost_is_a_significant_regression_either_way(runs: Path) -> None:
    code, c = compared(runs, "A", "WORSE")
    assert code == 1
    assert (c["passed_only_a"], c["passed_only_b"]) == (15, 0)
    assert c["mcnemar_p"] == pytest.approx(2 / 2 ** 15)
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
    assert (f"WORSE: 15/40 passed, 37.5% [{i['low']:.1%}, {i['high']:.1%}] (95% Wilson)"
            in text)
    d = c["pass_rate_difference_interval"]
    assert (f"pass rate B - A: -37.5 points [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}] "
            "(95% paired bootstrap, seed 0)") in text
    assert f"McNemar exact p = {c['mcnemar_p']:.4g}" in text
    assert text.splitlines()[-1] == "verdict: significant regression at 95%"
    # The same seed, the same interval.
    assert compared(runs, "A", "WORSE")[1] == c
