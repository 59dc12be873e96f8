"""Reads a page needs that are not in the server's folds: a task's attempts, a page of
its transcript, a run as it was at some seq.

Blocking SQLite calls, run in worker threads by the app. Every query is a range
scan of an index the schema has for it: a transcript page is ``LIMIT`` rows of
``(run_id, task_key, seq)`` after or before a seq (keyset paging), so the last page
of a million-line transcript costs what the first one does.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

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
from evalledger.projections import RunSummary, SummaryFold, load_fold

_COLUMNS = "event_id, run_id, task_key, type, ts, payload, seq, hash"
_OUTPUT = (EventType.TASK_OUTPUT, EventType.TASK_EVENT)
_json_string = json.JSONEncoder(ensure_ascii=False).encode


def summary_at(ledger: Ledger, run_id: str, seq: int) -> RunSummary:
    """The run as it was once the event at ``seq`` was written: the same fold, stopped
    (from a snapshot made by then, if there is one)."""
    return load_fold(ledger, SummaryFold, run_id, until_seq=seq).summary()


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


@dataclass
class Line:
    """One transcript row as a page shows it."""

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


def tails(ledger: Ledger, summary: RunSummary, *, lines: int = 20, chars: int = 2000,
          ) -> dict[str, list[Line]]:
    """Per task key, the last ``lines`` lines of its latest attempt's transcript, at most
    ``chars`` characters of them (what the HTML report shows).

    One scan of the run's starts finds each key's latest attempt; then one
    ``LIMIT lines`` range scan per key, backwards from its last row.
    """
    latest: dict[str, TaskStarted] = {}
    for event in ledger.events(summary.run_id, types={EventType.TASK_STARTED}):
        if isinstance(event, TaskStarted):
            latest[event.task_key] = event
    found: dict[str, list[Line]] = {}
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
        kept: list[Line] = []
        room = chars
        for stored in rows:  # newest first
            if room <= 0:
                break
            line = _line(EventRow(*stored), [started.seq or 0], [started.attempt])
            if len(line.text) > room:
                line.text = "\u2026" + line.text[-room:]
            room -= len(line.text)
            kept.append(line)
        found[row.task_key] = kept[::-1]
    return found
