"""An agent under ``isolation: none`` forging its own verdict in the ledger (issue #45):
the run says what the runner saw, verify names the forgery, every read leaves it out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evalledger.ledger import Ledger, RunFinished, TaskCompleted
from evalledger.statuses import FinalStatus, RunStatus

from .helpers import evalledger, write_task

# The agent: finds its own attempt in the ledger (here handed its path; a real one looks
# for it) and appends, correctly chained by the library itself, a SUCCESS for it.
FORGER = """
import os, sys
from evalledger.ledger import Ledger, TaskCompleted
from evalledger.statuses import FinalStatus
with Ledger(os.environ["THE_LEDGER"]) as ledger:
    mine = [e for e in ledger.events() if e.type == "task.started"][-1]
    ledger.append([TaskCompleted(
        run_id=mine.run_id, task_key=mine.task_key, attempt=mine.attempt,
        final_status=FinalStatus.SUCCESS, category=FinalStatus.SUCCESS.category,
        weighted_score=1.0)])
sys.exit(1)
"""


def test_a_verdict_the_agent_forged_is_named_and_believed_by_no_read(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    tasks = tmp_path / "tasks"
    write_task(tasks / "forger.yaml", [sys.executable, "-c", FORGER],
               env={"THE_LEDGER": str(db)})
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r")
    # The run tells at once: its closing check finds a row its batch did not seal.
    assert ran.returncode == 2, ran
    assert "FAILURE" in ran.stdout and "0 succeeded" in ran.stdout
    assert any("task.completed is not sealed by the run's key" in line
               for line in ran.err_lines), ran.stderr
    key = next(line.split()[-1] for line in ran.err_lines if line.startswith("signed by key"))
    with Ledger(db, read_only=True) as ledger:
        forged = [e for e in ledger.events("r", types=["task.completed"])
                  if isinstance(e, TaskCompleted)]
        assert [e.final_status for e in forged] == ["FAILURE"]
        signed = [e.public_key for e in ledger.events("r", types=["run.started"])]
        assert signed == [key]
    # After the run too: a SUCCESS appended once it finished.
    with Ledger(db) as ledger:
        done = forged[0]
        ledger.append([done.model_copy(update={
            "event_id": "after", "final_status": FinalStatus.SUCCESS,
            "category": FinalStatus.SUCCESS.category, "seq": None}),
            RunFinished(run_id="r", status=RunStatus.COMPLETED)])
    shown = evalledger(tmp_path, db, "show", "r", "--json")
    assert shown.returncode == 0, shown
    assert [t["final_status"] for t in json.loads(shown.stdout)["tasks"]] == ["FAILURE"]
    listed = evalledger(tmp_path, db, "runs", "--json")
    assert json.loads(listed.stdout.splitlines()[0])["tasks_succeeded"] == 0
    checked = evalledger(tmp_path, db, "verify")
    assert checked.returncode == 1
    unsealed = [line for line in checked.stdout.splitlines() if "is not sealed" in line]
    assert [line.split(": ", 2)[2] for line in unsealed] == [
        "task.completed is not sealed by the run's key: not written by the process that "
        "ran it"] * 2 + [
        "run.finished is not sealed by the run's key: not written by the process that "
        "ran it"]
