"""Runs appended by hand, the same in a test and in the other processes it starts (which
import them from here): a short run, a run as a merge appends it, a run as the executor
records it."""

from __future__ import annotations

import uuid

from evalledger.app._repository import write_snapshot
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunMerged,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.statuses import FinalStatus, RunStatus


def short_run(run_id: str) -> list:
    """A run of three events: started, one line of output, finished."""
    return [RunStarted(run_id=run_id, planned=["t1"]),
            TaskOutput(run_id=run_id, task_key="t1", line="hello", n=1),
            RunFinished(run_id=run_id, status=RunStatus.COMPLETED)]


FOREIGN = str(uuid.uuid4())  # the id of the ledger the merged runs came from


def merged_run(run_id: str, lines: int = 3) -> list:
    """A run as a merge appends it: its events, then its run.merged, in one batch."""
    events: list = [RunStarted(run_id=run_id, planned=["default/t/00"], ledger_id=FOREIGN),
                    TaskStarted(run_id=run_id, task_key="default/t/00", task_id="t")]
    events += [TaskOutput(run_id=run_id, task_key="default/t/00", line=f"line {n}", n=n)
               for n in range(1, lines + 1)]
    return [*events, RunMerged(run_id=run_id, events=len(events), source="/elsewhere/other.db",
                               source_ledger=FOREIGN, source_seqs=[1, len(events)])]


def native_run(ledger: Ledger, run_id: str) -> None:
    """A run recorded here, batch by batch as the executor commits it, then snapshotted."""
    key = "default/t/00"
    ledger.append([RunStarted(run_id=run_id, planned=[key], ledger_id=ledger.ledger_id)])
    ledger.append([TaskStarted(run_id=run_id, task_key=key, task_id="t"),
                   *(TaskOutput(run_id=run_id, task_key=key, line=f"l{n}", n=n)
                     for n in range(1, 6))])
    ledger.append([TaskCompleted(run_id=run_id, task_key=key, final_status=FinalStatus.FAILURE,
                                 category="failed", exit_code=1)])
    ledger.append([RunFinished(run_id=run_id, status=RunStatus.COMPLETED)])
    write_snapshot(ledger, run_id)
