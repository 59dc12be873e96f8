"""The one ledger writer of a batch: group commit from a memory channel.

Tasks send events into a bounded channel; one writer task drains whatever has
arrived while the previous batch was being written and appends it in one
transaction, in a worker thread so SQLite never blocks the event loop. A full
channel makes senders wait: a task printing faster than the disk can take it
is slowed down, never dropped.

``append_durable`` waits until its event's batch has committed. That is how a
``task.completed`` is in the ledger before anyone is told the task finished.

Invariant: the drain loop is shielded from cancellation and ends only when every
sender has closed, so events sent while a batch is being cancelled (the
``task.interrupted`` records) are still written.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import trio

from evalledger.ledger import AnyEvent, EventRow, Ledger, LedgerError, Signer

log = logging.getLogger("evalledger.executor")

# Items, each one read's worth of lines: bounds memory, makes fast writers wait.
CHANNEL_CAPACITY = 256
MAX_BATCH = 8192
# How long a batch with nobody waiting on it may wait for more events before it is
# written: a commit costs far more than a row, and a task's start alone in a commit
# was one of two commits per short task. A durable event (task.completed) ends the
# wait at once, so nothing anyone waits for is held back.
LINGER = 0.005


_Item = tuple[tuple[AnyEvent | EventRow, ...], "_Ack | None"]


class _Ack:
    __slots__ = ("done", "error", "seq")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.seq = 0
        self.error: BaseException | None = None


@dataclass
class WriterStats:
    events: int = 0
    batches: int = 0


class WriterFailed(LedgerError):
    """The writer could not append; the batch cannot go on without losing events."""


class EventSink(Protocol):
    """Where a runner hands its events: the batch's ``LedgerWriter``, or on a Ray worker
    the stream back to the driver's writer (``ray._worker._ForwardToDriver``)."""

    async def append(self, *events: AnyEvent | EventRow) -> None: ...

    async def append_durable(self, event: AnyEvent | EventRow) -> int: ...


class LedgerWriter:
    """The sending side, handed to every task of a batch."""

    def __init__(self, send: trio.MemorySendChannel[_Item], stats: WriterStats) -> None:
        self._send = send
        self.stats = stats
        self.failure: BaseException | None = None

    async def append(self, *events: AnyEvent | EventRow) -> None:
        """Queue events, in order; they are written with the next batch.

        One call is one trip through the channel: a task hands over everything
        one read of its pipe produced at once, not line by line.
        """
        try:
            await self._send.send((events, None))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise WriterFailed(f"the ledger writer stopped: {self.failure}") from e

    async def append_durable(self, event: AnyEvent | EventRow) -> int:
        """Queue an event and wait until it is committed; return its seq."""
        ack = _Ack()
        try:
            await self._send.send(((event,), ack))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise WriterFailed(f"the ledger writer stopped: {self.failure}") from e
        await ack.done.wait()
        if ack.error is not None:
            raise WriterFailed(str(ack.error)) from ack.error
        return ack.seq


OnCommitted = Callable[[Sequence["AnyEvent | EventRow"]], None]


@asynccontextmanager
async def open_writer(
    ledger: Ledger, on_committed: OnCommitted | None = None, signer: Signer | None = None,
) -> AsyncIterator[LedgerWriter]:
    """Run the writer for the duration of the block; on exit, flush and stop it.

    ``signer``: each commit goes in with its seal (``Signer.sealed``), in the same
    transaction: no verdict is ever committed unsealed.

    ``on_committed`` sees every batch, in order, right after its commit and before
    anyone waiting on it is woken: a live projection fed from it has folded a
    ``task.completed`` before the task's completion callbacks run.
    """
    send, receive = trio.open_memory_channel[_Item](CHANNEL_CAPACITY)
    writer = LedgerWriter(send, WriterStats())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, ledger, receive, writer, on_committed, signer)
        async with send:
            yield writer


async def _drain(
    ledger: Ledger, receive: trio.MemoryReceiveChannel[_Item], writer: LedgerWriter,
    on_committed: OnCommitted | None, signer: Signer | None,
) -> None:
    one_writer = trio.CapacityLimiter(1)
    with trio.CancelScope(shield=True):
        async with receive:
            async for first in receive:
                items = await _gather(receive, first)
                events = [event for batch, _ in items for event in batch]
                # The seal goes after them: the events' own seqs keep their places.
                stored = events if signer is None else signer.sealed(
                    [EventRow.of(event) for event in events])
                try:
                    seqs = await trio.to_thread.run_sync(ledger.append, stored, limiter=one_writer)
                except BaseException as e:
                    writer.failure = e
                    for _, ack in items:
                        if ack is not None:
                            ack.error = e
                            ack.done.set()
                    _fail_pending(receive, e)
                    raise
                writer.stats.events += len(events)
                writer.stats.batches += 1
                if on_committed is not None:
                    try:
                        on_committed(events)
                    except Exception:
                        log.exception("on_committed hook failed; ignored")
                position = 0
                for batch, ack in items:
                    position += len(batch)
                    if ack is not None:
                        ack.seq = seqs[position - 1]
                        ack.done.set()


async def _gather(receive: trio.MemoryReceiveChannel[_Item], first: _Item) -> list[_Item]:
    """The next batch to write: ``first`` and whatever else is queued, waiting up to
    ``LINGER`` for more as long as nobody waits on the batch."""
    items = [first]
    size = len(first[0])
    durable = first[1] is not None
    deadline = trio.current_time() + LINGER
    while size < MAX_BATCH:
        item: _Item | None = None
        try:
            item = receive.receive_nowait()
        except trio.EndOfChannel:
            break
        except trio.WouldBlock:
            if durable:
                break
            with trio.move_on_at(deadline):
                with contextlib.suppress(trio.EndOfChannel):
                    item = await receive.receive()
        if item is None:
            break
        items.append(item)
        size += len(item[0])
        durable = durable or item[1] is not None
    return items


def _fail_pending(receive: trio.MemoryReceiveChannel[_Item], error: BaseException) -> None:
    """Release everyone waiting on an ack that will now never come."""
    while True:
        try:
            _, ack = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        if ack is not None:
            ack.error = error
            ack.done.set()
