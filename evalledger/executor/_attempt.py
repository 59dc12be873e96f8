"""The attempt protocol, written once for every way an attempt runs.

An attempt records its events as they happen (``task.started`` first), then ends with
exactly one of:

- ``task.completed``: committed (durable) before the attempt counts as done, that is
  before ``run_attempt`` returns and the batch tells anyone;
- ``task.interrupted`` with its reason: it was cancelled (Ctrl-C, the batch ending) or
  could not finish (a lost Ray worker); ``resume`` runs it again. An attempt that never
  started recorded nothing and ends with nothing: ``resume`` runs it as new.

Its end is recorded shielded from cancellation: a cancel arriving once the end is
decided neither drops it nor adds a second (a ``task.interrupted`` after a
``task.completed``). A cancelled attempt whose result had already arrived keeps it.

``run_attempt`` is that protocol; the runner (``run_task``, here or on a Ray worker) and
the Ray driver (``RayExecutor.run``) each hand it how to run their attempt and what
they know when it is cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from evalledger.ledger import TaskCompleted, TaskInterrupted

from ._writer import EventSink, WriterFailed

# How a ``task.interrupted`` of an attempt whose Ray worker (or node) was lost begins:
# an infrastructure failure, retried as one (``retries``).
WORKER_LOST = "worker lost"


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt ended: its ``task.completed``, or why it was interrupted.

    ``started`` False: the attempt never reached ``task.started`` (a Ray worker lost
    before it ran anything), so no ``task.interrupted`` is recorded for it.
    """

    completed: TaskCompleted | None = None
    interrupted: str | None = None
    started: bool = True

    def __post_init__(self) -> None:
        if (self.completed is None) == (self.interrupted is None):
            raise ValueError("an attempt ends completed or interrupted, not both nor neither")


# What a cancelled attempt ends with, given the reason of its interruption. Called
# shielded; an attempt whose result had already arrived returns it.
OnCancel = Callable[[str], Awaitable[AttemptOutcome]]


async def run_attempt(
    writer: EventSink,
    run_id: str,
    task_key: str,
    attempt: Callable[[], Awaitable[AttemptOutcome]],
    on_cancel: OnCancel,
    release: Callable[[], None] | None = None,
) -> AttemptOutcome:
    """Run ``attempt`` and record how it ended; return that once it is committed.

    ``release`` is called as soon as ``attempt`` is done, before its end is committed:
    the concurrency slot is about processes, and the next task can start meanwhile.

    Raises:
        BaseException: the batch's cancellation (often inside an exception group), once
            ``on_cancel``'s outcome is recorded.
    """
    try:
        try:
            outcome = await attempt()
        finally:
            if release is not None:
                release()
    except BaseException as e:
        with trio.CancelScope(shield=True):
            cut = await on_cancel(interruption_reason(e))
            # The cancellation is what goes on; a writer that stopped meanwhile said why.
            with contextlib.suppress(WriterFailed):
                await _record(writer, run_id, task_key, cut)
        raise
    with trio.CancelScope(shield=True):
        await _record(writer, run_id, task_key, outcome)
    return outcome


async def _record(writer: EventSink, run_id: str, task_key: str,
                  outcome: AttemptOutcome) -> None:
    if outcome.completed is not None:
        await writer.append_durable(outcome.completed)
    elif outcome.started:
        assert outcome.interrupted is not None
        await writer.append_durable(
            TaskInterrupted(run_id=run_id, task_key=task_key, reason=outcome.interrupted))


def interruption_reason(error: BaseException) -> str:
    """What a ``task.interrupted`` says: ``cancelled`` for the batch's cancellation
    (often wrapped in an exception group by the nurseries it crossed), else the error."""
    return "cancelled" if _is_cancellation(error) else f"{type(error).__name__}: {error}"


def _is_cancellation(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_is_cancellation(e) for e in error.exceptions)
    return isinstance(error, trio.Cancelled)
