"""The public read API (``evalledger.summary``, ``evalledger.list_runs``,
``evalledger.compare``) and ``evalledger.regrade``: what ``report --format json``,
``runs --format json`` and ``compare --json`` print, as values; a grade set appended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evalledger
from evalledger.errors import EvalledgerError
from evalledger.ledger import LedgerNotFound, RunNotFound
from tests.cli.helpers import evalledger as cli
from tests.cli.helpers import write_task


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("read")
    write_task(folder / "tasks" / "ok.yaml", "echo fine")
    write_task(folder / "tasks" / "bad.yaml", "exit 3")
    db = folder / "l.db"
    for _ in range(2):
        assert cli(folder, db, "run", str(folder / "tasks")).returncode == 1
    return db


def test_summary_is_what_report_json_prints(two_runs: Path) -> None:
    printed = json.loads(cli(two_runs.parent, two_runs, "report", "latest", "--format",
                             "json").stdout)
    read = evalledger.summary(ledger=two_runs)
    assert read.model_dump(mode="json") == printed
    assert (read.tasks_run, read.tasks_succeeded, read.tasks_failed) == (2, 1, 1)
    first = evalledger.list_runs(ledger=two_runs)[-1]["run_id"]
    assert evalledger.summary(first, ledger=str(two_runs)).run_id == first


def test_list_runs_is_what_runs_json_prints(two_runs: Path) -> None:
    printed = [json.loads(line) for line in cli(two_runs.parent, two_runs, "runs",
                                                "--format", "json").stdout.splitlines()]
    assert evalledger.list_runs(ledger=two_runs) == printed
    assert len(printed) == 2
    assert evalledger.list_runs(ledger=two_runs, limit=1) == printed[:1]


def test_a_missing_run_or_ledger_is_said_and_nothing_is_made(two_runs: Path,
                                                             tmp_path: Path) -> None:
    with pytest.raises(RunNotFound):
        evalledger.summary("no-such-run", ledger=two_runs)
    missing = tmp_path / "none.db"
    with pytest.raises(LedgerNotFound):
        evalledger.list_runs(ledger=missing)
    with pytest.raises(LedgerNotFound):
        evalledger.summary(ledger=missing)
    assert not missing.exists()


def test_compare_is_what_compare_json_prints(two_runs: Path) -> None:
    first, second = (run["run_id"] for run in evalledger.list_runs(ledger=two_runs)[::-1])
    printed = json.loads(cli(two_runs.parent, two_runs, "compare", first, second,
                             "--json").stdout)
    (found,) = evalledger.compare(first, second, ledger=two_runs)
    assert found.model_dump(mode="json") == printed
    assert (found.a.name, found.b.name, found.pairs) == (first, second, 2)
    with pytest.raises(EvalledgerError):  # nothing to compare it with
        evalledger.compare(first, ledger=two_runs)


def test_regrade_appends_a_grade_set_the_summary_reads(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "ok.yaml", "echo fine > out.txt")
    db = tmp_path / "l.db"
    assert cli(tmp_path, db, "run", str(tmp_path / "tasks")).returncode == 0
    (tmp_path / "stricter.yaml").write_text(
        "- {type: file_contains, path: out.txt, includes: [finer]}\n", encoding="utf-8")
    outcome = evalledger.regrade(ledger=db, criteria=tmp_path / "stricter.yaml",
                                 name="stricter")
    assert (outcome.grades, outcome.complete, len(outcome.graded)) == ("stricter", True, 1)
    assert evalledger.summary(ledger=db, grades="stricter").tasks_failed == 1
    assert evalledger.summary(ledger=db, grades="original").tasks_succeeded == 1
