"""A ledger deleted or replaced under a running ``run`` or ``resume``: the run ends at once
with one line naming the ledger and exit 2; nothing says it completed, no report claims
an anchor in a ledger that is gone.

Before, the run kept writing into the unlinked file, printed "completed", wrote
run.json with an anchor and exited 0: every event was lost.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger._rows import text_id

from .helpers import (
    PATIENCE,
    SUMMARY,
    Result,
    assert_one_line_error,
    evalledger,
    spawn,
    wait_for_start,
    write_task,
)

# Each task waits for a file the test creates once the ledger is gone: the run cannot
# end before, however loaded the machine.
GATED = 'while [ ! -e "$GATE" ]; do sleep 0.02; done; echo released'
TASKS = 3


def _rm(db: Path) -> None:
    db.unlink()


def _rm_folder(db: Path) -> None:
    shutil.rmtree(db.parent)


def _replace(db: Path) -> None:
    """Another file renamed over the ledger's name (a restored backup, a second tool)."""
    other = db.with_name("other")
    shutil.copyfile(db, other)
    os.replace(other, db)


def _rm_wal(db: Path) -> None:
    """The -wal alone: every reader that opens the ledger now misses what it held."""
    Path(f"{db}-wal").unlink()


ATTACKS: dict[str, Callable[[Path], None]] = {
    "rm": _rm, "rm -rf folder": _rm_folder, "replaced": _replace, "rm -wal": _rm_wal,
}


def _tasks(folder: Path, gate: Path, command: str = GATED) -> Path:
    """``command`` may name ``$FIRST``: a file of the task's own, absent at first."""
    for i in range(TASKS):
        write_task(folder / f"t{i}.yaml", command, timeout=600,
                   env={"GATE": str(gate), "FIRST": str(folder.parent / f"first-{i}")})
    return folder


def _finish(proc: subprocess.Popen[str], gate: Path) -> Result:
    gate.touch()
    try:
        out, err = proc.communicate(timeout=PATIENCE)
    finally:
        proc.kill()
    return Result(proc.returncode, out, err)


def _assert_ended_at_once(result: Result, db: Path, report: Path) -> None:
    error = assert_one_line_error(result)
    assert str(db) in error, error
    assert "completed" not in result.stdout, result.stdout
    assert not any(SUMMARY.match(line) for line in result.out_lines), result.stdout
    for name in ("run.json", "run.md", "report.html"):
        assert not (report / name).exists(), f"{name} written for a run into a ledger gone"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_ledger_deleted_under_a_run_ends_it_with_one_line(tmp_path: Path,
                                                            attack: str) -> None:
    db, gate = tmp_path / "ledger" / "l.db", tmp_path / "gate"
    db.parent.mkdir()
    tasks = _tasks(tmp_path / "tasks", gate)
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", "r", "--out",
                str(tmp_path / "out"), "-j", str(TASKS))
    try:
        wait_for_start(db, "r", proc=run)
        ATTACKS[attack](db)
    finally:
        result = _finish(run, gate)
    _assert_ended_at_once(result, db, tmp_path / "out" / "r")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("attack", ["rm", "rm -rf folder"])
def test_a_ledger_deleted_under_a_resume_ends_it_with_one_line(tmp_path: Path,
                                                               attack: str) -> None:
    db, gate = tmp_path / "ledger" / "l.db", tmp_path / "gate"
    db.parent.mkdir()
    # Fails the first time; on the resume that re-runs it, waits for the gate.
    command = f'if [ -e "$FIRST" ]; then {GATED}; else touch "$FIRST"; exit 1; fi'
    tasks = _tasks(tmp_path / "tasks", gate, command)
    out = tmp_path / "out"
    failed = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r", "--out", str(out))
    assert failed.returncode == 1, failed.stderr
    for name in ("run.json", "run.md", "report.html"):  # the first run's
        (out / "r" / name).unlink()
    resume = spawn(tmp_path, db, "resume", "r", "--rerun-failed", "-j", str(TASKS))
    try:
        wait_for_start_of_attempt(db, resume)
        ATTACKS[attack](db)
    finally:
        result = _finish(resume, gate)
    _assert_ended_at_once(result, db, out / "r")


def wait_for_start_of_attempt(db: Path, proc: subprocess.Popen[str]) -> None:
    """Until the resume has started its tasks again (a second task.started each)."""
    from .helpers import wait_for_events

    wait_for_events(db, "r", "task.started", at_least=TASKS + 1, proc=proc)


def _committed_ids(db: Path) -> set[str]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return {text_id(event_id) for (event_id,) in conn.execute("SELECT event_id FROM events")}


def _run_ids(cwd: Path, db: Path) -> list[str]:
    listed = evalledger(cwd, db, "runs", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return sorted(json.loads(line)["run_id"] for line in listed.out_lines)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_ledger_renamed_over_a_running_one_is_left_as_it_came(tmp_path: Path) -> None:
    """SQLite keeps the -wal of a file that was replaced, and it stayed at the path: the
    ledger renamed in (a restored backup) read as the run's old one, and the next run
    wrote that into it for good."""
    db, gate, other = tmp_path / "ledger" / "l.db", tmp_path / "gate", tmp_path / "other.db"
    db.parent.mkdir()
    write_task(tmp_path / "quick" / "t.yaml", "echo hi")
    assert evalledger(tmp_path, other, "run", "quick", "--run-id", "restored").returncode == 0
    tasks = _tasks(tmp_path / "tasks", gate)
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", "r", "--out",
                str(tmp_path / "out"), "-j", str(TASKS))
    try:
        wait_for_start(db, "r", proc=run)
        shutil.copyfile(other, tmp_path / "ledger" / "incoming.db")
        os.replace(tmp_path / "ledger" / "incoming.db", db)
    finally:
        result = _finish(run, gate)
    _assert_ended_at_once(result, db, tmp_path / "out" / "r")
    assert _run_ids(tmp_path, db) == ["restored"]
    assert evalledger(tmp_path, db, "run", "quick", "--run-id", "next").returncode == 0
    assert _run_ids(tmp_path, db) == ["next", "restored"]
    assert evalledger(tmp_path, db, "verify").returncode == 0


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_ledger_moved_away_under_a_run_keeps_every_event_it_committed(
    tmp_path: Path,
) -> None:
    """The events a run committed before its ledger was moved were in the -wal, which
    stayed behind at the old name: the moved file held no table at all."""
    db, gate = tmp_path / "ledger" / "l.db", tmp_path / "gate"
    db.parent.mkdir()
    tasks = _tasks(tmp_path / "tasks", gate)
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", "r", "-j", str(TASKS))
    try:
        wait_for_start(db, "r", proc=run)
        committed = _committed_ids(db)
        os.rename(db, tmp_path / "moved.db")
    finally:
        result = _finish(run, gate)
    assert_one_line_error(result)
    assert committed <= _committed_ids(tmp_path / "moved.db")
    assert evalledger(tmp_path, tmp_path / "moved.db", "verify").returncode == 0
