"""The hash chain that makes an edit to history visible.

Row ``n``'s hash is::

    sha256( "\\n".join([hash(n-1), seq, event_id, run_id, task_key or "", type, ts, payload]) )

over UTF-8, as lowercase hex, where ``hash(0)`` is 64 zeros and ``payload`` is the
stored payload text (a chunk of lines stored as a zstd frame: the text it holds, ``_lines``),
itself canonical JSON (keys sorted at every level, no
spaces, numbers as pydantic-core spells them: ``0.00001`` where Python's json
writes ``1e-05``; the chain hashes the stored text, so nothing re-serialises).
No envelope field may hold a newline (the event models refuse one) and a task
key is never empty, so the framing is unambiguous. An auditor can
recompute the chain from the table with nothing but this paragraph:
``SELECT seq, event_id, run_id, task_key, type, ts, payload, hash FROM events ORDER BY seq``,
reading an ``event_id`` stored as 16 bytes as the UUID they are (lowercase, hyphenated)
and a ``hash`` stored as 32 bytes as its lowercase hex (schema 14 stores canonical ids and
hashes so; any other value is the text it was written as).

Editing a payload (after dropping the triggers) breaks the link of that row;
deleting a row leaves a gap in ``seq`` and breaks the next link. Rewriting every
later hash too would go unnoticed by the chain alone: anchor the last hash
somewhere else (``evalledger verify`` prints it) if that is your threat.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import sha256
from typing import Any

from ._lines import LINES, stored_lines
from ._rows import EventRow, stored_id

GENESIS = "0" * 64


def chain_rows(prev: str, first_seq: int, rows: Iterable[EventRow]) -> list[tuple[Any, ...]]:
    """Number consecutive rows from ``first_seq`` and hash them onto ``prev``:
    ``(seq, event_id, run_id, task_key, type, ts, payload, hash)`` each, ready to insert
    (the id and the hash as the table stores them: ``_rows.stored_id``, ``stored_hash``;
    a chunk's payload compressed, its seq its last line's: ``_lines``).

    The formula lives only here and in ``link``; this loop is the append hot path, so it
    is inlined (tests/ledger/test_verify.py holds the two equal).
    """
    out: list[tuple[Any, ...]] = []
    add = out.append
    seq = first_seq
    for event_id, run_id, task_key, type_, ts, payload, _, _ in rows:
        stored: str | bytes = payload
        if type_ == LINES:  # a chunk of k lines takes k seqs, stored at its last (_lines)
            count, stored = stored_lines(payload)
            seq += count - 1
        digest = sha256(
            f"{prev}\n{seq}\n{event_id}\n{run_id}\n{task_key or ''}\n{type_}\n{ts}\n{payload}"
            .encode()
        ).digest()
        prev = digest.hex()
        add((seq, stored_id(event_id), run_id, task_key, type_, ts, stored, digest))
        seq += 1
    return out


def link(prev: str, seq: int, event_id: str, run_id: str, task_key: str | None, type_: str,
         ts: str, payload: str) -> str:
    """The hash of the row at ``seq`` with these columns when ``prev`` is the one before
    (``chain_rows``' formula, for verify's loop over stored columns)."""
    return sha256(
        f"{prev}\n{seq}\n{event_id}\n{run_id}\n{task_key or ''}\n{type_}\n{ts}\n{payload}".encode()
    ).hexdigest()


def link_hash(prev: str, row: EventRow) -> str:
    """The hash ``row`` (stored at ``row.seq``) must carry when ``prev`` is the one before."""
    return link(prev, row.seq or 0, *row[:6])
