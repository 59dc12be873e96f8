"""Reads a page needs that are not in the server's folds: a task's attempts, a page of
its transcript, a run as it was at some seq, an attempt's usage over time, the report's
transcript tails.

Blocking calls, run in worker threads by the app. The SQL is the ledger's
(``evalledger.ledger._page_queries``: named range scans of the schema's indexes);
this module turns the rows into what a page shows.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from evalledger.agents import (
    PARSERS,
    USAGE_PARSERS,
    Entry,
    FinalResult,
    Parser,
    RunningUsage,
    lines_of,
    parser_for,
)
from evalledger.app import load_fold
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    EventType,
    Ledger,
    TaskCompleted,
    TaskFlagged,
    TaskGraded,
    TaskInterrupted,
    TaskIsolation,
    TaskStarted,
    TaskUsage,
    attempt_starts,
    completion_environments,
    result_lines,
    run_imported,
    task_lifecycle,
    transcript_row_before,
    transcript_rows,
    transcript_tail,
    usage_lines,
)
from evalledger.projections import RunSummary, SummaryFold


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


def imported(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """Where the run came from, when it was imported (its first ``run.started``)."""
    return run_imported(ledger, run_id)


def attempt_at(tries: list[Attempt], seq: int) -> int | None:
    """The number of the attempt a row at ``seq`` belongs to (None: before the first)."""
    index = bisect_right([t.started.seq or 0 for t in tries], seq) - 1
    return tries[index].number if index >= 0 else None


@dataclass
class Line:
    """One transcript row as a page shows it."""

    kind: ClassVar[str] = "line"  # beside an AttemptMark's "mark" in a page's rows

    seq: int
    ts: str
    attempt: int
    n: int
    stream: str  # stdout | stderr | json | note (output left out past max_output)
    text: str
    truncated: bool = False
    data: dict[str, Any] | None = None  # a JSON line's object


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
    lines = [_line(row, starts, numbers) for row in rows]
    if before is not None:
        more_before, more_after = more, before > 0
    else:
        more_before, more_after = bool(after), more
    return TranscriptPage(lines, more_before=more_before, more_after=more_after)


def row_before(ledger: Ledger, run_id: str, task_key: str, seq: int) -> int | None:
    """The seq of the task's transcript row just before ``seq`` (None: there is none)."""
    return transcript_row_before(ledger, run_id, task_key, seq)


def _line(row: EventRow, starts: list[int], numbers: list[int]) -> Line:
    payload = json.loads(row.payload)
    seq = row.seq or 0
    index = bisect_right(starts, seq) - 1
    attempt = numbers[index] if index >= 0 else 1
    if row.type == EventType.TASK_OUTPUT_TRUNCATED:
        return Line(seq, row.ts, attempt, int(payload.get("from_n", 0)), "note",
                    omitted_text(payload))
    if row.type == EventType.TASK_EVENT:
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        return Line(seq, row.ts, attempt, int(payload.get("n", 0)), "json",
                    json.dumps(data, ensure_ascii=False, sort_keys=True), data=data)
    # Left out of the payload when they are the default (stdout, not truncated).
    stream = str(payload.get("stream", "stdout"))
    return Line(seq, row.ts, attempt, int(payload.get("n", 0)), stream,
                str(payload.get("line", "")), truncated=bool(payload.get("truncated")))


def omitted_text(payload: dict[str, Any]) -> str:
    """What a page says where a ``task.output_truncated`` cut the transcript."""
    lines, size = payload.get("omitted_lines"), payload.get("omitted_bytes")
    limit = payload.get("limit_bytes")
    tail = ("; the last lines follow" if payload.get("tail_from_n") is not None else "")
    return (f"… {lines:,} lines ({size:,} bytes) not recorded: past max_output "
            f"({limit:,} bytes){tail} …" if isinstance(lines, int) and isinstance(size, int)
            and isinstance(limit, int) else "… output past max_output not recorded …")


@dataclass
class Found:
    """A task's lines that hold what a run-wide search looked for."""

    task_key: str
    lines: list[Line]


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
    keys = list(dict.fromkeys(row.task_key or "" for row in rows))
    starts = {key: ([start.seq for start in found], [start.attempt for start in found])
              for key, found in attempt_starts(ledger, run_id, keys).items()}
    by_task: dict[str, Found] = {}
    for row in rows:
        key = row.task_key or ""
        seqs, numbers = starts.get(key, ([], []))
        by_task.setdefault(key, Found(key, [])).lines.append(_line(row, seqs, numbers))
    return RunSearch(list(by_task.values()), len(rows),
                     reached if reached < end else None, timed)


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


class TailLine(NamedTuple):
    """A line of the report's transcript tail: what it is (stdout, stderr, json, or a
    conversation line's kind: assistant, tool, result, ...) and its text."""

    kind: str
    text: str


def tails(ledger: Ledger, summary: RunSummary, *, lines: int = 20, chars: int = 2000,
          ) -> dict[str, list[TailLine]]:
    """Per task key, the tail of its latest attempt's transcript (what the HTML report
    shows): its last ``lines`` rows, a conversation's JSON lines read as the conversation
    (``agents``), kept whole, newest first, while they fit in ``chars`` characters. A
    newest line longer than that alone shows its end, saying how much was left out.

    One scan of the run's starts finds each key's latest attempt; then one
    ``LIMIT lines`` range scan per key, backwards from its last row.
    """
    latest: dict[str, TaskStarted] = {}
    for event in ledger.events(summary.run_id, types={EventType.TASK_STARTED}):
        if isinstance(event, TaskStarted):
            latest[event.task_key] = event
    found: dict[str, list[TailLine]] = {}
    for row in summary.tasks:
        started = latest.get(row.task_key)
        if started is None:
            found[row.task_key] = []
            continue
        rows = transcript_tail(ledger, summary.run_id, row.task_key, started.seq or 0, lines)
        parser = parser_for(str(started.definition.get("stream_format") or "native"))
        kept: list[TailLine] = []  # newest first
        room = chars
        for stored in rows:  # newest first: read no more than fits
            line = _line(stored, [started.seq or 0], [started.attempt])
            room = _fit(reversed(_tail_lines(line, parser, chars)), room, kept)
            if room < 0:
                break
        found[row.task_key] = kept[::-1]
    return found


def _tail_lines(line: Line, parser: Parser | None, width: int) -> list[TailLine]:
    if line.data is None or parser is None:
        return [TailLine(line.stream, line.text)]
    return [TailLine(ln.kind, ln.text) for ln in lines_of(parser(line.data), width=width)]


def _fit(newest_first: Iterable[TailLine], room: int, kept: list[TailLine]) -> int:
    """Add to ``kept`` (newest first) the lines that fit in ``room`` characters, whole;
    return the room left, -1 once a line did not fit (nothing older may follow it)."""
    for tail in newest_first:
        if len(tail.text) > room:
            if not kept:  # the newest line alone is too long: its end, marked as cut
                left = len(tail.text) - room
                kept.append(TailLine(tail.kind, f"[{left:,} characters before] \u2026"
                                                f"{tail.text[-room:]}"))
            return -1
        room -= len(tail.text)
        kept.append(tail)
    return room


@dataclass(frozen=True)
class Reading:
    """What a task page reads of its attempts' transcripts besides the lines it shows."""

    curves: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    """Per attempt: ``(ts, tokens so far)`` each time a line moved the running count."""
    finals: dict[int, FinalResult] = field(default_factory=dict)
    """Per attempt: the last session end its agent reported (its claim)."""


def usage_curves(ledger: Ledger, run_id: str, task_key: str, tries: list[Attempt]) -> Reading:
    """Per attempt whose transcript is a conversation (``agents``): ``(ts, tokens so far)``
    each time one of its lines moved the running count, by the executor's rule
    (``RunningUsage``), and the last result its agent reported. Such an agent reports
    its totals once, at the end; its messages report usage as they arrive, so this is
    the curve a recorded ``task.usage`` is not.

    One range scan of the key's JSON events, of those that mention usage at all (a
    result line does).
    """
    # Usage only: the messages' content is not read (what the executor meters by).
    parsers = {t.number: USAGE_PARSERS.get(t.stream_format) for t in tries}
    if not any(parsers.values()):
        return Reading()
    tallies: dict[int, RunningUsage] = {}
    reading = Reading()
    for seq, ts, data in usage_lines(ledger, run_id, task_key):
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


def variant_bound(ledger: Ledger, summary: RunSummary, until_seq: int | None = None,
                  ) -> frozenset[str]:
    """The environment fields of the run's version drift that its variants define: the
    keys of each variant agree on one value, and the variants differ (an experiment of
    two models has two models by design: that is its point, not drift).

    Read only when there is drift and more than one variant: the latest completion of
    each key, its ``environment_info``, by the fold's rule (the highest attempt).
    """
    names = set(summary.version_drift)
    if not names or len(summary.variants) < 2:
        return frozenset()
    variant_of = {row.task_key: row.variant_id for row in summary.tasks}
    values: dict[str, dict[str, set[str]]] = {}
    for key, info in _latest_environments(ledger, summary.run_id, until_seq).items():
        variant = variant_of.get(key)
        if variant is None:
            continue
        for name in names & info.keys():
            values.setdefault(name, {}).setdefault(variant, set()).add(
                json.dumps(info[name], sort_keys=True))
    return frozenset(name for name, by_variant in values.items()
                     if all(len(v) == 1 for v in by_variant.values()))


def _latest_environments(ledger: Ledger, run_id: str, until_seq: int | None,
                         ) -> dict[str, dict[str, Any]]:
    """Per task key, the ``environment_info`` of its latest completion (the highest
    attempt; of equal ones, the last)."""
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for key, number, info in completion_environments(ledger, run_id, until_seq):
        if key not in latest or number >= latest[key][0]:
            latest[key] = (number, info)
    return {key: info for key, (_, info) in latest.items()}
