"""The stored form of an event and the names of event types: no pydantic here.

What reads the ledger without decoding events (listing runs, SQL, following new
rows) needs only these, and start-up time matters for every command: the typed
models live in ``_events`` and are imported when an event is decoded.
"""

from __future__ import annotations

import re
from contextlib import suppress
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ._events import AnyEvent


class EventType(StrEnum):
    """Every event type this version writes (docs/events.md). A ``str``: compare freely."""

    RUN_STARTED = "run.started"
    RUN_RESUMED = "run.resumed"
    RUN_FINISHED = "run.finished"
    TASK_SKIPPED = "task.skipped"
    TASK_STARTED = "task.started"
    TASK_OUTPUT = "task.output"
    TASK_EVENT = "task.event"
    TASK_LINES = "task.lines"
    TASK_USAGE = "task.usage"
    TASK_COMPLETED = "task.completed"
    TASK_INTERRUPTED = "task.interrupted"
    TASK_ISOLATION = "task.isolation"
    TASK_EGRESS = "task.egress"
    TASK_STALLED = "task.stalled"
    TASK_OUTPUT_TRUNCATED = "task.output_truncated"
    TASK_GRADED = "task.graded"
    RUN_GRADED = "run.graded"
    TASK_FLAGGED = "task.flagged"
    RUN_SNAPSHOT = "run.snapshot"
    RUN_MERGED = "run.merged"
    RUN_SIGNED = "run.signed"

class EventRow(NamedTuple):
    """One event in its stored form: the envelope columns and the canonical payload text,
    plus ``seq`` and ``hash`` once the ledger has assigned them (``None`` before).

    The hot path of a run is one ``task.output`` per line a command prints; there,
    building a pydantic model only to serialise it again cost as much as the
    insert. ``TaskOutput.encoded`` builds the row directly, and a property test
    holds it byte-equal to ``encode_payload(TaskOutput(...))``. ``decode`` gives the
    typed event back, as for any stored row.
    """

    event_id: str
    run_id: str
    task_key: str | None
    type: str
    ts: str
    payload: str
    seq: int | None = None
    hash: str | None = None

    def decode(self) -> AnyEvent:
        from ._events import decode_row

        return decode_row(self)

    @classmethod
    def of(cls, event: AnyEvent | EventRow) -> EventRow:
        """An event in stored form, not yet numbered or hashed (a row stays as it is)."""
        if type(event) is EventRow:
            return event
        from ._events import encode_payload

        return cls(event.event_id, event.run_id, event.task_key, event.type, event.ts,
                   encode_payload(event))



STREAM_TYPES = (EventType.TASK_OUTPUT, EventType.TASK_EVENT)
# Types the lifecycle index leaves out: the lines a command prints (most rows), alone or
# in chunks, and snapshots (large, and read by kind rather than folded).
UNFOLDED_TYPES = (*STREAM_TYPES, EventType.TASK_LINES, EventType.RUN_SNAPSHOT)
# The partial lifecycle index's condition, written exactly so a query can repeat it:
# SQLite uses a partial index only when the query's WHERE contains its WHERE terms.
LIFECYCLE_WHERE = f"type NOT IN ({', '.join(repr(str(t)) for t in UNFOLDED_TYPES)})"
# The condition of schema 6 to 16, before chunks (frozen: migrations 0006 and 0014 made
# it, and a ledger not yet migrated is read through it).
LIFECYCLE_WHERE_6 = ("type NOT IN ('task.output', 'task.event', 'run.snapshot')")
# The condition of schema 3 to 5, before snapshots existed (frozen: migration 0003
# made it, and a ledger not yet migrated is read through it).
LIFECYCLE_WHERE_3 = f"type NOT IN ('{EventType.TASK_OUTPUT}', '{EventType.TASK_EVENT}')"


# -- the stored envelope (schema 14) ---------------------------------------------------------
#
# An event id in its canonical spelling (lowercase UUID text) is stored as its 16 bytes and
# a hash (64 lowercase hex digits) as its 32: 92 bytes less per event with the UNIQUE
# index. Anything else (an imported id of another shape, a damaged hash) is stored as the
# text it is, so every value reads back exactly. The chain hashes the text either way
# (_chain): readers turn the bytes back into it here, and nowhere else.

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def stored_id(event_id: str) -> bytes | str:
    """How the events table stores ``event_id``: 16 bytes when canonical, else itself."""
    if _UUID.fullmatch(event_id):
        return bytes.fromhex(event_id.replace("-", ""))
    return event_id


def text_id(stored: Any) -> Any:
    """The event id ``stored_id`` stored as ``stored`` (any other value as it is: verify
    names a BLOB of another size as damage)."""
    if type(stored) is bytes and len(stored) == 16:
        h = stored.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return stored


def stored_hash(hash_: str) -> bytes | str:
    """How the events table stores a row's hash: 32 bytes when canonical hex, else itself."""
    return bytes.fromhex(hash_) if _HEX64.fullmatch(hash_) else hash_


def text_hash(stored: Any) -> Any:
    """The hash ``stored_hash`` stored as ``stored`` (any other value as it is)."""
    if type(stored) is bytes and len(stored) == 32:
        return stored.hex()
    return stored


def fetched(row: tuple[Any, ...]) -> EventRow:
    """A row fetched in EventRow's column order (``_store._COLUMNS``), its id and hash as
    text, a chunk's payload as its text (``_lines``; one that does not decompress stays
    the bytes it is: decoding it names the row)."""
    event_id, run_id, task_key, type_, ts, payload, seq, hash_ = row
    if type(payload) is bytes and type_ == EventType.TASK_LINES:
        from ._lines import ChunkError, unstored

        with suppress(ChunkError):
            payload = unstored(payload)
    return _new_tuple(EventRow, (text_id(event_id), run_id, task_key, type_, ts, payload, seq,
                                 text_hash(hash_)))


_new_tuple = tuple.__new__
