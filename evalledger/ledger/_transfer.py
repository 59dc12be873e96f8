"""Carrying events between ledgers: NDJSON export and import, and merging a ledger.

An event's identity is its ``event_id``: appending one a ledger already holds adds
nothing (``Ledger.append``), so importing the same file twice, or merging the same
ledger twice, adds nothing. Events keep their ids, envelopes and payload text; only
their ``seq`` and ``hash`` are the destination's (the chain is one per ledger). Where
they came from is recorded after them, per run, as a ``run.merged`` event: the
source ledger's id (or the file), and the range of source seqs.

Snapshots are not carried: their ``through_seq`` counts the source's rows, and the
destination snapshots finished runs itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._rows import EventRow, EventType
from ._store import _first_error

if TYPE_CHECKING:
    from ._store import Ledger

_str = json.JSONEncoder(ensure_ascii=False).encode
BATCH = 5000


def ndjson(row: EventRow) -> str:
    """One event as one line: the envelope, then the stored payload text spliced in whole
    (what ``evalledger events`` prints and ``import-events`` reads back byte for byte)."""
    return (
        f'{{"seq":{row.seq},"event_id":{_str(row.event_id)},"run_id":{_str(row.run_id)},'
        f'"task_key":{_str(row.task_key)},"type":{_str(row.type)},"ts":{_str(row.ts)},'
        f'"payload":{row.payload}}}'
    )


class BadLine(ValueError):
    """A line of an events file that is not an event; says which line and why."""


def parse_line(line: str, number: int) -> tuple[EventRow, int | None]:
    """An NDJSON line back into a row (no seq or hash: the destination's) and the seq it
    had where it came from. The payload text is taken as written when it is the JSON
    the line holds (as ``ndjson`` writes it); else it is re-encoded canonically.

    Raises:
        BadLine: not JSON, not an event, or a payload that does not fit its type.
    """
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise BadLine(f"line {number}: not JSON ({e})") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("payload"), dict):
        raise BadLine(f"line {number}: not an event (no payload object)")
    event_id, run_id, task_key, type_, ts = (
        obj.get(k) for k in ("event_id", "run_id", "task_key", "type", "ts"))
    if not (isinstance(event_id, str) and isinstance(run_id, str) and isinstance(type_, str)
            and isinstance(ts, str) and (task_key is None or isinstance(task_key, str))):
        raise BadLine(f"line {number}: the envelope is incomplete")
    text = _payload_text(line)
    if text is None or _loads(text) != obj["payload"]:
        text = json.dumps(obj["payload"], ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"))
    row = EventRow(event_id, run_id, task_key, type_, ts, text)
    from pydantic import ValidationError

    from ._events import encode_payload

    try:
        event = row.decode()
    except ValidationError as e:
        raise BadLine(f"line {number}: {row.type} does not validate: {_first_error(e)}") from e
    except ValueError as e:
        raise BadLine(f"line {number}: {row.type} does not validate: {e}") from e
    if text != encode_payload(event):  # not canonical: store the canonical form
        row = row._replace(payload=encode_payload(event))
    seq = obj.get("seq")
    return row, seq if isinstance(seq, int) else None


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _payload_text(line: str) -> str | None:
    """The payload's text as it stands in a line ``ndjson`` wrote: the last field."""
    at = line.find(',"payload":')
    body = line.rstrip()
    return body[at + len(',"payload":'):-1] if at >= 0 and body.endswith("}") else None


@dataclass
class Transfer:
    """What an import or a merge did."""

    read: int = 0
    added: int = 0
    runs: dict[str, list[int]] = field(default_factory=dict)
    """Run id -> the source seqs of its events read (first, last)."""


def append_all(ledger: Ledger, rows: Iterable[tuple[EventRow, int | None]], *,
               source: str, source_ledger: str | None) -> Transfer:
    """Append what ``ledger`` lacks of ``rows``, in their order, in batches; then, per
    run that gained events, a ``run.merged`` saying where they came from."""
    from ._events import RunMerged

    done = Transfer()
    batch: list[EventRow] = []
    gained: dict[str, int] = {}

    def flush() -> None:
        if batch:
            before = ledger.last_seq()
            for row, seq in zip(batch, ledger.append(batch), strict=True):
                if seq > before:  # new here (an event already held keeps its old seq)
                    gained[row.run_id] = gained.get(row.run_id, 0) + 1
                    done.added += 1
            batch.clear()

    for row, seq in rows:
        if row.type in (EventType.RUN_SNAPSHOT, EventType.RUN_MERGED):
            continue  # derived, and about the source's seqs
        done.read += 1
        span = done.runs.setdefault(row.run_id, [seq or 0, seq or 0])
        span[1] = seq or span[1]
        batch.append(row)
        if len(batch) >= BATCH:
            flush()
    flush()
    if gained:
        ledger.append([RunMerged(run_id=run_id, source=source, source_ledger=source_ledger,
                                 source_seqs=done.runs[run_id], events=n)
                       for run_id, n in gained.items()])
    return done


def rows_of(ledger: Ledger) -> Iterator[tuple[EventRow, int | None]]:
    """Every row of the ledger, in seq order, with its seq: what a merge reads."""
    for row in ledger.rows():
        yield row, row.seq
