"""Reads a page needs that are not in the server's folds: a task's attempts, a page of
its transcript, a run as it was at some seq, an attempt's usage over time, the report's
transcript tails.

Blocking SQLite calls, run in worker threads by the app. Every query is a range
scan of an index the schema has for it: a transcript page is ``LIMIT`` rows of
``(run_id, task_key, seq)`` after or before a seq (keyset paging), so the last page
of a million-line transcript costs what the first one does.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from evalledger.agents import Parser, RunningUsage, lines_of, parser_for
from evalledger.app._repository import load_fold
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    EventType,
    Ledger,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
)
from evalledger.projections import RunSummary, SummaryFold

_COLUMNS = "event_id, run_id, task_key, type, ts, payload, seq, hash"
_OUTPUT = (EventType.TASK_OUTPUT, EventType.TASK_EVENT)
_json_string = json.JSONEncoder(ensure_ascii=False).encode


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

    @property
    def number(self) -> int:
        return self.started.attempt

    @property
    def stream_format(self) -> str:
        return str(self.started.definition.get("stream_format") or "native")

    @property
    def imported(self) -> dict[str, Any] | None:
        """Where the attempt came from, when it was imported (not run here)."""
        return self.started.imported


def attempts(ledger: Ledger, run_id: str, task_key: str) -> list[Attempt]:
    """Every attempt of one task key, in order; empty if the run never started it."""
    _, rows = ledger.query(
        f"SELECT {_COLUMNS} FROM events WHERE run_id = ? AND task_key = ? "
        f"AND type NOT IN ('{EventType.TASK_OUTPUT}', '{EventType.TASK_EVENT}') ORDER BY seq",
        [run_id, task_key],
    )
    found: list[Attempt] = []
    for row in rows:
        event: AnyEvent = EventRow(*row).decode()
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
    return found


def imported(ledger: Ledger, run_id: str) -> dict[str, Any] | None:
    """Where the run came from, when it was imported (its first ``run.started``)."""
    _, rows = ledger.query(
        "SELECT json_extract(payload, '$.imported') FROM events WHERE run_id = ? "
        "AND task_key IS NULL AND type = ? ORDER BY seq LIMIT 1",
        [run_id, EventType.RUN_STARTED])
    found = json.loads(rows[0][0]) if rows and rows[0][0] else None
    return found if isinstance(found, dict) else None


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
    stream: str  # stdout | stderr | json
    text: str
    truncated: bool = False
    data: dict[str, Any] | None = None  # a JSON line's object


@dataclass
class TranscriptPage:
    lines: list[Line]
    more_before: bool
    more_after: bool

    @property
    def first_seq(self) -> int:
        return self.lines[0].seq if self.lines else 0

    @property
    def last_seq(self) -> int:
        return self.lines[-1].seq if self.lines else 0


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
    where = ["run_id = ?", "task_key = ?", f"type IN ('{_OUTPUT[0]}', '{_OUTPUT[1]}')"]
    params: list[Any] = [run_id, task_key]
    if search:
        # Payloads are JSON: look for the text as JSON spells it inside a string.
        where.append("instr(payload, ?) > 0")
        params.append(_json_string(search)[1:-1])
    backwards = before is not None
    if backwards and before is not None and before > 0:
        where.append("seq < ?")
        params.append(before)
    elif not backwards:
        where.append("seq > ?")
        params.append(after or 0)
    order = "DESC" if backwards else "ASC"
    _, rows = ledger.query(
        f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq {order} "
        "LIMIT ?", [*params, limit + 1],
    )
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        rows.reverse()
    starts = [t.started.seq or 0 for t in tries]
    numbers = [t.number for t in tries]
    lines = [_line(EventRow(*row), starts, numbers) for row in rows]
    if backwards:
        more_before, more_after = more, before is not None and before > 0
    else:
        more_before, more_after = bool(after), more
    return TranscriptPage(lines, more_before=more_before, more_after=more_after)


def row_before(ledger: Ledger, run_id: str, task_key: str, seq: int) -> int | None:
    """The seq of the task's transcript row just before ``seq`` (None: there is none)."""
    _, rows = ledger.query(
        f"SELECT max(seq) FROM events WHERE run_id = ? AND task_key = ? "
        f"AND type IN ('{_OUTPUT[0]}', '{_OUTPUT[1]}') AND seq < ?", [run_id, task_key, seq])
    return rows[0][0] if rows and rows[0][0] is not None else None


def _line(row: EventRow, starts: list[int], numbers: list[int]) -> Line:
    payload = json.loads(row.payload)
    seq = row.seq or 0
    index = bisect_right(starts, seq) - 1
    attempt = numbers[index] if index >= 0 else 1
    if row.type == EventType.TASK_EVENT:
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        return Line(seq, row.ts, attempt, int(payload.get("n", 0)), "json",
                    json.dumps(data, ensure_ascii=False, sort_keys=True), data=data)
    # Left out of the payload when they are the default (stdout, not truncated).
    stream = str(payload.get("stream", "stdout"))
    return Line(seq, row.ts, attempt, int(payload.get("n", 0)), stream,
                str(payload.get("line", "")), truncated=bool(payload.get("truncated")))


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
        _, rows = ledger.query(
            f"SELECT {_COLUMNS} FROM events WHERE run_id = ? AND task_key = ? AND seq > ? "
            f"AND type IN ('{_OUTPUT[0]}', '{_OUTPUT[1]}') ORDER BY seq DESC LIMIT ?",
            [summary.run_id, row.task_key, started.seq or 0, lines],
        )
        parser = parser_for(str(started.definition.get("stream_format") or "native"))
        kept: list[TailLine] = []  # newest first
        room = chars
        for stored in rows:  # newest first: read no more than fits
            line = _line(EventRow(*stored), [started.seq or 0], [started.attempt])
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


def usage_curves(ledger: Ledger, run_id: str, task_key: str, tries: list[Attempt],
                 ) -> dict[int, list[tuple[str, int]]]:
    """Per attempt whose transcript is a conversation (``agents``): ``(ts, tokens so far)``
    each time one of its lines moved the running count, by the executor's rule
    (``RunningUsage``). Such an agent reports its totals once, at the end; its messages
    report usage as they arrive, so this is the curve a recorded ``task.usage`` is not.

    One range scan of the key's JSON events, of those that mention usage at all.
    """
    parsers = {t.number: parser_for(t.stream_format) for t in tries}
    if not any(parsers.values()):
        return {}
    _, rows = ledger.query(
        "SELECT seq, ts, payload FROM events WHERE run_id = ? AND task_key = ? AND type = ? "
        "AND instr(payload, '\"usage\"') > 0 ORDER BY seq",
        [run_id, task_key, EventType.TASK_EVENT])
    tallies: dict[int, RunningUsage] = {}
    curves: dict[int, list[tuple[str, int]]] = {}
    for seq, ts, payload in rows:
        number = attempt_at(tries, seq)
        parser = parsers.get(number) if number is not None else None
        data = json.loads(payload).get("data")
        if parser is None or number is None or not isinstance(data, dict):
            continue
        tally = tallies.setdefault(number, RunningUsage())
        if tally.add(parser(data)):
            curves.setdefault(number, []).append((ts, tally.total.total))
    return curves


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
    _, rows = ledger.query(
        "SELECT task_key, json_extract(payload, '$.attempt'), "
        "json_extract(payload, '$.environment_info') FROM events "
        "WHERE run_id = ? AND type = ? AND seq <= ? ORDER BY seq",
        [summary.run_id, EventType.TASK_COMPLETED, until_seq if until_seq is not None
         else 2**62])
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for key, attempt, info in rows:
        number = attempt if isinstance(attempt, int) else 1
        if key not in latest or number >= latest[key][0]:
            latest[key] = (number, json.loads(info) if info else {})
    values: dict[str, dict[str, set[str]]] = {}
    for key, (_, info) in latest.items():
        variant = variant_of.get(key)
        if variant is None:
            continue
        for name in names & info.keys():
            values.setdefault(name, {}).setdefault(variant, set()).add(
                json.dumps(info[name], sort_keys=True))
    return frozenset(name for name, by_variant in values.items()
                     if all(len(v) == 1 for v in by_variant.values()))
