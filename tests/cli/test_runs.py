"""``evalledger runs``: a table that fits the terminal without ever cutting a run id,
and the same rows as csv, tsv and json for programs.

The ledger is real (runs recorded with the event models, as the executor would);
the table is read off a real terminal of 80, 100 and 120 columns, the formats from
a real process's stdout.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskStarted,
    TaskUsage,
)
from evalledger.statuses import FinalStatus, RunStatus

from .helpers import COMMAND, PATIENCE, _env
from .terminal import in_terminal

KEYS = [f"default/t{i}/00" for i in range(3)]
# (run id, experiment id, start, how it ended): ids as `run` makes them, one named by
# hand (as long as a descriptive name gets), experiment ids as long as real ones get.
RUNS = [
    ("2026-03-01_10-00-00", "imported-from-the-old-harness", "2026-03-01T10:00:00.000000Z",
     RunStatus.COMPLETED),
    ("20261201-123456-3f9a", "claude-sonnet-4-5-vs-claude-opus-4-1-on-the-refactoring-suite",
     "2026-12-01T12:34:56.000000Z", RunStatus.BUDGET_STOPPED),
    ("nightly-regression-full-suite-2026-12-02", None, "2026-12-02T01:00:00.000000Z",
     RunStatus.COMPLETED),
    ("20261203-080000-beef", "a-very-long-experiment-identifier-for-the-coding-agent-suite-v2",
     "2026-12-03T08:00:00.000000Z", RunStatus.INTERRUPTED),
]
STATUSES = [FinalStatus.SUCCESS, FinalStatus.FAILURE, FinalStatus.NOT_GRADED]


@pytest.fixture
def ledger_of_runs(tmp_path: Path) -> Path:
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        for n, (run_id, experiment, ts, ended) in enumerate(RUNS):
            events: list[Any] = [RunStarted(run_id=run_id, experiment_id=experiment,
                                            planned=KEYS, ts=ts)]
            for key, status in zip(KEYS, STATUSES, strict=True):
                events += [
                    TaskStarted(run_id=run_id, task_key=key, task_id=key.split("/")[1]),
                    TaskUsage(run_id=run_id, task_key=key, model="m",
                              cost_usd=1234.5678 * n if n != 2 else None, input_tokens=9),
                    TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                                  category=status.category, duration_seconds=1.0,
                                  cost_usd=1234.5678 * n if n != 2 else None,
                                  cost_complete=n != 2),
                ]
            events.append(RunFinished(run_id=run_id, status=ended))
            ledger.append(events)
    return db


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("columns", [80, 100, 120])
def test_runs_fits_the_terminal_and_never_cuts_a_run_id(ledger_of_runs: Path,
                                                        columns: int) -> None:
    code, lines = in_terminal(ledger_of_runs.parent, "--ledger", str(ledger_of_runs), "runs",
                              columns=columns)
    assert code == 0, lines
    shown = [line.rstrip() for line in lines if line.strip()]
    too_wide = [line for line in shown if len(line) > columns]
    assert not too_wide, "\n".join(shown)
    newest_first = [run_id for run_id, *_ in sorted(RUNS, key=lambda r: r[2], reverse=True)]
    # Each run id whole, at the start of its own line, newest first.
    assert [line.split()[0] for line in shown[2:]] == newest_first, "\n".join(shown)
    if columns >= 100:  # header, rule, one line a run
        assert len(shown) == 2 + len(RUNS), "\n".join(shown)
    assert [line.split()[-1] for line in shown[2:]] == [
        "$11,111.11", "unknown", "$3,703.70", "$0.0000"], "\n".join(shown)


def _runs(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "--ledger", str(db), "runs", *args], cwd=db.parent,
                          env=_env(), capture_output=True, text=True, timeout=PATIENCE,
                          check=False)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_runs_formats_parse_back_to_the_same_rows(ledger_of_runs: Path) -> None:
    as_json = _runs(ledger_of_runs, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["run_id"] for r in rows] == [r[0] for r in reversed(RUNS)]
    assert rows[2]["status"] == "budget_stopped" and rows[2]["cost_usd"] == pytest.approx(
        3 * 1234.5678)
    assert rows[1]["cost_complete"] is False and rows[1]["experiment_id"] is None

    def text(value: Any) -> str:  # a JSON value as csv and tsv spell it
        return "" if value is None else json.dumps(value) if isinstance(value, bool) else str(
            value)

    expected = [{k: text(v) for k, v in row.items()} for row in rows]
    as_csv = _runs(ledger_of_runs, "--format", "csv")
    assert as_csv.returncode == 0, as_csv.stderr
    assert list(csv.DictReader(io.StringIO(as_csv.stdout))) == expected
    as_tsv = _runs(ledger_of_runs, "--format", "tsv")
    assert as_tsv.returncode == 0, as_tsv.stderr
    header, *lines = as_tsv.stdout.splitlines()
    assert [dict(zip(header.split("\t"), line.split("\t"), strict=True))
            for line in lines] == expected
    # --json, as before, is --format json.
    assert _runs(ledger_of_runs, "--json").stdout == as_json.stdout
    clash = _runs(ledger_of_runs, "--json", "--format", "csv")
    assert clash.returncode == 2 and clash.stderr.count("\n") == 1, clash.stderr
    assert "--json and --format csv disagree" in clash.stderr
