"""Reads a viewer's page needs that are not in the server's folds: a task's attempts, a
page of its transcript, a run as it was at some seq, an attempt's usage over time, a
search of a run's transcripts.

Blocking calls, run in worker threads by the viewer. The SQL is the ledger's
(``evalledger.ledger._page_queries``: named range scans of the schema's indexes);
this module turns the rows into what a page shows (a transcript row as
``app.transcript_line`` reads it, the HTML report's too).
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from dataclasses import dataclass, field, fields
from typing import Any

from evalledger.agents import (
    PARSERS,
    USAGE_PARSERS,
    Entry,
    FinalResult,
    RunningUsage,
    ToolResult,
    parser_for,
)
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    Ledger,
    TaskCompleted,
    TaskFlagged,
    TaskGraded,
    TaskInterrupted,
    TaskIsolation,
    TaskStarted,
    TaskUsage,
    attempt_starts,
    result_lines,
    task_lifecycle,
    transcript_row_before,
    transcript_rows,
    usage_lines,
)
from evalledger.projections import RunSummary, SummaryFold

from ._repository import load_fold
from ._transcripts import Line, said_in, transcript_line


@dataclass(frozen=True)
class Past:
    """A run as it was at some seq: its summary and the keys running then."""

    summary: RunSummary
    running: frozenset[str]


def summary_at(ledger: Ledger, run_id: str, seq: int) -> Past:
    """The run as it was once the event at ``seq`` was written: the same fold, stopped
    (from a snapshot made by then, if there is one)."""
    fold = load_fold(ledger, SummaryFold, run_id, until_seq=seq)
    return Past(fold.summary(), frozenset(fold.running))


@dataclass
class Attempt:
    """One attempt of a task: its start, usage reports and how it ended."""

    started: TaskStarted
    usage: list[TaskUsage] = field(default_factory=list)
    completed: TaskCompleted | None = None
    interrupted: TaskInterrupted | None = None
    isolation: TaskIsolation | None = None  # None: it ran with none
    grades: list[TaskGraded] = field(default_factory=list)
    """Its regrades (``task.graded``), oldest first."""
    flags: list[TaskFlagged] = field(default_factory=list)
    """What scans found (``task.flagged``), oldest first."""

    @property
    def number(self) -> int:
        return self.started.attempt

    @property
    def stream_format(self) -> str:
        return str(self.started.definition.get("stream_format") or "native")

    @property
    def tokens(self) -> int:
        """Tokens its usage reports hold (what an attempt without a completion spent)."""
        return sum(u.tokens.total for u in self.usage)

    @property
    def cost(self) -> tuple[float | None, bool]:
        """What its usage reports cost, and whether that is all of it: never, for an
        attempt that did not end (its last turn went unreported): a floor."""
        priced = [u.cost_usd for u in self.usage if u.cost_usd is not None]
        whole = self.completed is not None and len(priced) == len(self.usage) and not any(
            u.estimate for u in self.usage)
        return (sum(priced) if priced else None), whole

    @property
    def imported(self) -> dict[str, Any] | None:
        """Where the attempt came from, when it was imported (not run here)."""
        return self.started.imported


def attempts(ledger: Ledger, run_id: str, task_key: str) -> list[Attempt]:
    """Every attempt of one task key, in order; empty if the run never started it."""
    found: list[Attempt] = []
    for row in task_lifecycle(ledger, run_id, task_key):
        event: AnyEvent = row.decode()
        if isinstance(event, TaskStarted):
            found.append(Attempt(started=event))
        elif not found:
            continue  # a completion without a start counts nowhere (as in the folds)
        elif isinstance(event, TaskUsage):
            found[-1].usage.append(event)
        elif isinstance(event, TaskCompleted):
            found[-1].completed = event
        elif isinstance(event, TaskInterrupted):
            found[-1].interrupted = event
        elif isinstance(event, TaskIsolation):
            found[-1].isolation = event
        elif isinstance(event, TaskGraded | TaskFlagged):
            # They come long after, naming the attempt they are about.
            for attempt in found:
                if attempt.number == event.attempt:
                    (attempt.grades if isinstance(event, TaskGraded)
                     else attempt.flags).append(event)  # type: ignore[arg-type]
    return found


def attempt_at(tries: list[Attempt], seq: int) -> int | None:
    """The number of the attempt a row at ``seq`` belongs to (None: before the first)."""
    index = bisect_right([t.started.seq or 0 for t in tries], seq) - 1
    return tries[index].number if index >= 0 else None


@dataclass
class TranscriptPage:
    """A page of a task's transcript as read; the ``Transcript`` resource (``_resources``)
    is what the app serves from it, and names the page's first and last seq."""

    lines: list[Line]
    more_before: bool
    more_after: bool


def transcript(
    ledger: Ledger, run_id: str, task_key: str, tries: list[Attempt], *,
    after: int | None = None, before: int | None = None, limit: int = 500,
    search: str | None = None,
) -> TranscriptPage:
    """A page of a task's output lines and JSON events, in order.

    ``after``: the page after that seq (0 or None: the first page); ``before``: the
    page before that seq (``-1``: the last page). ``search`` keeps only rows whose
    text holds it. ``tries`` (the task's attempts) tell the attempt of each row.
    """
    rows, more = transcript_rows(ledger, run_id, task_key, after=after, before=before,
                                 limit=limit, search=search)
    starts = [t.started.seq or 0 for t in tries]
    numbers = [t.number for t in tries]
    lines = [transcript_line(row, starts, numbers) for row in rows]
    if before is not None:
        more_before, more_after = more, before > 0
    else:
        more_before, more_after = bool(after), more
    return TranscriptPage(lines, more_before=more_before, more_after=more_after)


def row_before(ledger: Ledger, run_id: str, task_key: str, seq: int) -> int | None:
    """The seq of the task's transcript row just before ``seq`` (None: there is none)."""
    return transcript_row_before(ledger, run_id, task_key, seq)


@dataclass
class FoundLine(Line):
    """A transcript line a search found. An agent's JSON event (``stream`` json, of a
    ``stream_format`` its reader knows) also says what of its conversation holds the
    text, as its page shows it: ``said`` (``assistant``, ``tool``, ``result``, ...) and
    ``shown`` (``← 1 failed``); None where no line of it does."""

    said: str | None = None
    shown: str | None = None


@dataclass
class Found:
    """A task's lines that hold what a run-wide search looked for."""

    task_key: str
    lines: list[FoundLine]


@dataclass
class RunSearch:
    """What a search of every transcript of a run found: per task, in the order of its
    first match. ``after``: where a search that stopped should go on (None: it read to
    the end), stopped because it found ``limit`` lines or its time was up (``timed``)."""

    tasks: list[Found]
    lines: int
    after: int | None = None
    timed: bool = False


# A run-wide search reads the ledger this many events at a time, and stops between two
# reads once its time is up: a page never waits on a scan of every line of a huge run.
SEARCH_WINDOW = 100_000


def search_run(ledger: Ledger, run_id: str, text: str, *, after: int = 0,
               limit: int = 500, seconds: float = 0.2,
               window: int = SEARCH_WINDOW) -> RunSearch:
    """The first ``limit`` transcript lines of the run after seq ``after`` that hold
    ``text`` (whatever its case, as in a task's own search), by task; read for about
    ``seconds`` at most (``window`` events at a time)."""
    deadline = time.monotonic() + seconds
    end = ledger.last_seq()
    rows: list[EventRow] = []
    reached, timed = after, False
    while reached < end and len(rows) < limit:
        through = min(reached + window, end)
        found, full = transcript_rows(ledger, run_id, None, search=text, after=reached,
                                      through=through, limit=limit - len(rows))
        rows += found
        if full:  # the limit was reached inside the window: go on after its last line
            reached = found[-1].seq or reached
            break
        reached = through
        if reached < end and len(rows) < limit and time.monotonic() > deadline:
            timed = True
            break
    return RunSearch(_by_task(ledger, run_id, rows, text), len(rows),
                     reached if reached < end else None, timed)


def _by_task(ledger: Ledger, run_id: str, rows: list[EventRow], text: str) -> list[Found]:
    """The rows a search found as lines, by task in the order of its first."""
    starts = attempt_starts(ledger, run_id, list(dict.fromkeys(
        row.task_key or "" for row in rows)))
    holds = re.compile(re.escape(text), re.IGNORECASE)
    by_task: dict[str, Found] = {}
    for row in rows:
        key = row.task_key or ""
        tries = starts.get(key, [])
        line = transcript_line(row, [s.seq for s in tries], [s.attempt for s in tries])
        hit = FoundLine(**{f.name: getattr(line, f.name) for f in fields(Line)})
        if line.data is not None:
            of_attempt = next((s for s in tries if s.attempt == line.attempt), None)
            said, shown = said_in(line.data, of_attempt and of_attempt.stream_format, holds)
            if said != "json":
                hit.said, hit.shown = said, shown
        by_task.setdefault(key, Found(key, [])).lines.append(hit)
    return list(by_task.values())


@dataclass
class RunFound:
    """What a search of every run found in one of them."""

    run_id: str
    tasks: list[Found]
    lines: int


@dataclass
class EverySearch:
    """What a search of every run found, newest run first, and where it goes on
    (``next_run`` from seq ``next_after``; None: it read every run) having found its
    ``lines`` or (``timed``) used its time."""

    runs: list[RunFound]
    lines: int
    next_run: str | None = None
    next_after: int = 0
    timed: bool = False


def search_runs(ledger: Ledger, run_ids: list[str], text: str, *, after: int = 0,
                limit: int = 500, seconds: float = 0.2) -> EverySearch:
    """``search_run`` over ``run_ids`` in their order (the first from seq ``after``, the
    rest from their start) until ``limit`` lines are found or about ``seconds`` spent."""
    deadline = time.monotonic() + seconds
    found: list[RunFound] = []
    lines = 0
    for run_id in run_ids:
        left = deadline - time.monotonic()
        if left <= 0 or lines >= limit:
            return EverySearch(found, lines, run_id, after, left <= 0)
        one = search_run(ledger, run_id, text, after=after, limit=limit - lines,
                         seconds=left)
        if one.lines:
            found.append(RunFound(run_id, one.tasks, one.lines))
            lines += one.lines
        if one.after is not None:
            return EverySearch(found, lines, run_id, one.after, one.timed)
        after = 0
    return EverySearch(found, lines)


@dataclass(frozen=True)
class Reading:
    """What a task page reads of its attempts' transcripts besides the lines it shows."""

    curves: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    """Per attempt: ``(ts, tokens so far)`` each time a line moved the running count."""
    finals: dict[int, FinalResult] = field(default_factory=dict)
    """Per attempt: the last session end its agent reported (its claim)."""
    failing: dict[int, int] = field(default_factory=dict)
    """Per attempt: the seq of the last tool result its agent's conversation marked an
    error (what a failed attempt's verdict most often follows from)."""


def usage_curves(ledger: Ledger, run_id: str, task_key: str, tries: list[Attempt]) -> Reading:
    """Per attempt whose transcript is a conversation (``agents``): ``(ts, tokens so far)``
    each time one of its lines moved the running count, by the executor's rule
    (``RunningUsage``), and the last result its agent reported. Such an agent reports
    its totals once, at the end; its messages report usage as they arrive, so this is
    the curve a recorded ``task.usage`` is not.

    One range scan of the key's JSON events, of those that mention usage at all (a
    result line does).
    """
    # Usage: the messages' content is not read (what the executor meters by); a line
    # that mentions an error is read whole, for a tool's result marked one.
    parsers = {t.number: USAGE_PARSERS.get(t.stream_format) for t in tries}
    readers = {t.number: parser_for(t.stream_format) for t in tries}
    if not any(parsers.values()):
        return Reading()
    tallies: dict[int, RunningUsage] = {}
    reading = Reading()
    for seq, ts, data, erred in usage_lines(ledger, run_id, task_key):
        number = attempt_at(tries, seq)
        parser = parsers.get(number) if number is not None else None
        if parser is None or number is None or not isinstance(data, dict):
            continue
        entry = parser(data)
        tally = tallies.setdefault(number, RunningUsage())
        if tally.add(entry):
            reading.curves.setdefault(number, []).append((ts, tally.total.total))
        if (final := final_of(entry)) is not None:
            reading.finals[number] = final
        if erred and (read := readers.get(number)) is not None and any(
                isinstance(s, ToolResult) and s.is_error for s in read(data).steps):
            reading.failing[number] = seq
    return reading


def final_of(entry: Entry) -> FinalResult | None:
    return next((s for s in entry.steps if isinstance(s, FinalResult)), None)


def claimed_success(ledger: Ledger, run_id: str) -> frozenset[str]:
    """The run's task keys whose agent last said it ended well (a result or a turn's end
    not marked an error), read by each line's own shape (``auto``)."""
    said: dict[str, bool] = {}
    for key, _, data in result_lines(ledger, run_id):
        if isinstance(data, dict) and (final := final_of(PARSERS["auto"](data))) is not None:
            said[key] = not final.is_error
    return frozenset(key for key, well in said.items() if well)


