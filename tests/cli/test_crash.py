"""``evalledger run`` killed with SIGKILL at any moment: nothing committed is lost,
``verify`` accepts the ledger, and ``resume`` finishes the run.

SIGKILL gives the process no chance to clean up, so this is what a crash, an OOM
kill or a pulled plug (minus the disk) looks like to the ledger. The kill lands
at several points of a run of short tasks that stream output: while tasks are
being dispatched, while output lines are being group-committed, and near the end.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from evalledger.executor._process import kill_marked
from evalledger.ledger import Ledger

from .helpers import (
    PATIENCE,
    SUMMARY,
    evalledger,
    events,
    of_type,
    spawn,
    wait_for_events,
    wait_for_start,
    write_task,
)

TASKS = 12
# Output in bursts with pauses, so that kills land while lines are being group-committed.
CHATTY = "for burst in 1 2 3 4; do seq 50 | sed 's/^/line /'; sleep 0.02; done"
# The last task waits for a file the test creates only after the kill: the run cannot
# end before the kill, however the machine is loaded.
GATED = 'while [ ! -e "$GATE" ]; do sleep 0.05; done; echo opened'
# Where the kill lands: after N committed events of a type.
KILL_POINTS = {
    "dispatching": ("task.started", 1),
    "streaming": ("task.output", 150),
    "completing": ("task.completed", 4),
    "near-the-end": ("task.completed", TASKS - 1),  # all but the gated task
}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_leaves_a_ledger_that_verifies_and_resumes(tmp_path: Path, point: str) -> None:
    db, tasks, gate = tmp_path / "l.db", tmp_path / "tasks", tmp_path / "gate"
    mark = {"CRASH_TEST": str(tmp_path)}  # finds this test's orphans, and no one else's
    for i in range(TASKS - 1):
        write_task(tasks / f"t{i:02d}.yaml", CHATTY, env=mark)
    write_task(tasks / f"t{TASKS - 1:02d}.yaml", GATED, env={**mark, "GATE": str(gate)},
               timeout=600)
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", "crash", "-j", "3",
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        type_, count = KILL_POINTS[point]
        wait_for_events(db, "crash", type_, count, proc=run)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=PATIENCE)
    try:
        _check_and_resume(tmp_path, db, gate)
    finally:
        gate.touch()
        kill_marked(f"CRASH_TEST={tmp_path}")  # the killed run's orphaned tasks


def _check_and_resume(tmp_path: Path, db: Path, gate: Path) -> None:
    checked = evalledger(tmp_path, db, "verify")
    assert checked.returncode == 0, checked
    before = events(db, "crash")
    assert not of_type(before, "run.finished"), "the run ended before the kill"
    started = {e.task_key for e in of_type(before, "task.started")}
    # A completion is only ever recorded for a task recorded as started, in order.
    for done in of_type(before, "task.completed"):
        assert done.task_key in started
        first_start = next(e.seq for e in before if e.type == "task.started"
                           and e.task_key == done.task_key)
        assert first_start < done.seq
    finished_before = {e.task_key for e in of_type(before, "task.completed")}

    gate.touch()
    resumed = evalledger(tmp_path, db, "resume", "crash")
    assert resumed.returncode == 0, resumed
    summary = next(m for line in resumed.out_lines if (m := SUMMARY.match(line)))
    assert (summary["run"], summary["planned"], summary["succeeded"]) == (
        str(TASKS), str(TASKS), str(TASKS)
    )
    assert evalledger(tmp_path, db, "verify").returncode == 0

    after_resume = events(db, "crash")
    # What was committed before the kill is still there, unchanged, at the front.
    assert [e.event_id for e in after_resume[: len(before)]] == [e.event_id for e in before]
    # Tasks finished before the kill are not run again.
    rerun = {e.task_key for e in of_type(after_resume[len(before):], "task.started")}
    assert not rerun & finished_before
    assert after_resume[-1].type == "run.finished"
    with Ledger(db, read_only=True) as ledger:
        _, rows = ledger.query(
            "SELECT final_status, count(*) FROM task_results WHERE run_id = 'crash' GROUP BY 1"
        )
    assert rows == [("SUCCESS", TASKS)]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_show_says_when_a_running_run_was_cut_off(tmp_path: Path) -> None:
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    # Far longer than the test can take: the run is still going when it is killed.
    write_task(tasks / "slow.yaml", "sleep 600", timeout=1200,
               env={"CRASH_TEST": str(tmp_path)})
    run = spawn(tmp_path, db, "run", str(tasks), "--run-id", "cut",
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_start(db, "cut", proc=run)
        live = evalledger(tmp_path, db, "show", "cut")
        assert live.returncode == 0, live
        assert "is gone" not in live.stderr, live.stderr
        assert "run cut running: " in live.stdout  # its process is alive: it is running
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=PATIENCE)
        kill_marked(f"CRASH_TEST={tmp_path}")  # the orphaned `sleep 600`
    shown = evalledger(tmp_path, db, "show", "cut")
    assert shown.returncode == 0, shown
    assert "run cut cut off: " in shown.stdout  # the word `runs` uses too
    assert "evalledger resume cut" in shown.stderr
