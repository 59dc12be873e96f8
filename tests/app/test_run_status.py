"""One run status: ``shown_status`` (through the read side, the viewer and ``runs``)
against its SQL twin, the ``runs`` view, on one ledger made by real runs ending every
way a run ends: completed, interrupted by SIGINT, cut off by SIGKILL, still running,
imported from an old harness's folder, carried in by ``import-events``, merged from
shards, and cut off on another host.

The view reads the ledger alone and cannot ask whether a process lives: where the
status depends on that, it says what ``ShownStatus.in_sql`` says (docs/ledger.md).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from evalledger.app._repository import listed_runs, run_is_over
from evalledger.executor._process import kill_marked
from evalledger.ledger import Ledger, RunStarted, TaskStarted
from evalledger.projections import shown_status
from evalledger.statuses import RunStatus, ShownStatus
from evalledger.viewer._state import LedgerState
from tests.cli.helpers import PATIENCE, evalledger, spawn, wait_for_start, write_task
from tests.importers.old_runs import task_json, write

LEGACY = "2026-03-01_10-00-00"
EXPECTED = {
    "done": ShownStatus.COMPLETED,
    "stopped": ShownStatus.INTERRUPTED,
    "killed": ShownStatus.CUT_OFF,
    LEGACY: ShownStatus.COMPLETED,
    "carried": ShownStatus.COMPLETED,
    "sharded": ShownStatus.COMPLETED,
    # Recorded on another machine and never finished: this host cannot tell whether it
    # still runs there, so it is not called cut off.
    "elsewhere": ShownStatus.RUNNING,
}


def sql_statuses(db: Path) -> dict[str, str]:
    with Ledger(db, read_only=True) as ledger:
        _, rows = ledger.query("SELECT run_id, status FROM runs")
    return dict(rows)


def shown_everywhere(db: Path) -> dict[str, dict[str, ShownStatus]]:
    """Each run's shown status as each reader says it."""
    with Ledger(db, read_only=True) as ledger:
        listed = {run.columns["run_id"]: run.shown for run in listed_runs(ledger, 100)}
        over = {run_id: run_is_over(ledger, run_id) for run_id in listed}
    viewer = LedgerState(db)
    viewer.load()
    runs = evalledger(db.parent, db, "runs", "--format", "json", "--limit", "100")
    assert runs.returncode == 0, runs
    cli = {}
    for line in runs.out_lines:
        row = json.loads(line)
        cli[row["run_id"]] = ShownStatus.CUT_OFF if row["cut_off"] else ShownStatus(row["status"])
        assert not row["cut_off"] or row["status"] == "running", row
    assert all(over[r] == (s is not ShownStatus.RUNNING) for r, s in listed.items()), over
    return {"read side": listed, "viewer": {r: s.shown_status for r, s in viewer.runs.items()},
            "runs --format json": cli}


def slow_run(tmp_path: Path, db: Path, run_id: str) -> subprocess.Popen[str]:
    tasks = tmp_path / f"slow-{run_id}"
    # Far longer than the test takes: only a signal ends it.
    write_task(tasks / "slow.yaml", "sleep 600", timeout=1200,
               env={"STATUS_TEST": str(tmp_path)})
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", run_id,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_start(db, run_id, proc=run)
    return run


@pytest.fixture(scope="module")
def every_ending(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("statuses")
    db = tmp_path / "l.db"
    tasks = tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "true")
    write_task(tasks / "also.yaml", "true")
    write_task(tasks / "third.yaml", "true")
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "done").returncode == 0

    stopped = slow_run(tmp_path, db, "stopped")
    stopped.send_signal(signal.SIGINT)
    assert stopped.wait(timeout=PATIENCE) == 130

    killed = slow_run(tmp_path, db, "killed")
    try:
        # Alive, on this host: running for both, which is what the view always says.
        assert shown_everywhere(db)["read side"]["killed"] is ShownStatus.RUNNING
        assert sql_statuses(db)["killed"] == "running"
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=PATIENCE)
        kill_marked(f"STATUS_TEST={tmp_path}")  # the killed run's orphaned `sleep`

    old = tmp_path / "old"
    write(old / LEGACY, "run.json", {"run_id": LEGACY, "start_time": "2026-03-01T10:00:00",
                                     "end_time": "2026-03-01T10:30:00"})
    write(old / LEGACY, "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    assert evalledger(tmp_path, db, "import", str(old), "--tz", "UTC").returncode == 0

    other = tmp_path / "other.db"
    assert evalledger(tmp_path, other, "run", str(tasks), "--run-id", "carried").returncode == 0
    with Ledger(other) as ledger:
        ledger.append([
            RunStarted(run_id="elsewhere", planned=["default/t/00"],
                       host={"hostname": f"not-{socket.gethostname()}", "pid": 1}),
            TaskStarted(run_id="elsewhere", task_key="default/t/00", task_id="t"),
        ])
    exported = tmp_path / "carried.ndjson"
    assert evalledger(tmp_path, other, "export", "carried", "elsewhere", "-o",
                      str(exported)).returncode == 0
    assert evalledger(tmp_path, db, "import-events", str(exported)).returncode == 0

    shards = [tmp_path / "shard-1.db", tmp_path / "shard-2.db"]
    for shard, which in zip(shards, ("1/2", "2/2"), strict=True):
        ran = evalledger(tmp_path, shard, "run", str(tasks), "--run-id", "sharded",
                         "--shard", which)
        assert ran.returncode == 0, ran
    assert evalledger(tmp_path, db, "merge", *map(str, shards)).returncode == 0
    return db


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_every_reader_shows_each_ending_as_shown_status_says(every_ending: Path) -> None:
    for reader, statuses in shown_everywhere(every_ending).items():
        assert statuses == EXPECTED, reader


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_runs_view_is_the_sql_twin_of_shown_status(every_ending: Path) -> None:
    shown = shown_everywhere(every_ending)["read side"]
    assert sql_statuses(every_ending) == {r: s.in_sql for r, s in shown.items()}


def test_what_the_view_says_where_it_cannot_know_liveness() -> None:
    # Documented in docs/ledger.md (the runs view's status): a run cut off is running
    # there; every other status is the same word.
    assert {s: s.in_sql for s in ShownStatus} == {
        ShownStatus.RUNNING: "running", ShownStatus.COMPLETED: "completed",
        ShownStatus.INTERRUPTED: "interrupted", ShownStatus.BUDGET_STOPPED: "budget_stopped",
        ShownStatus.INFRA_STOPPED: "infra_stopped", ShownStatus.CUT_OFF: "running"}
    assert {s.value for s in RunStatus} < {s.value for s in ShownStatus}


@pytest.mark.parametrize("recorded", [s.value for s in RunStatus])
def test_a_finished_run_never_asks_whether_its_process_lives(recorded: str) -> None:
    def ask() -> bool:
        raise AssertionError("asked")

    assert shown_status(recorded, ask) == recorded


def test_a_running_run_is_cut_off_exactly_when_its_process_is_gone() -> None:
    assert shown_status("running", lambda: False) is ShownStatus.RUNNING
    assert shown_status("running", lambda: True) is ShownStatus.CUT_OFF
    with pytest.raises(ValueError):
        shown_status("exploded", lambda: True)
