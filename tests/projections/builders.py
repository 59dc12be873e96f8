"""Events of one run, built by hand for projection tests, and the folds over them."""

from __future__ import annotations

from typing import Any

from evalledger.ledger import (
    AnyEvent,
    Ledger,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
)
from evalledger.projections import RunSummary, SummaryFold, fold
from evalledger.statuses import FinalStatus

RUN = "run-1"
ENV = {"evalledger": "0.1.0", "platform": "Linux-6.1-x86_64", "python": "3.11.9"}


def key(i: int) -> str:
    return f"default/t{i}/00"


def started(k: str, attempt: int = 1, run_id: str = RUN, **fields: Any) -> TaskStarted:
    fields.setdefault("tags", ["smoke"])
    return TaskStarted(run_id=run_id, task_key=k, task_id=k.split("/")[1], attempt=attempt,
                       **fields)


def completed(
    k: str, status: FinalStatus = FinalStatus.SUCCESS, attempt: int = 1, run_id: str = RUN,
    **fields: Any,
) -> TaskCompleted:
    fields.setdefault("environment_info", {**ENV, "exit_code": 0})
    return TaskCompleted(
        run_id=run_id, task_key=k, attempt=attempt, final_status=status,
        category=status.category, **fields,
    )


def usage(k: str, cost: float | None, run_id: str = RUN, **tokens: int) -> TaskUsage:
    return TaskUsage(run_id=run_id, task_key=k, cost_usd=cost, model="m-1", **tokens)


def interrupted(k: str, run_id: str = RUN) -> TaskInterrupted:
    return TaskInterrupted(run_id=run_id, task_key=k, reason="cancelled")


def summarize(events: list[AnyEvent], run_id: str = RUN, *, count_infra: bool = False
              ) -> RunSummary:
    """The summary folded live, event by event."""
    return fold(SummaryFold(run_id), events).summary(count_infra=count_infra)


def rebuilt(ledger: Ledger, run_id: str = RUN) -> RunSummary:
    """The summary rebuilt from the ledger, reading only the types the fold needs."""
    return fold(SummaryFold(run_id), ledger.events(run_id, types=SummaryFold.TYPES)).summary()
