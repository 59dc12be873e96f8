"""What a viewer knows of its ledger, kept current by one reader.

A server holds one ``LedgerState``: every run's ``SummaryFold`` and
``ResumeFold``, folded from the ledger's lifecycle events up to ``seq``. These are
the folds ``run`` feeds live and ``report`` rebuilds, so a page and ``run.json``
cannot disagree. One ``follow`` loop per server reads what was appended since
``seq`` (in a worker thread: SQLite blocks), folds it on the event loop, and tells
every subscriber (the server-sent event streams of open browser tabs) which runs
and tasks changed. Tabs never poll the database; they ask the server for the
part of the page that changed, which it renders from memory.

Runs are listed in one order, the ledger's own (``Ledger.run_ids``, what ``runs`` and
every ``latest`` of the CLI read): the list is read again whenever a run is added, and
``latest`` is ``pick_run``'s, so the viewer and the CLI never name different runs.

Invariant: the folds are only touched on the event loop thread, so a request
handler running there always sees a consistent state.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from evalledger.app import load_folds, status_of
from evalledger.ledger import (
    SEALED_TYPES,
    AnyEvent,
    EventType,
    Ledger,
    LedgerError,
    RunNotFound,
    RunStarted,
    Seals,
    TaskStalled,
    imported_runs,
    pick_run,
    run_seq_span,
    task_activity,
    touched_since,
)
from evalledger.projections import ResumeFold, RunHeadline, RunSummary, SummaryFold
from evalledger.statuses import ShownStatus

# Everything but the output lines: what the folds read, and the stalls pages show.
LIFECYCLE = frozenset(SummaryFold.TYPES | ResumeFold.TYPES | {EventType.TASK_STALLED})
_ENDED = frozenset({EventType.TASK_COMPLETED, EventType.TASK_INTERRUPTED})
# Changed tasks listed per notification; past this, "many" tells tabs to refresh.
MAX_LISTED_TASKS = 500


class RunState:
    """One run's folds, the seqs it spans, and its summary cached by seq."""

    __slots__ = ("_heard", "_stalled", "_summary", "_summary_seq", "first_seq", "imported",
                 "last_seq", "resume", "run_id", "summary_fold")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.summary_fold = SummaryFold(run_id)
        self.resume = ResumeFold(run_id)
        self.first_seq = 0
        self.last_seq = 0
        # Where the run came from when it was imported (its run.started's ``imported``).
        self.imported: dict[str, object] | None = None
        self._summary: RunSummary | None = None
        self._summary_seq = -1
        # Liveness of the running keys: when each last produced anything (its latest
        # event's seq, and the wall time then), and the seq of its latest task.stalled.
        self._heard: dict[str, tuple[int, float]] = {}
        self._stalled: dict[str, int] = {}

    def apply(self, event: AnyEvent) -> None:
        if isinstance(event, TaskStalled):
            self._stalled[event.task_key] = event.seq or 0
            return
        self.summary_fold.apply(event)
        self.resume.apply(event)
        if event.type in _ENDED and event.task_key is not None:
            self._heard.pop(event.task_key, None)
            self._stalled.pop(event.task_key, None)
        if isinstance(event, RunStarted) and event.imported is not None:
            self.imported = dict(event.imported)

    def heard(self, key: str, seq: int, at: float) -> None:
        """Task ``key`` recorded events up to ``seq``, seen at wall time ``at``."""
        if key not in self.summary_fold.running:
            return
        if self._stalled.get(key) == seq and key in self._heard:
            at = self._heard[key][1]  # its own task.stalled: no sign of life
        self._heard[key] = (seq, at)

    def liveness(self) -> dict[str, tuple[float, bool]]:
        """Per running key: seconds since it last produced anything, and whether it is
        stalled (a ``task.stalled`` and nothing since: a ``warn`` stall)."""
        now, running = time.time(), self.running
        return {key: (max(0.0, now - at), self._stalled.get(key) == seq)
                for key, (seq, at) in self._heard.items() if key in running}

    def saw(self, seq: int) -> None:
        self.first_seq = self.first_seq or seq
        self.last_seq = max(self.last_seq, seq)

    def summary(self) -> RunSummary:
        if not self.has_summary:
            self._summary = self.summary_fold.summary()
            self._summary_seq = self.last_seq
        return self._summary  # type: ignore[return-value]

    @property
    def has_summary(self) -> bool:
        """Whether the summary as of ``last_seq`` is made already."""
        return self._summary is not None and self._summary_seq == self.last_seq

    def adopt(self, summary: RunSummary, seq: int) -> None:
        """Take ``summary``, read elsewhere as of ``seq``, as the run's summary: unless
        the run has changed since (an event folded meanwhile: its fold makes it)."""
        if seq == self.last_seq:
            self._summary, self._summary_seq = summary, seq

    def headline(self) -> RunHeadline:
        return self.summary_fold.headline()

    @property
    def shown_status(self) -> ShownStatus:
        """The status as a person should read it (``shown_status``): a run marked
        running whose process is gone was cut off (a crash); ``resume`` finishes it."""
        return status_of(self.summary_fold.status, self.resume)

    @property
    def running(self) -> frozenset[str]:
        """The task keys running now: none once the run's process is gone."""
        if self.shown_status is not ShownStatus.RUNNING:
            return frozenset()
        return frozenset(self.summary_fold.running)


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
    touched: list[tuple[str, str | None, int]] = field(default_factory=list)
    order: list[str] | None = None  # the runs in the ledger's order, when one was added


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
        # Every run id in the ledger's order (Ledger.run_ids): the runs page lists them
        # newest first, and ``latest`` is the last.
        self.order: list[str] = []
        self.ledger_id = ""
        self._subscribers: set[MemoryObjectSendStream[Change]] = set()
        # Per signed run followed live: its seals so far, and the seq fed through.
        self._seals: dict[str, tuple[Seals, int]] = {}

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
            self.order = ledger.run_ids()
            for run_id in self.order:
                state = self.runs.setdefault(run_id, RunState(run_id))
                (summary, resume), _ = load_folds(ledger, run_id, SummaryFold, ResumeFold,
                                                  until_seq=seq)
                assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
                state.summary_fold, state.resume = summary, resume
                state.first_seq, state.last_seq = run_seq_span(ledger, run_id, seq)
                for key, (last, ts, stalled) in task_activity(ledger, run_id,
                                                              summary.running).items():
                    state.heard(key, last, _epoch(ts))
                    if stalled is not None:
                        state._stalled[key] = stalled
            for run_id, imported in imported_runs(ledger, seq).items():
                if run_id in self.runs:
                    self.runs[run_id].imported = imported
        self.seq = seq

    def _read_since(self, after: int) -> _Read:
        """Rows appended after ``after``: lifecycle rows whole, the rest as (run, task)."""
        with self.readers.ledger() as ledger:
            last = ledger.last_seq()
            read = _Read(seq=max(last, after))
            if last <= after:
                return read
            read.touched = touched_since(ledger, after, last)
            read.lifecycle = self._sealed(ledger, list(
                ledger.events(types=LIFECYCLE, after_seq=after, until_seq=last)), last)
            if any(isinstance(e, RunStarted) for e in read.lifecycle):
                read.order = ledger.run_ids()
            return read

    def _sealed(self, ledger: Ledger, events: list[AnyEvent], last: int) -> list[AnyEvent]:
        """``events`` without what no seal of its run's own processes vouches for (a
        signed run's, ``ledger._signing``): each run's seals are fed as they come, so a
        poll checks what is new, not the whole run again."""
        ignored: set[int] = set()
        for run_id in {event.run_id for event in events}:
            seals = self._seals.get(run_id)
            if seals is None:
                if not ledger.run_signed(run_id):
                    continue
                seals = self._seals[run_id] = (Seals(run_id, signed=True), 0)
            checker, fed = seals
            for row in ledger.rows(run_id, types=[*SEALED_TYPES, EventType.RUN_SIGNED],
                                   after_seq=fed, until_seq=last):
                checker.feed(row.seq or 0, row.event_id, row.task_key, row.type, row.ts,
                             row.payload)
            self._seals[run_id] = (checker, last)
            ignored |= checker.report().ignored
        return [event for event in events if event.seq not in ignored] if ignored else events

    def _apply(self, read: _Read) -> Change | None:
        if read.seq <= self.seq:
            return None
        for event in read.lifecycle:
            state = self.runs.get(event.run_id)
            if state is None:
                state = self.runs[event.run_id] = RunState(event.run_id)
            state.apply(event)
        runs = sorted({run for run, _, _ in read.touched})
        for run_id in runs:
            state = self.runs.get(run_id)
            if state is not None:
                state.saw(read.seq)
        now = time.time()
        for run_id, key, seq in read.touched:
            if key is not None and (state := self.runs.get(run_id)) is not None:
                state.heard(key, seq, now)
        tasks = sorted({(r, k) for r, k, _ in read.touched if k is not None})
        if read.order is not None:
            self.order = [r for r in read.order if r in self.runs]
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
        """The run named by an id, a unique prefix of one, or ``latest``: as the CLI
        names it (``pick_run`` over the ledger's order)."""
        if spec in self.runs:
            return self.runs[spec]
        try:
            return self.runs[pick_run(spec, self.order, self.path.name)]
        except RunNotFound:
            return None

    def newest_first(self) -> list[RunState]:
        """Every run, newest first: the ledger's order (``Ledger.run_ids``), reversed."""
        return [self.runs[r] for r in reversed(self.order)]

    def previous(self, run: RunState) -> RunState | None:
        """The run before ``run`` in the ledger's order that ran the same thing: the same
        experiment, or (without one) a run of no experiment sharing a task key with it."""
        if run.run_id not in self.order:
            return None
        experiment = run.summary_fold.experiment_id
        keys = run.summary_fold.planned.keys()
        for run_id in reversed(self.order[:self.order.index(run.run_id)]):
            other = self.runs[run_id].summary_fold
            if experiment is not None:
                if other.experiment_id == experiment:
                    return self.runs[run_id]
            elif other.experiment_id is None and not keys.isdisjoint(other.planned.keys()):
                return self.runs[run_id]
        return None


def pages(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))


def _epoch(ts: str) -> float:
    """A ledger ``ts`` (ISO 8601 UTC) as seconds since the epoch; now when unreadable."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return time.time()
