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
import sys
import time
from pathlib import Path

import pytest

from evalledger.executor._process import kill_marked
from evalledger.ledger import Ledger

from .test_resume import wait_for_start
from .test_run_e2e import COMMAND, SUMMARY, _env, evalledger, events, of_type, write_task

TASKS = 12
CHATTY = (
    "import sys, time\n"
    "for i in range(200):\n"
    "    print(f'line {i}')\n"
    "    if i % 50 == 0: sys.stdout.flush(); time.sleep(0.08)\n"
)


@pytest.mark.parametrize("after", [0.0, 0.3, 0.7, 1.1])
def test_sigkill_leaves_a_ledger_that_verifies_and_resumes(tmp_path: Path, after: float) -> None:
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    for i in range(TASKS):
        write_task(tasks / f"t{i:02d}.yaml", [sys.executable, "-c", CHATTY])
    run = subprocess.Popen(
        [*COMMAND, "--ledger", str(db), "run", str(tasks), "--run-id", "crash", "-j", "3"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_start(db, "crash")
        time.sleep(after)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=20)

    checked = evalledger(tmp_path, db, "verify")
    assert checked.returncode == 0, checked
    before = events(db, "crash")
    assert not of_type(before, "run.finished"), "the run ended before the kill: slow the tasks"
    started = {e.task_key for e in of_type(before, "task.started")}
    # A completion is only ever recorded for a task recorded as started, in order.
    for done in of_type(before, "task.completed"):
        assert done.task_key in started
        first_start = next(e.seq for e in before if e.type == "task.started"
                           and e.task_key == done.task_key)
        assert first_start < done.seq
    finished_before = {e.task_key for e in of_type(before, "task.completed")}

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


def test_show_says_when_a_running_run_was_cut_off(tmp_path: Path) -> None:
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    write_task(tasks / "slow.yaml", "sleep 30", timeout=60)
    run = subprocess.Popen(
        [*COMMAND, "--ledger", str(db), "run", str(tasks), "--run-id", "cut"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_start(db, "cut")
        live = evalledger(tmp_path, db, "show", "cut")
        assert "is gone" not in live.stderr, live.stderr
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=20)
        kill_marked("EVALLEDGER_RUN_ID=cut")  # the orphaned `sleep 30`
    shown = evalledger(tmp_path, db, "show", "cut")
    assert shown.returncode == 0, shown
    assert "run cut running" in shown.stdout
    assert "evalledger resume cut" in shown.stderr
