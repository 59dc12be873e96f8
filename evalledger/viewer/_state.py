"""What a viewer knows of its ledger, kept current by one reader.

A server holds one ``LedgerState``: every run's ``SummaryFold`` and
``ResumeFold``, folded from the ledger's lifecycle events up to ``seq``. These are
the folds ``run`` feeds live and ``report`` rebuilds, so a page and ``run.json``
cannot disagree. One ``follow`` loop per server reads what was appended since
``seq`` (in a worker thread: SQLite blocks), folds it on the event loop, and tells
every subscriber (the server-sent event streams of open browser tabs) which runs
and tasks changed. Tabs never poll the database; they ask the server for the
part of the page that changed, which it renders from memory.

Invariant: the folds are only touched on the event loop thread, so a request
handler running there always sees a consistent state.
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from evalledger.hosts import run_ended
from evalledger.ledger import AnyEvent, Ledger, LedgerError
from evalledger.projections import (
    ResumeFold,
    RunHeadline,
    RunSummary,
    SummaryFold,
    load_folds,
)

# Everything but the output lines: what the folds read.
LIFECYCLE = frozenset(SummaryFold.TYPES | ResumeFold.TYPES)
# Changed tasks listed per notification; past this, "many" tells tabs to refresh.
MAX_LISTED_TASKS = 500


class RunState:
    """One run's folds, the seqs it spans, and its summary cached by seq."""

    __slots__ = ("_summary", "_summary_seq", "first_seq", "last_seq", "resume", "run_id",
                 "summary_fold")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.summary_fold = SummaryFold(run_id)
        self.resume = ResumeFold(run_id)
        self.first_seq = 0
        self.last_seq = 0
        self._summary: RunSummary | None = None
        self._summary_seq = -1

    def apply(self, event: AnyEvent) -> None:
        self.summary_fold.apply(event)
        self.resume.apply(event)

    def saw(self, seq: int) -> None:
        self.first_seq = self.first_seq or seq
        self.last_seq = max(self.last_seq, seq)

    def summary(self) -> RunSummary:
        if self._summary_seq != self.last_seq or self._summary is None:
            self._summary = self.summary_fold.summary()
            self._summary_seq = self.last_seq
        return self._summary

    def headline(self) -> RunHeadline:
        return self.summary_fold.headline()

    @property
    def shown_status(self) -> str:
        """The status as a person should read it: a run marked running whose process
        is gone was cut off (a crash); ``resume`` finishes it."""
        status = self.summary_fold.status
        if status == "running" and run_ended(self.resume.host, self.resume.finished):
            return "cut off"
        return status


@dataclass(frozen=True)
class Change:
    """What one read of the ledger found: new events up to ``seq``."""

    seq: int
    runs: list[str]
    tasks: list[tuple[str, str]]
    many_tasks: bool = False

    def message(self) -> dict[str, object]:
        return {"seq": self.seq, "runs": self.runs, "tasks": [list(t) for t in self.tasks],
                "many_tasks": self.many_tasks}


@dataclass
class _Read:
    seq: int
    lifecycle: list[AnyEvent] = field(default_factory=list)
    touched: list[tuple[str, str | None]] = field(default_factory=list)


class Readers:
    """Read-only ledger handles, one per thread (a ``Ledger`` is one connection)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    @contextmanager
    def ledger(self) -> Iterator[Ledger]:
        opened: Ledger | None = getattr(self._local, "ledger", None)
        if opened is None:
            opened = self._local.ledger = Ledger(self.path, read_only=True)
        try:
            yield opened
        except LedgerError:
            # A broken handle is not kept: the next request opens a fresh one.
            self._local.ledger = None
            opened.close()
            raise


class LedgerState:
    """Every run of one ledger, folded up to ``seq``."""

    def __init__(self, path: Path, *, interval: float = 0.25) -> None:
        self.path = path
        self.readers = Readers(path)
        self.interval = interval
        self.seq = 0
        self.runs: dict[str, RunState] = {}
        self.ledger_id = ""
        self._subscribers: set[MemoryObjectSendStream[Change]] = set()

    # -- loading and following -------------------------------------------------------------

    def load(self) -> None:
        """Fold everything the ledger holds now (before the server takes requests).

        Run by run: a finished run from its snapshot, any other by folding its
        lifecycle events through the covering lifecycle index (a ledger of a million
        output lines is read in the time of its few thousand starts and completions).
        """
        with self.readers.ledger() as ledger:
            self.ledger_id = ledger.ledger_id
            seq = ledger.last_seq()
            for run_id in ledger.run_ids():
                state = self.runs.setdefault(run_id, RunState(run_id))
                (summary, resume), _ = load_folds(ledger, run_id, SummaryFold, ResumeFold,
                                                  until_seq=seq)
                assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
                state.summary_fold, state.resume = summary, resume
                last = ledger.query(
                    "SELECT min(seq), max(seq) FROM events WHERE run_id = ? AND seq <= ?",
                    [run_id, seq])[1][0]
                state.first_seq, state.last_seq = last[0] or 0, last[1] or 0
        self.seq = seq

    def _read_since(self, after: int) -> _Read:
        """Rows appended after ``after``: lifecycle rows whole, the rest as (run, task)."""
        with self.readers.ledger() as ledger:
            last = ledger.last_seq()
            read = _Read(seq=max(last, after))
            if last <= after:
                return read
            _, touched = ledger.query(
                "SELECT DISTINCT run_id, task_key FROM events WHERE seq > ? AND seq <= ?",
                [after, last])
            read.touched = [(r, k) for r, k in touched]
            read.lifecycle = list(ledger.events(types=LIFECYCLE, after_seq=after, until_seq=last))
            return read

    def _apply(self, read: _Read) -> Change | None:
        if read.seq <= self.seq:
            return None
        for event in read.lifecycle:
            state = self.runs.get(event.run_id)
            if state is None:
                state = self.runs[event.run_id] = RunState(event.run_id)
            state.apply(event)
        runs = sorted({run for run, _ in read.touched})
        for run_id in runs:
            state = self.runs.get(run_id)
            if state is not None:
                state.saw(read.seq)
        tasks = sorted({(r, k) for r, k in read.touched if k is not None})
        self.seq = read.seq
        return Change(seq=read.seq, runs=runs, tasks=tasks[:MAX_LISTED_TASKS],
                      many_tasks=len(tasks) > MAX_LISTED_TASKS)

    async def follow(self) -> None:
        """Read and fold what is appended, forever; tell subscribers what changed."""
        while True:
            await anyio.sleep(self.interval)
            try:
                read = await anyio.to_thread.run_sync(self._read_since, self.seq)
            except LedgerError:
                continue  # a busy or briefly unreadable file: try again next time
            change = self._apply(read)
            if change is not None:
                self._publish(change)

    def _publish(self, change: Change) -> None:
        for send in list(self._subscribers):
            try:
                send.send_nowait(change)
            except anyio.WouldBlock:
                pass  # a slow tab misses a notice, not the state: the next one covers it
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(send)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[anyio.abc.ObjectReceiveStream[Change]]:
        send, receive = anyio.create_memory_object_stream[Change](16)
        self._subscribers.add(send)
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()

    def close_subscribers(self) -> None:
        """End every open event stream (the server is stopping)."""
        for send in list(self._subscribers):
            send.close()
        self._subscribers.clear()

    # -- reading -----------------------------------------------------------------------------

    def run(self, spec: str) -> RunState | None:
        """The run named by an id, a unique prefix of one, or ``latest``."""
        if spec in self.runs:
            return self.runs[spec]
        if spec == "latest":
            return next(reversed(self.runs.values()), None)
        matches = [r for r in self.runs if r.startswith(spec)] if spec else []
        return self.runs[matches[0]] if len(matches) == 1 else None

    def newest_first(self) -> list[RunState]:
        return list(reversed(self.runs.values()))


def pages(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))
