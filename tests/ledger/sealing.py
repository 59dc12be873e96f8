"""What the tests of signed runs share: a runner's commits, sealed as it seals them."""

from __future__ import annotations

from evalledger.ledger import (
    AnyEvent,
    EventRow,
    Ledger,
    RunStarted,
    Signer,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.statuses import FinalStatus

RUN = "r"
FAILED = {"final_status": FinalStatus.FAILURE, "category": FinalStatus.FAILURE.category}
PASSED = {"final_status": FinalStatus.SUCCESS, "category": FinalStatus.SUCCESS.category}


def commit(ledger: Ledger, signer: Signer, *events: AnyEvent) -> list[int]:
    """What the runner does: the events and their seal, in one transaction."""
    return ledger.append(signer.sealed([EventRow.of(e) for e in events]))


def started(key: str, attempt: int = 1) -> TaskStarted:
    return TaskStarted(run_id=RUN, task_key=key, task_id=key, attempt=attempt,
                       definition_hash="h", definition={"command": "true"})


def completed(key: str, attempt: int = 1, **status: object) -> TaskCompleted:
    return TaskCompleted(run_id=RUN, task_key=key, attempt=attempt, **(status or FAILED))


def output(key: str, n: int) -> TaskOutput:
    return TaskOutput(run_id=RUN, task_key=key, stream="stdout", line=f"line {n}", n=n)


def opening(signer: Signer) -> RunStarted:
    return RunStarted(run_id=RUN, planned=["t"], public_key=signer.public_key)


def statuses(ledger: Ledger) -> dict[str, str]:
    return {e.task_key or "": str(e.final_status)
            for e in ledger.events(RUN, types=["task.completed"])
            if isinstance(e, TaskCompleted)}


