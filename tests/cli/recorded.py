"""Runs recorded straight into a ledger with the event models, as the executor would
record them: what the reading commands read (no batch runs)."""

from __future__ import annotations

from pathlib import Path

from evalledger.app._repository import write_snapshot
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.statuses import FinalStatus, RunStatus

KEYS = ["default/a/00", "default/b/00", "default/c/00"]


def record_run(ledger: Ledger, run_id: str, statuses: dict[str, FinalStatus]) -> None:
    """A finished run planning ``KEYS``: each key of ``statuses`` ran once and ended so."""
    events: list = [RunStarted(run_id=run_id, planned=KEYS, max_parallel=2)]
    for key, status in statuses.items():
        events += [
            TaskStarted(run_id=run_id, task_key=key, task_id=key.split("/")[1]),
            TaskOutput(run_id=run_id, task_key=key, line=f"working on {key}", n=1),
            TaskUsage(run_id=run_id, task_key=key, model="m", input_tokens=10, cost_usd=0.5),
            TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                          category=status.category, duration_seconds=2.0,
                          weighted_score=1.0 if status == "SUCCESS" else 0.0,
                          tokens=TokenCounts(input_tokens=10), cost_usd=0.5),
        ]
    events.append(RunFinished(run_id=run_id, status=RunStatus.COMPLETED))
    ledger.append(events)


def record_large_run(db: Path, run_id: str, tasks: int) -> list[str]:
    """A finished run of ``tasks`` tasks, every third failed: its summary snapshot is
    large enough to be stored packed. Returns its task keys."""
    keys = [f"default/t{i:03}/00" for i in range(tasks)]
    events: list = [RunStarted(run_id=run_id, planned=keys, max_parallel=2)]
    for i, key in enumerate(keys):
        status = FinalStatus.FAILURE if i % 3 == 0 else FinalStatus.SUCCESS
        events += [
            TaskStarted(run_id=run_id, task_key=key, task_id=key.split("/")[1]),
            TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                          category=status.category, duration_seconds=2.0,
                          weighted_score=1.0 if status == FinalStatus.SUCCESS else 0.0,
                          tokens=TokenCounts(input_tokens=10), cost_usd=0.5),
        ]
    events.append(RunFinished(run_id=run_id, status=RunStatus.COMPLETED))
    with Ledger(db) as ledger:
        ledger.append(events)
        assert write_snapshot(ledger, run_id)
    return keys
