"""Output lines stored in chunks: one ``task.lines`` row for consecutive lines of one
attempt, compressed.

A command's lines were one row each (``task.output``, ``task.event``): nearly every row
of a ledger, each paying an envelope, a hash and four index entries for a line of 40
bytes, and no compressor shrinks a line that short on its own. A chunk is what one
commit of the writer got of one attempt in a row (at most ``MAX_LINES`` lines,
``MAX_TEXT`` bytes of text): one row, one hash, one index entry, its text compressed
as a whole.

Its payload is canonical JSON like any other: ``{"lines":[[ts,payload],...]}``, each
line the time it was read and the payload its own row would have had (a ``task.event``
when it starts ``{"data":``, else a ``task.output``). The chain hashes that text; the
table stores it as a zstd frame (a BLOB) when that is smaller, else as the text.

Invariant (seqs): a chunk of ``k`` lines stored at ``seq`` holds the lines
``seq - k + 1 .. seq``: every line keeps a seq of its own (what pages, criteria and
``events`` name a line by), ``max(seq)`` is still the last one, and the row before a
chunk is at ``seq - k``. Readers (``Ledger.rows``) give a chunk back as its lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import msgspec

from ._packed import whole_frame
from ._rows import STREAM_TYPES, EventRow, EventType

if TYPE_CHECKING:
    from ._events import AnyEvent

LINES = EventType.TASK_LINES.value
# A chunk ends at this many lines or this much text, whichever comes first: a reader
# of one line decompresses at most this much, and a read bounded by seq looks this far
# past it for a chunk holding its last line.
MAX_LINES = 1024
MAX_TEXT = 256 * 1024
# Below this a chunk's text is stored as it is: a frame of a few lines saves nothing.
_PACK_FROM = 256
# A frame's declared size is believed only up to this (a forged row must not make a
# reader allocate what it claims): a chunk's text is at most MAX_TEXT characters and one
# line more (at most 64 KiB of characters, each written as at most 6: "\u0000"), each
# character at most 4 bytes of UTF-8.
MAX_BYTES = 4 * (MAX_TEXT + 6 * 64 * 1024 + 1024)
_EVENT_PREFIX = '{"data":'

_str = json.encoder.encode_basestring


class ChunkError(ValueError):
    """A ``task.lines`` row that does not read as lines (damaged or forged: verify names
    the row)."""


# -- writing ---------------------------------------------------------------------------------


def chunked(events: Sequence[AnyEvent | EventRow]) -> list[AnyEvent | EventRow]:
    """``events`` with each run of two or more consecutive lines of one attempt
    (``task.output``, ``task.event``) made one ``task.lines`` row, in order; every other
    event as it is. The chunk takes its first line's id and time."""
    out: list[AnyEvent | EventRow] = []
    run: list[EventRow] = []
    size = 0
    for event in events:
        if event.type in STREAM_TYPES:
            row = event if type(event) is EventRow else EventRow.of(event)
            if run and (row.task_key != run[0].task_key or row.run_id != run[0].run_id
                        or len(run) >= MAX_LINES or size + len(row.payload) > MAX_TEXT):
                _flush(run, out)
                run, size = [], 0
            run.append(row)
            size += len(row.payload) + len(row.ts) + 6
            continue
        if run:
            _flush(run, out)
            run, size = [], 0
        out.append(event)
    if run:
        _flush(run, out)
    return out


def _flush(run: list[EventRow], out: list[AnyEvent | EventRow]) -> None:
    if len(run) == 1:
        out.append(run[0])
        return
    first = run[0]
    out.append(EventRow(first.event_id, first.run_id, first.task_key, LINES, first.ts,
                        lines_payload((row.ts, row.payload) for row in run)))


def lines_payload(lines: Iterable[tuple[str, str]]) -> str:
    """The canonical payload of a chunk of ``(ts, payload)`` lines (each payload canonical
    already: what ``TaskLines``' model writes, a property test holds them equal)."""
    return '{"lines":[' + ",".join(f"[{_str(ts)},{payload}]" for ts, payload in lines) + "]}"


def stored_lines(text: str) -> tuple[int, bytes | str]:
    """How many lines a chunk's payload holds, and how the table stores it: a zstd frame
    of its text when that is smaller, else the text.

    Raises:
        ChunkError: the payload is not a chunk (a row written by hand).
    """
    count = count_lines(text)
    data = text.encode()
    if len(data) > MAX_BYTES:
        raise ChunkError(f"a chunk holds {len(data):,} bytes of text, over {MAX_BYTES:,}")
    if len(data) < _PACK_FROM:
        return count, text
    import zstandard

    frame = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(data)
    return count, frame if len(frame) < len(data) else text


# -- reading ---------------------------------------------------------------------------------


class _Entries(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    lines: list[tuple[str, msgspec.Raw]]


_decode_entries = msgspec.json.Decoder(_Entries).decode


def _entries(text: str | bytes) -> list[tuple[str, msgspec.Raw]]:
    try:
        entries = _decode_entries(text).lines
    except msgspec.DecodeError as e:
        raise ChunkError(f"task.lines payload is not a chunk of lines: {e}") from e
    if not entries or len(entries) > MAX_LINES:
        raise ChunkError(f"a chunk holds 1 to {MAX_LINES} lines, not {len(entries)}")
    return entries


def unstored(value: bytes) -> str:
    """A chunk's text from the frame the table stores.

    Raises:
        ChunkError: not one whole zstd frame of a plausible declared size, or not UTF-8.
    """
    import zstandard

    try:
        size = zstandard.frame_content_size(value)
    except zstandard.ZstdError as e:
        raise ChunkError(f"a chunk does not decompress: {e}") from e
    if not 0 <= size <= MAX_BYTES:
        raise ChunkError("a chunk's frame does not declare a plausible size")
    data = whole_frame(value, size, "a chunk", "decompress", ChunkError)
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ChunkError("a chunk's text is not UTF-8") from e


def count_lines(text: str | bytes) -> int:
    """How many lines a chunk's payload holds.

    Raises:
        ChunkError: it does not read as lines.
    """
    return len(_entries(text))


def line_count(row: EventRow) -> int:
    """How many seqs the stored row takes: its lines for a chunk, else 1.

    Raises:
        ChunkError: a chunk that does not read as lines.
    """
    return count_lines(row.payload) if row.type == LINES else 1


def widened(until_seq: int | None) -> int | None:
    """How far past ``until_seq`` a read bounded by it looks for a chunk (stored at its
    last line's seq) holding lines up to it."""
    return None if until_seq is None else min(until_seq + MAX_LINES - 1, 2**63 - 1)


def lines_of(row: EventRow, types: frozenset[str] | None = None, after_seq: int = 0,
             until_seq: int | None = None) -> Iterator[EventRow]:
    """The lines a stored ``task.lines`` row holds, as the rows they would have been (their
    own seq; the chunk's id for the first, ``ID.i`` for the others; no hash: the chunk
    holds it), of ``types`` (None: both) in ``after_seq < seq <= until_seq``.

    Raises:
        ChunkError: the row does not read as lines.
    """
    entries = _entries(row.payload)
    numbered = row.seq is not None  # None: a chunk not stored yet (its lines have none)
    seq = (row.seq or 0) - len(entries)
    event_id, run_id, task_key = row.event_id, row.run_id, row.task_key
    for i, (ts, raw) in enumerate(entries):
        seq += 1
        if numbered and (seq <= after_seq or (until_seq is not None and seq > until_seq)):
            continue
        payload = bytes(raw).decode()
        type_ = (EventType.TASK_EVENT.value if payload.startswith(_EVENT_PREFIX)
                 else EventType.TASK_OUTPUT.value)
        if types is not None and type_ not in types:
            continue
        yield _new_row(EventRow, (event_id if i == 0 else f"{event_id}.{i}", run_id, task_key,
                                  type_, ts, payload, seq if numbered else None, None))


def as_lines(events: Iterable[AnyEvent | EventRow]) -> Iterator[AnyEvent | EventRow]:
    """``events`` with each chunk (a ``task.lines`` row) given as its lines, every other
    event as it is: what a run's callbacks see of what was written.

    Raises:
        ChunkError: a chunk does not read as lines.
    """
    for event in events:
        if type(event) is EventRow and event.type == LINES:
            yield from lines_of(event)
        else:
            yield event


_new_row = tuple.__new__
