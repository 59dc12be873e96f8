"""``resume`` closing the attempts a killed runner left started (app/_resume.py): what
their recorded lines show they spent is booked once, never what the runner booked
already, never an attempt a live runner elsewhere may still be running, and before the
run's budget is checked. Real ``evalledger run`` processes, killed with SIGKILL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evalledger.app._callbacks import Callbacks
from evalledger.app._repository import load_folds
from evalledger.app._resume import _close_lost_attempts
from evalledger.ledger import (
    Ledger,
    LedgerError,
    TaskEmitted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
)
from evalledger.projections import ResumeFold, SummaryFold
from tests.cli.helpers import COMMAND, _env, evalledger, spawn, wait_until, write_tasks

from ..needs import root, unavailable

# A Claude Code message cut off (no result line): its estimate is 1,100 tokens.
LINE = {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1000, "output_tokens": 100}, "content": []}}


def _events(db: Path) -> list[object]:
    try:
        with Ledger(db, read_only=True) as ledger:
            return [e for r in ledger.run_ids() for e in ledger.events(r)]
    except LedgerError:  # not made yet
        return []


def _lost(tmp_path: Path, *, then: str = "sleep 60", line: dict[str, object] = LINE,
          **run: str) -> tuple[Path, str]:
    """A run killed (SIGKILL) while its one task, having printed ``line``, runs ``then``
    the first time only (its retry ends at once)."""
    marker = tmp_path / "once"
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": f"echo '{json.dumps(line)}'; if [ ! -e {marker} ]; then touch {marker}; "
                   f"{then}; fi", "stream_format": "claude-code", "timeout": 120,
        "success_criteria": [{"type": "exit_code", "equals": 0}]}})
    db = tmp_path / "l.db"
    proc = spawn(tmp_path, db, "run", str(tasks), *(a for kv in run.items() for a in kv))
    wait_until(lambda: any(isinstance(e, TaskEmitted) for e in _events(db)), "the line")
    proc.kill()
    proc.communicate(timeout=30)
    with Ledger(db, read_only=True) as ledger:
        (run_id,) = ledger.run_ids()
    return db, run_id


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_lost_attempt_is_booked_once_and_closed(tmp_path: Path) -> None:
    db, run = _lost(tmp_path)
    out = evalledger(tmp_path, db, "resume", run)
    assert out.returncode == 0, out.stderr
    assert "default/t/00: attempt 1 was lost with the run's process" in out.stderr
    evs = _events(db)
    assert [(u.tokens.total, u.estimate) for u in evs if isinstance(u, TaskUsage)] == [
        (1100, True), (1100, True)]  # the lost attempt's, then the retry's (no result)
    assert [e.reason.split(":")[0] for e in evs if isinstance(e, TaskInterrupted)] == [
        "runner lost"]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_two_resumes_reading_the_same_state_close_the_attempt_once(tmp_path: Path) -> None:
    db, run = _lost(tmp_path)
    with Ledger(db) as ledger:
        (a, live_a), _ = load_folds(ledger, run, ResumeFold, SummaryFold)
        (b, live_b), _ = load_folds(ledger, run, ResumeFold, SummaryFold)
        assert isinstance(a, ResumeFold) and isinstance(live_a, SummaryFold)
        assert isinstance(b, ResumeFold) and isinstance(live_b, SummaryFold)
        _close_lost_attempts(ledger, a, live_a, Callbacks())
        _close_lost_attempts(ledger, b, live_b, Callbacks())  # the same ids: nothing new
    evs = _events(db)
    assert len([e for e in evs if isinstance(e, TaskUsage)]) == 1
    assert len([e for e in evs if isinstance(e, TaskInterrupted)]) == 1


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_estimate_the_runner_booked_before_it_died_is_not_booked_again(
        tmp_path: Path) -> None:
    """Killed while grading: the attempt's estimate was committed, its end was not."""
    marker = tmp_path / "grading"
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        "command": f"echo '{json.dumps(LINE)}'", "stream_format": "claude-code",
        "timeout": 120, "success_criteria": [{"type": "run_command", "timeout": 100,
            "command": f"if [ ! -e {marker} ]; then touch {marker}; sleep 60; fi"}]}})
    db = tmp_path / "l.db"
    proc = spawn(tmp_path, db, "run", str(tasks))
    wait_until(lambda: marker.exists() and any(isinstance(e, TaskUsage) for e in _events(db)),
               "the estimate booked and grading begun")
    proc.kill()
    proc.communicate(timeout=30)
    with Ledger(db, read_only=True) as ledger:
        (run,) = ledger.run_ids()
    assert evalledger(tmp_path, db, "resume", run).returncode == 0
    booked = [u.tokens.total for u in _events(db) if isinstance(u, TaskUsage)]
    assert booked == [1100, 1100]  # the lost attempt's once, the retry's


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_what_a_lost_attempt_spent_counts_in_the_resumes_budget(tmp_path: Path) -> None:
    big = {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5",
           "usage": {"input_tokens": 1_000_000, "output_tokens": 100}, "content": []}}  # $3
    db, run = _lost(tmp_path, line=big, **{"--max-cost": "1"})
    out = evalledger(tmp_path, db, "resume", run)
    assert out.returncode != 0 or "budget" in out.stderr, out.stderr
    starts = [e for e in _events(db) if isinstance(e, TaskStarted)]
    assert len(starts) == 1, "a second attempt ran though the run had spent $3 of its $1"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_attempt_a_runner_on_another_host_may_still_run_is_left_open(
        tmp_path: Path) -> None:
    root("a UTS namespace of its own (unshare --uts)")
    gate = tmp_path / "gate"
    tasks = write_tasks(tmp_path / "tasks", {"t": {
        # The first attempt waits for the gate; the resume's runs through.
        "command": f"echo '{json.dumps(LINE)}'; if [ ! -e {tmp_path}/once ]; then "
                   f"touch {tmp_path}/once; while [ ! -e {gate} ]; do sleep 0.05; done; fi",
        "stream_format": "claude-code", "timeout": 120,
        "success_criteria": [{"type": "exit_code", "equals": 0}]}})
    db = tmp_path / "l.db"
    command = " ".join([*COMMAND, "--ledger", str(db), "run", str(tasks)])
    try:
        runner = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", f"hostname elsewhere && exec {command}"],
            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        wait_until(lambda: runner.poll() is not None or any(
            isinstance(e, TaskEmitted) for e in _events(db)), "the line")
        if runner.poll() is not None:
            unavailable("ROOT", "no UTS namespace here: "
                                f"{runner.communicate()[1].strip()[:200]}")
        with Ledger(db, read_only=True) as ledger:
            (run,) = ledger.run_ids()
        out = evalledger(tmp_path, db, "resume", run)
        assert "left started by host 'elsewhere' are not closed" in out.stderr, out.stderr
    finally:
        gate.write_text("go")
        runner.communicate(timeout=60)
    assert not any(isinstance(e, TaskInterrupted) for e in _events(db))
