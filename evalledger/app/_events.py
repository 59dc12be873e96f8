"""A run's events as they are stored, in ledger order, optionally followed live
(``evalledger events``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from evalledger.errors import InvalidRequest
from evalledger.ledger import EVENT_TYPES, EventRow, Ledger, has_task, has_type

from ._repository import run_is_over


def run_events(ledger: Ledger, run_id: str, *, task_key: str | None = None,
               types: Sequence[str] = (), follow: bool = False,
               interval: float = 0.2) -> Iterator[EventRow]:
    """The run's events (of ``task_key``, of ``types``), each once, in seq order; with
    ``follow``, new ones as they are written, until the run records its end.

    Raises:
        InvalidRequest: a type neither known nor in the run (a typo is no empty
            answer), or a task key the run does not have.
    """
    if unknown := [t for t in types
                   if t not in EVENT_TYPES and not has_type(ledger, run_id, t)]:
        # Types a newer evalledger wrote are given like any other.
        raise InvalidRequest(f"no events of type {', '.join(map(repr, unknown))} in run "
                             f"{run_id}; known types: {', '.join(sorted(EVENT_TYPES))}")
    if task_key is not None and not has_task(ledger, run_id, task_key):
        raise InvalidRequest(f"run {run_id} has no task {task_key!r} (see `evalledger show "
                             f"{run_id}`)")
    after = 0
    while True:
        # Decided before reading: every event up to run.finished is then given.
        done = not follow or run_is_over(ledger, run_id)
        for row in ledger.rows(run_id, task_key=task_key, types=list(types) or None,
                               after_seq=after):
            yield row
            after = row.seq or after
        if done:
            return
        time.sleep(interval)
