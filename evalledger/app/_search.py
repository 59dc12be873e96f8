"""Searching transcripts (``evalledger search``, ``evalledger.search``): the lines the
attempts' commands printed that hold a text, whatever its case, run by run, newest run
first.

A line is searched as a page shows it: an output line's words, a JSON event's data as
JSON spells it (``_page_queries.transcript_rows``), never the payload's own field names.
A hit is given as a person reads it: an output line as it is; an agent's JSON event as
the lines of its conversation that hold the text (``agents.lines_of``: ``assistant:
...``, ``→ Bash: ...``), its JSON text when none does (the text is in a field the
conversation does not show).

There is no full-text index: a chunk is read, decompressed and matched (about 440,000
lines a second, docs/cli.md). An FTS5 index over the lines cost two thirds of the ledger
again (measured on bench/scale.py's 10,000-task ledger, docs/ledger.md "Lines in
chunks"), against a storage budget the lines alone already fill.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalledger.ledger import EventRow, EventType, Ledger
from evalledger.ledger._page_queries import Start, attempt_starts, transcript_rows

from . import DEFAULT_LEDGER
from ._transcripts import said_in


@dataclass(frozen=True)
class Hit:
    """A transcript line that holds the text: where it is (run, task key, attempt, the
    line's seq and time), what it is (``stdout``, ``stderr``, ``json``, or a conversation
    line's kind: ``assistant``, ``tool``, ``result``...) and its text as shown."""

    run_id: str
    task_key: str
    attempt: int
    seq: int
    ts: str
    kind: str
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "task_key": self.task_key, "attempt": self.attempt,
                "seq": self.seq, "ts": self.ts, "kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class Searched:
    """What a search found: its hits in the order read (newest run first, each run's in
    seq order), the runs it read, and whether it stopped at its limit (``more``: lines
    past the last hit were not read)."""

    hits: list[Hit]
    runs: list[str]
    more: bool


def search(text: str, runs: Sequence[str] = (), *, ledger: Path | str = DEFAULT_LEDGER,
           limit: int = 100) -> Searched:
    """The first ``limit`` transcript lines that hold ``text`` (whatever its case), in
    ``runs`` (ids, unique prefixes or ``latest``; none: every run, newest first).

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
        RunNotFound: no run answers to one of ``runs``.
        InvalidRequest: ``text`` is empty.
    """
    with Ledger(ledger, read_only=True) as opened:
        return search_ledger(opened, text, runs, limit=limit)


def search_ledger(ledger: Ledger, text: str, runs: Sequence[str] = (), *,
                  limit: int = 100) -> Searched:
    """``search`` in an open ledger."""
    from evalledger.errors import InvalidRequest

    if not text:
        raise InvalidRequest("search for what? give the text to look for")
    run_ids = (list(dict.fromkeys(ledger.resolve_run(r) for r in runs)) if runs
               else ledger.run_ids()[::-1])
    holds = re.compile(re.escape(text), re.IGNORECASE)
    hits: list[Hit] = []
    read: list[str] = []
    for run_id in run_ids:
        if len(hits) >= limit:
            return Searched(hits, read, True)
        read.append(run_id)
        rows, more = transcript_rows(ledger, run_id, None, search=text,
                                     limit=limit - len(hits))
        starts = attempt_starts(ledger, run_id, list(dict.fromkeys(
            row.task_key or "" for row in rows)))
        hits += (_hit(run_id, row, starts.get(row.task_key or "", []), holds)
                 for row in rows)
        if more:
            return Searched(hits, read, True)
    return Searched(hits, read, False)


def _hit(run_id: str, row: EventRow, starts: list[Start], holds: re.Pattern[str]) -> Hit:
    seq = row.seq or 0
    index = bisect_right([s.seq for s in starts], seq) - 1
    start = starts[index] if index >= 0 else Start(0, 1, None)
    payload = json.loads(row.payload)
    kind, shown = str(payload.get("stream", "stdout")), str(payload.get("line", ""))
    if row.type == EventType.TASK_EVENT:
        kind, shown = said_in(payload.get("data"), start.stream_format, holds)
    return Hit(run_id, row.task_key or "", start.attempt, seq, row.ts, kind, shown)

