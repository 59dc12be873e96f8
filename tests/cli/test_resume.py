"""``resume`` beyond the Ctrl-C path: repeated resumes, exit codes, live runs, failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalledger.cli import cli
from evalledger.ledger import EventRow, Ledger, LedgerIOError

from .helpers import (
    PATIENCE,
    assert_one_line_error,
    evalledger,
    spawn,
    wait_for_start,
    write_task,
)


def _two_task_suite(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "true")
    broken = write_task(tasks / "broken.yaml", "true")
    broken.write_text(broken.read_text() + "workdir: no-such-folder\n")
    return tasks


def test_repeated_resumes_see_no_false_drift(tmp_path: Path) -> None:
    # Regression: run.resumed used to fingerprint only the keys it re-ran, so the
    # next resume saw every kept task as "new" and --strict refused.
    db, tasks = tmp_path / "l.db", _two_task_suite(tmp_path)
    first = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r")
    assert first.returncode == 1  # BUILD_FAILED
    for _ in range(2):
        again = evalledger(tmp_path, db, "resume", "r", "--retry-errors", "--strict")
        assert again.returncode == 1, again
        assert "drift:" not in again.stderr
    with Ledger(db, read_only=True) as ledger:
        resumed = list(ledger.events("r", types={"run.resumed"}))
    assert len(resumed) == 2
    assert all(set(e.fingerprint.tasks) == {"default/ok/00", "default/broken/00"}
               for e in resumed)
    assert all(e.to_run == ["default/broken/00"] for e in resumed)


def test_nothing_to_resume_exits_with_the_runs_outcome(tmp_path: Path) -> None:
    db, tasks = tmp_path / "l.db", _two_task_suite(tmp_path)
    evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r")
    idle = evalledger(tmp_path, db, "resume", "r")
    assert "nothing to resume" in idle.stdout
    assert idle.returncode == 1  # a task failed in this run: not 0


def test_a_run_cut_off_after_its_last_task_is_ended_by_resume(tmp_path: Path) -> None:
    """Seen in the SIGKILL test: killed between the last task.completed and run.finished,
    the run stayed `running` for good, since resume found nothing to run."""
    tasks = tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "true")
    whole, db = tmp_path / "whole.db", tmp_path / "l.db"
    assert evalledger(tmp_path, whole, "run", str(tasks), "--run-id", "r").returncode == 0
    gone = subprocess.Popen(["true"])
    gone.wait()
    with Ledger(whole, read_only=True) as source, Ledger(db) as target:
        rows = list(source.rows("r"))
        end = next(i for i, row in enumerate(rows) if row.type == "run.finished")
        kept = [EventRow(*row[:6]) for row in rows[:end]]  # its seals, unchanged, with it
        target.append(kept)
    resumed = evalledger(tmp_path, db, "resume", "r")
    assert resumed.returncode == 0, resumed
    assert "nothing to resume" not in resumed.stdout
    with Ledger(db, read_only=True) as ledger:
        tail = [e.type for e in ledger.events("r") if e.type != "run.snapshot"][-2:]
        finished = [e for e in ledger.events("r", types={"run.finished"})]
    assert tail == ["run.resumed", "run.finished"]
    assert [e.status for e in finished] == ["completed"]
    again = evalledger(tmp_path, db, "resume", "r")
    assert "nothing to resume" in again.stdout and again.returncode == 0


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_run_still_going_is_not_resumed_twice(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    # Far longer than the test can take: only the signal ends it.
    write_task(tmp_path / "tasks" / "slow.yaml", "sleep 600", timeout=1200)
    running = spawn(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "live")
    try:
        wait_for_start(db, "live", proc=running)
        second = evalledger(tmp_path, db, "resume", "live")
        message = assert_one_line_error(second)
        assert f"still running (pid {running.pid}" in message
    finally:
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=PATIENCE)
    assert running.returncode == 130


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_sighup_is_an_interruption(tmp_path: Path) -> None:
    # A closed terminal must not leave agents running and the run unended.
    db = tmp_path / "l.db"
    # Far longer than the test can take: only the signal ends it.
    write_task(tmp_path / "tasks" / "slow.yaml", "sleep 600", timeout=1200)
    running = spawn(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "hup")
    try:
        wait_for_start(db, "hup", proc=running)
        running.send_signal(signal.SIGHUP)
        running.communicate(timeout=PATIENCE)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 130
    with Ledger(db, read_only=True) as ledger:
        types = [e.type for e in ledger.events("hup") if e.type != "run.snapshot"]
    assert types[-2:] == ["task.interrupted", "run.finished"]


def test_a_ledger_failure_mid_run_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the failure arrives wrapped in an exception group from the nurseries;
    # it used to reach the user as a traceback with exit 1.
    write_task(tmp_path / "tasks" / "a.yaml", [sys.executable, "-c", "print('hi')"])
    calls = {"n": 0}
    real_append = Ledger.append

    def failing_append(self: Ledger, events: object, **kwargs: object) -> list[int]:
        calls["n"] += 1
        if calls["n"] >= 3:
            raise LedgerIOError(f"{self.path}: database or disk is full")
        return real_append(self, events, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Ledger, "append", failing_append)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["--ledger", str(tmp_path / "l.db"), "run", str(tmp_path / "tasks")]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("Error:")
    assert "disk is full" in result.stderr
    assert "Traceback" not in result.stderr
    assert os.path.exists(tmp_path / "l.db")
