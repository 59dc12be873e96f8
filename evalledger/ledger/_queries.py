"""Named read queries over ``events``: the one place outside the store's own modules
(``_store``, schema, verify, migrations) where SQL reads the ledger.

Every caller above the ledger (the application's read side, the viewer, the CLI, the
watchdog) asks one of these by name instead of writing SQL, so a payload field that
is renamed is renamed here, next to the ``json_extract`` paths that read it, and a
test (``tests/test_layering.py``) fails when SQL over ``events`` appears anywhere else.

Each query returns plain values or a small named type, never a cursor; none imports
pydantic (``runs`` and ``show`` start without it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ._packed import PREFIX, unpack
from ._rows import EventRow, EventType

if TYPE_CHECKING:
    from ._store import Ledger


def json_object(path: str) -> str:
    """SQL for the payload's value at ``path`` as JSON text when it is an object, else
    NULL. A row written into the file by hand was never validated, and ``json_extract``
    hands a string back bare (``"imported": "x"`` reads as ``x``, not JSON)."""
    return (f"CASE WHEN json_type(payload, '{path}') = 'object' "
            f"THEN json_extract(payload, '{path}') END")


# -- snapshots ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """One stored ``run.snapshot``, its value still JSON text."""

    seq: int
    through_seq: int
    payload: str
    """The whole canonical payload; ``value`` is its last field's text."""
    start: int
    """Where ``value`` begins in ``payload`` (it ends before the payload's last brace)."""

    @property
    def packed(self) -> bool:
        """Whether the value is stored packed (``_packed``): a JSON string, not an object."""
        return self.payload.startswith(f'"{PREFIX}', self.start)

    @property
    def value(self) -> str | bytes:
        """The value's JSON text: a copy cut out of ``payload``, or the packed value
        unpacked (UTF-8 bytes); ``payload`` and ``start`` spare a large plain one the copy.

        Raises:
            PackedError: a packed value that does not unpack (verify names the row).
        """
        if self.packed:
            return unpack(self.payload[self.start:-1])
        return self.payload[self.start:-1]


def _prefix(kind: str, version: int) -> str:
    # The canonical payload begins with these fields, in this order (keys sorted).
    return f'{{"fold_version":{version},"kind":"{kind}","through_seq":'


def latest_snapshot(ledger: Ledger, run_id: str, kind: str, version: int,
                    *, until_seq: int | None = None) -> Snapshot | None:
    """The run's newest snapshot of ``kind`` made by fold version ``version``; None
    when there is none, or the newest is not in the canonical form or claims events
    that come after it (forged or damaged: the caller replays instead).

    Why by bytes: payloads are canonical JSON (keys sorted, no spaces), so the fields
    that pick a snapshot (``fold_version``, ``kind``) are its first bytes and are matched
    as a prefix in SQL (``Ledger.latest_row``), and the ``value`` is cut out of the text
    without parsing: a 10,000-task run's summary snapshot is 4 MB, and no snapshot that
    is not used is ever parsed.
    """
    prefix = _prefix(kind, version)
    accept = None
    if ledger.run_signed(run_id):  # only a snapshot one of its batches sealed is believed
        from ._signing import snapshot_vouched

        keys = ledger.snapshot_keys(run_id)

        def accept(row: EventRow) -> bool:
            return snapshot_vouched(run_id, row, ledger.next_seal(run_id, row.seq or 0), keys)

    row = ledger.latest_row(run_id, EventType.RUN_SNAPSHOT, prefix, until_seq=until_seq,
                            accept=accept)
    if row is None:
        return None
    payload = row.payload
    comma = payload.find(",", len(prefix))
    if comma < 0 or not payload.startswith(',"value":', comma) or not payload.endswith("}"):
        return None  # not the canonical form this reader knows: replay instead
    try:
        through_seq = int(payload[len(prefix):comma])
    except ValueError:
        return None
    seq = row.seq or 0
    if through_seq >= seq:
        # A snapshot is appended after the events it folds: one that claims later events
        # (through_seq 10**9, past the ledger's end) is forged or damaged. Not believed:
        # the run is replayed (verify names it).
        return None
    return Snapshot(seq, through_seq, payload, comma + len(',"value":'))


class SnapshotHead(NamedTuple):
    """The fields that place a stored snapshot, read without its value (``payload_at``
    reads that, one snapshot at a time: a large run's are megabytes each)."""

    through_seq: int
    seq: int
    kind: str
    fold_version: int


# The first fields of a snapshot's canonical payload: what orders the snapshots of a run
# without parsing their values (a summary's is megabytes).
_HEAD = re.compile(r'\{"fold_version":(-?\d+),"kind":("(?:[^"\\]|\\.)*"),"through_seq":(-?\d+),')


def snapshot_heads(ledger: Ledger, run_id: str) -> list[SnapshotHead]:
    """Every run-level snapshot of the run, by ``through_seq`` then ``seq``; payloads
    that are not snapshots (not JSON, fields missing) are left out: verify names them.

    Why by bytes: as ``latest_snapshot``, the canonical payload's first fields are read
    by a pattern, so checking a run's snapshots parses each value once, not twice.
    """
    _, rows = ledger.query(
        "SELECT seq FROM events WHERE run_id = ? AND type = ? AND task_key IS NULL "
        "AND typeof(payload) = 'text'", [run_id, EventType.RUN_SNAPSHOT])
    heads = (_head(ledger, ledger.payload_start(seq, _HEAD_BYTES), seq) for (seq,) in rows)
    return sorted(head for head in heads if head is not None)


def payload_at(ledger: Ledger, seq: int) -> Any:
    """The stored payload of the row at ``seq`` (None: no such row)."""
    _, rows = ledger.query("SELECT payload FROM events WHERE seq = ?", [seq])
    return rows[0][0] if rows else None


# Enough of a payload for _HEAD: the fields before the value (a kind is a short name).
_HEAD_BYTES = 512


def _head(ledger: Ledger, start: bytes | None, seq: int) -> SnapshotHead | None:
    if start is None:
        return None
    # Cut at a byte count: a character split at the end is past the head, or the head is
    # longer than this and the payload is read whole below.
    match = _HEAD.match(start.decode("utf-8", "replace"))
    try:
        if match is not None:
            version, kind, through = int(match[1]), json.loads(match[2]), int(match[3])
        else:  # not canonical (verify names it): read it whole
            data = json.loads(payload_at(ledger, seq))
            version, kind, through = data["fold_version"], data["kind"], data["through_seq"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (type(version) is int and type(through) is int and isinstance(kind, str)):
        return None
    return SnapshotHead(through, seq, kind, version)


def snapshotted_runs(ledger: Ledger, *, after_seq: int = 0) -> list[object]:
    """Every run id that has a run-level snapshot (stored after ``after_seq``), as stored
    (a forged row may hold a BLOB where a run id belongs: the caller skips what is not a
    ``str``)."""
    _, rows = ledger.query(
        "SELECT DISTINCT run_id FROM events WHERE type = ? AND task_key IS NULL AND seq > ?",
        [EventType.RUN_SNAPSHOT, after_seq])
    return [run_id for (run_id,) in rows]


# -- runs and tasks ----------------------------------------------------------------------------


def run_seq_span(ledger: Ledger, run_id: str, until_seq: int) -> tuple[int, int]:
    """The seqs of the run's first and last events up to ``until_seq`` (0, 0: none)."""
    _, rows = ledger.query(
        "SELECT min(seq), max(seq) FROM events WHERE run_id = ? AND seq <= ?",
        [run_id, until_seq])
    first, last = rows[0]
    return first or 0, last or 0


def imported_runs(ledger: Ledger, until_seq: int) -> dict[str, dict[str, Any]]:
    """Run id -> where it was imported from (its first ``run.started``'s ``imported``,
    as ``_page_queries.run_imported`` reads it), for every imported run started at or
    before ``until_seq``. A value that is no JSON object (a row never validated) is
    not believed (``json_object``)."""
    _, rows = ledger.query(
        f"SELECT run_id, {json_object('$.imported')} FROM events "
        "WHERE task_key IS NULL AND type = ? AND seq <= ? ORDER BY seq",
        [EventType.RUN_STARTED, until_seq])
    found: dict[str, dict[str, Any]] = {}
    first: set[str] = set()
    for run_id, imported in rows:
        if run_id in first:
            continue
        first.add(run_id)
        if imported is not None:
            found[run_id] = json.loads(imported)
    return found


def import_sources(ledger: Ledger, run_id: str) -> tuple[str | None, dict[str, str]]:
    """Where the run was imported from ("" when it was not imported; None when there is
    no such run), and its imported files with their content hashes ("" when none)."""
    _, started = ledger.query(
        "SELECT json_extract(payload, '$.imported.source') FROM events "
        "WHERE type = 'run.started' AND task_key IS NULL AND run_id = ?", [run_id])
    if not started:
        return None, {}
    _, files = ledger.query(
        "SELECT json_extract(payload, '$.imported.source'), "
        "coalesce(json_extract(payload, '$.imported.sha256'), '') FROM events "
        "WHERE run_id = ? AND type = 'task.started' "
        "AND json_extract(payload, '$.imported') IS NOT NULL", [run_id])
    return started[0][0] or "", {source: digest for source, digest in files}


def touched_since(ledger: Ledger, after_seq: int, until_seq: int
                  ) -> list[tuple[str, str | None, int]]:
    """Each distinct (run id, task key) with an event in ``after_seq < seq <= until_seq``
    (task key None: a run-level event), with the seq of its latest one there."""
    _, rows = ledger.query(
        "SELECT run_id, task_key, max(seq) FROM events WHERE seq > ? AND seq <= ? "
        "GROUP BY run_id, task_key", [after_seq, until_seq])
    return [(run_id, key, seq) for run_id, key, seq in rows]


def task_activity(ledger: Ledger, run_id: str, keys: Iterable[str]
                  ) -> dict[str, tuple[int, str, int | None]]:
    """Per task key of ``keys``: the seq and ts of its latest event, and the seq of its
    latest ``task.stalled`` (None without one). One range scan per key."""
    found: dict[str, tuple[int, str, int | None]] = {}
    for key in keys:
        _, rows = ledger.query(
            "SELECT max(seq), max(ts), max(CASE WHEN type = 'task.stalled' THEN seq END) "
            "FROM events WHERE run_id = ? AND task_key = ?", [run_id, key])
        if rows and rows[0][0] is not None:
            found[key] = (rows[0][0], rows[0][1], rows[0][2])
    return found


def has_task(ledger: Ledger, run_id: str, task_key: str) -> bool:
    """Whether the run recorded events of that key, or planned it (it may start later)."""
    return bool(ledger.query(
        "SELECT 1 FROM events WHERE run_id = ? AND task_key = ? LIMIT 1", [run_id, task_key]
    )[1]) or bool(ledger.query(
        "SELECT 1 FROM events e, json_each(e.payload, '$.planned') p WHERE e.run_id = ? "
        "AND e.task_key IS NULL AND e.type = 'run.started' AND p.value = ? LIMIT 1",
        [run_id, task_key])[1])


def has_type(ledger: Ledger, run_id: str, type_: str) -> bool:
    """Whether the run holds any event of ``type_`` (one this version knows or not)."""
    return bool(ledger.query(
        "SELECT 1 FROM events WHERE run_id = ? AND type = ? LIMIT 1", [run_id, type_])[1])


class Boundary(NamedTuple):
    """A run boundary (``run.started``, ``run.resumed``, ``run.finished``, ``run.merged``)
    with the few payload fields that say which batch it was, where it ran and how it
    ended; each None where its event has no such field."""

    run_id: str
    type: str
    hostname: Any
    pid: Any
    batch_token: Any
    sandbox_root: Any
    status: Any = None


def run_boundaries(ledger: Ledger) -> list[Boundary]:
    """Every run boundary of the ledger, in seq order.

    The payload fields by ``json_extract`` in SQLite, not a decode of each event (a
    ``run.started``'s payload lists every planned key)."""
    _, rows = ledger.query(
        "SELECT run_id, type, json_extract(payload, '$.host.hostname'), "
        "json_extract(payload, '$.host.pid'), json_extract(payload, '$.batch_token'), "
        "json_extract(payload, '$.sandbox_root'), "
        "CASE WHEN type = 'run.finished' THEN json_extract(payload, '$.status') END "
        "FROM events WHERE task_key IS NULL "
        "AND type IN ('run.started', 'run.resumed', 'run.finished', 'run.merged') "
        "ORDER BY seq")
    return [Boundary._make(row) for row in rows]


def task_definitions(ledger: Ledger, run_id: str) -> dict[str, tuple[str, str | None]]:
    """Task key -> the ``definition_hash`` and model its latest ``task.started`` names
    (by ``json_extract``: no decode of each definition)."""
    _, rows = ledger.query(
        "SELECT task_key, json_extract(payload, '$.definition_hash'), "
        "json_extract(payload, '$.definition.model') FROM events "
        "WHERE run_id = ? AND type = 'task.started' ORDER BY seq", [run_id])
    return {key: (str(digest or ""), model if isinstance(model, str) else None)
            for key, digest, model in rows}


__all__ = [
    "Boundary",
    "Snapshot",
    "SnapshotHead",
    "has_task",
    "has_type",
    "import_sources",
    "imported_runs",
    "latest_snapshot",
    "run_boundaries",
    "run_seq_span",
    "snapshot_heads",
    "snapshotted_runs",
    "task_activity",
    "task_definitions",
    "touched_since",
]
