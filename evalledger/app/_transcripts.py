"""A task's transcript as it is read to be shown: one stored row as a line (``Line``:
an output line, a JSON event, a note where output past ``max_output`` was left out),
and the tail of each task's latest attempt (what the HTML report shows).

The viewer's pages read their transcripts through ``transcript_line`` too: one reading
of a stored row, whatever shows it.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from evalledger.agents import Parser, lines_of, parser_for
from evalledger.ledger import EventRow, EventType, Ledger, TaskStarted, transcript_tail
from evalledger.projections import RunSummary
from evalledger.render import TailLine


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


def transcript_line(row: EventRow, starts: list[int], numbers: list[int]) -> Line:
    """A stored transcript row as a page shows it; ``starts`` (the seqs of the task's
    attempts' starts, ascending) and ``numbers`` (their attempt numbers) tell its
    attempt."""
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
            line = transcript_line(stored, [started.seq or 0], [started.attempt])
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


# A conversation line is cut at this many characters by its reader (``lines_of``): a
# search shows the whole line that holds the text.
_WIDE = 1_000_000


def said_in(data: Any, stream_format: str | None, holds: re.Pattern[str]) -> tuple[str, str]:
    """A JSON event's lines of conversation that hold the text, as ``(kind, text)``;
    ``("json", its JSON text)`` when it is no conversation's or none of them does."""
    parse = parser_for(stream_format)
    if parse is not None and isinstance(data, dict):
        said = [line for line in lines_of(parse(data), width=_WIDE, result_lines=_WIDE)
                if holds.search(line.text)]
        if said:
            return said[0].kind, "\n".join(line.text for line in said)
    return "json", json.dumps(data, ensure_ascii=False, sort_keys=True)
