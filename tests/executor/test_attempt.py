"""The attempt protocol (``executor/_attempt.py``), the one both the local runner and the
Ray driver end their attempts by: at most one ``task.completed``, committed before the
attempt counts as done, or a ``task.interrupted``; never both. Against a real ledger
through the batch's real writer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from evalledger.executor._attempt import AttemptOutcome, interruption_reason, run_attempt
from evalledger.executor._writer import open_writer
from evalledger.ledger import Ledger, TaskCompleted
from evalledger.statuses import FinalStatus

RUN_ID = "r-attempt"
KEY = "default/t/00"


def _completed() -> TaskCompleted:
    return TaskCompleted(run_id=RUN_ID, task_key=KEY, attempt=1,
                         final_status=FinalStatus.NOT_GRADED,
                         category=FinalStatus.NOT_GRADED.category, duration_seconds=0.1)


def _ended(ledger: Ledger) -> list[str]:
    """What the ledger holds of the attempt's end, in order."""
    return [f"{e.type}:{getattr(e, 'reason', '')}" for e in ledger.events(
        RUN_ID, types={"task.completed", "task.interrupted"})]


def _run(
    ledger: Ledger,
    attempt: Callable[[], Awaitable[AttemptOutcome]],
    on_cancel: Callable[[str], Awaitable[AttemptOutcome]],
    release: Callable[[trio.CancelScope], None] | None = None,
) -> tuple[AttemptOutcome | None, bool]:
    """Run one attempt in a scope its ``release`` may cancel; return what ``run_attempt``
    returned (None: it raised) and whether a cancellation came out of it."""
    got: list[AttemptOutcome] = []

    async def main() -> bool:
        async with open_writer(ledger) as writer:
            with trio.CancelScope() as scope:
                got.append(await run_attempt(
                    writer, RUN_ID, KEY, attempt, on_cancel,
                    (lambda: release(scope)) if release is not None else None))
        return scope.cancelled_caught

    cancelled = trio.run(main)
    return (got[0] if got else None), cancelled


async def _never_cancelled(reason: str) -> AttemptOutcome:
    raise AssertionError(f"not cancelled, yet asked how it ends: {reason}")


def test_a_finished_attempt_is_committed_by_the_time_it_returns(ledger: Ledger) -> None:
    done = _completed()

    async def attempt() -> AttemptOutcome:
        return AttemptOutcome(done)

    outcome, cancelled = _run(ledger, attempt, _never_cancelled)
    assert outcome == AttemptOutcome(done) and not cancelled
    assert _ended(ledger) == ["task.completed:"]


def test_a_cancel_arriving_as_the_slot_is_released_neither_drops_the_result_nor_adds_an_end(
    ledger: Ledger,
) -> None:
    done = _completed()

    async def attempt() -> AttemptOutcome:
        return AttemptOutcome(done)

    # The release runs before the commit: a cancel landing there must wait for it.
    outcome, _ = _run(ledger, attempt, _never_cancelled, release=lambda s: s.cancel())
    assert outcome == AttemptOutcome(done)
    assert _ended(ledger) == ["task.completed:"]


def test_a_cancelled_attempt_records_its_interruption_then_the_cancellation_goes_on(
    ledger: Ledger,
) -> None:
    released: list[bool] = []

    async def attempt() -> AttemptOutcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def on_cancel(reason: str) -> AttemptOutcome:
        await trio.sleep(0)  # shielded: it may wait (a Ray worker to stop)
        return AttemptOutcome(interrupted=reason)

    def release(scope: trio.CancelScope) -> None:
        released.append(True)

    async def main() -> bool:
        async with open_writer(ledger) as writer:
            with trio.move_on_after(0.05) as scope:
                await run_attempt(writer, RUN_ID, KEY, attempt, on_cancel,
                                  lambda: release(scope))
        return scope.cancelled_caught

    assert trio.run(main)
    assert released == [True]
    assert _ended(ledger) == ["task.interrupted:cancelled"]


def test_a_result_that_arrived_before_the_cancel_stands(ledger: Ledger) -> None:
    arrived = _completed()

    async def attempt() -> AttemptOutcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def on_cancel(reason: str) -> AttemptOutcome:
        return AttemptOutcome(arrived)

    async def main() -> None:
        async with open_writer(ledger) as writer:
            with trio.move_on_after(0.05):
                await run_attempt(writer, RUN_ID, KEY, attempt, on_cancel)

    trio.run(main)
    assert _ended(ledger) == ["task.completed:"]


def test_a_lost_attempt_that_had_started_is_interrupted_and_the_batch_goes_on(
    ledger: Ledger,
) -> None:
    async def attempt() -> AttemptOutcome:
        return AttemptOutcome(interrupted="worker lost: NodeDiedError")

    outcome, cancelled = _run(ledger, attempt, _never_cancelled)
    assert outcome is not None and outcome.completed is None and not cancelled
    assert _ended(ledger) == ["task.interrupted:worker lost: NodeDiedError"]


def test_an_attempt_that_never_started_leaves_nothing_for_resume_to_undo(
    ledger: Ledger,
) -> None:
    async def attempt() -> AttemptOutcome:
        return AttemptOutcome(interrupted="worker lost: gone", started=False)

    outcome, _ = _run(ledger, attempt, _never_cancelled)
    assert outcome == AttemptOutcome(interrupted="worker lost: gone", started=False)
    assert _ended(ledger) == []


def test_an_attempt_ends_completed_or_interrupted_never_both_nor_neither() -> None:
    with pytest.raises(ValueError, match="not both nor neither"):
        AttemptOutcome()
    with pytest.raises(ValueError, match="not both nor neither"):
        AttemptOutcome(_completed(), interrupted="cancelled")


def _a_cancellation() -> trio.Cancelled:
    """A real ``Cancelled``, as trio raises it."""

    async def caught() -> trio.Cancelled:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep(0)
            except trio.Cancelled as e:
                return e
        raise AssertionError("not cancelled")

    return trio.run(caught)


def test_an_interruption_says_cancelled_for_a_cancellation_however_wrapped() -> None:
    assert interruption_reason(_a_cancellation()) == "cancelled"
    nested = BaseExceptionGroup("nurseries", [
        _a_cancellation(), BaseExceptionGroup("inner", [_a_cancellation()])])
    assert interruption_reason(nested) == "cancelled"
    assert interruption_reason(KeyboardInterrupt()) == "KeyboardInterrupt: "
    mixed = BaseExceptionGroup("mixed", [_a_cancellation(), KeyboardInterrupt()])
    assert interruption_reason(mixed).startswith("BaseExceptionGroup: mixed")
