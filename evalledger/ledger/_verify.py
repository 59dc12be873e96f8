"""Integrity check of a whole ledger: storage, hash chain, seq gaps, payloads, schema,
meta, what is derived from the events, and anchors kept elsewhere.

``verify`` never stops at the first problem of a kind it can keep counting: an
auditor wants to know the first broken link *and* how much is wrong. Lists are
capped so a badly damaged file still gives a short report.

What each check catches (docs/ledger.md, "Verify"):

- the hash chain: a row edited behind the triggers' back; a deleted row (a gap);
- each row as evalledger writes it: envelope columns stored as text, a payload that
  validates against its type and is canonical JSON (a payload rewritten in another
  spelling and the chain recomputed over it has a valid chain: only this shows it);
- the schema: every table, index, trigger and view compared, as full SQL text,
  with what this version's migrations create, and ``meta`` (its keys, the schema
  version, a ledger id that every ``run.started`` since recorded, a ``created_at``
  that is a time no later than the first run recorded here): a do-nothing trigger
  under the right name, a view that lies, a dropped index;
- derived data: ``checks`` handed in by the caller (``evalledger verify`` hands in
  the snapshot check of ``evalledger.projections``, which this layer cannot import);
- anchors: a cut tail or a chain rewritten from some row on leaves a chain that
  is valid on its own; only a (seq, hash) kept outside the ledger (a
  ``run.json``, a ``checkpoint``) can tell. Without one, such a rewrite is not
  detectable.

Invariant: every query reads one state of the ledger (``Ledger.read_transaction``),
so runs and merges committing while verify reads never make an intact ledger look
broken (a merged ``run.started`` seen without the ``run.merged`` that explains it).
"""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from itertools import chain
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json, to_json
from sqlite_utils import Database

from ._anchor import Anchor
from ._chain import GENESIS, link_hash
from ._errors import LedgerError
from ._events import AnyEvent, TaskOutput, decode_row
from ._rows import EventRow, EventType
from ._schema import MIGRATIONS, TRIGGERS
from ._store import Ledger, _first_error
from ._version import SCHEMA_VERSION

MAX_LISTED = 20
META_KEYS = frozenset({"ledger_id", "created_at", "schema_version"})
# Tables SQLite makes itself (ANALYZE, PRAGMA optimize): statistics for its query
# planner, nothing evalledger reads. Their names are reserved: only SQLite makes them.
SQLITE_OWN = frozenset({"sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})
# How far clocks may disagree between making the ledger and recording its first run
# in it (the same process, moments apart: a clock stepped back by NTP, no more).
CLOCK_SLACK = timedelta(seconds=1)
# created_at and the record of migration 0001 are written in one transaction.
MIGRATION_SLACK = timedelta(minutes=1)
_UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|\+00:00)")
_STORAGE_CLASS = {bytes: "BLOB", int: "INTEGER", float: "REAL", str: "TEXT"}
_ENVELOPE = ("event_id", "run_id", "task_key", "type", "ts")
# The escaping of strings pydantic-core applies (ensure_ascii off): as TaskOutput.encoded.
_json_string = json.encoder.encode_basestring

Check = Callable[[Ledger], Iterable[str]]
"""A check of what is derived from the events: called with the ledger inside verify's
read transaction, it returns one line per problem (``evalledger.app._snapshot_check.
SnapshotCheck`` is one, for snapshots)."""


@dataclass
class VerifyReport:
    """What ``verify`` found. ``ok`` is true only when every check passed."""

    path: str
    schema_version: int
    events: int = 0
    last_hash: str = GENESIS
    broken_links: list[int] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    invalid_payloads: list[tuple[int, str]] = field(default_factory=list)
    # Rows whose envelope columns are not stored as text: (seq, which and as what).
    storage_classes: list[tuple[int, str]] = field(default_factory=list)
    # Rows whose payload is valid but not canonical JSON.
    noncanonical: list[int] = field(default_factory=list)
    missing_triggers: list[str] = field(default_factory=list)
    # Every other difference from the schema this version creates, one line each.
    schema: list[str] = field(default_factory=list)
    # What the checks of derived data (snapshots) found, one line each.
    derived: list[str] = field(default_factory=list)
    # Anchors the ledger no longer matches, one line each.
    anchors: list[str] = field(default_factory=list)
    anchors_checked: int = 0
    # What SQLite's own PRAGMA quick_check says is wrong with the file's pages and
    # indexes: damage the hash chain cannot see (an index's page, free space).
    storage: list[str] = field(default_factory=list)
    problems_total: int = 0

    @property
    def first_broken_seq(self) -> int | None:
        return self.broken_links[0] if self.broken_links else None

    @property
    def ok(self) -> bool:
        return (self.problems_total == 0 and not self.missing_triggers and not self.schema
                and not self.anchors)

    def lines(self) -> list[str]:
        """The report as a person reads it: a verdict line, then one line per problem."""
        out = [self._headline(), *self._row_lines(), *self._schema_lines(), *self.derived,
               *(f"anchor: {s}" for s in self.anchors),
               *(f"SQLite integrity check: {s}" for s in self.storage)]
        unlisted = self.problems_total - self._listed()
        if unlisted > 0:
            out.append(f"... and {unlisted} more problems")
        return out

    def problem(self, target: list[Any], item: Any) -> None:
        """Count one problem; list it in ``target`` while that list is short."""
        self.problems_total += 1
        if len(target) < MAX_LISTED:
            target.append(item)

    def _headline(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        anchored = (f", {self.anchors_checked} anchor{'s' if self.anchors_checked != 1 else ''}"
                    " checked" if self.anchors_checked else "")
        return (f"{verdict}: {self.path}: {self.events} events, schema version "
                f"{self.schema_version} (this evalledger: {SCHEMA_VERSION}), last hash "
                f"{self.last_hash}{anchored}")

    def _row_lines(self) -> list[str]:
        """What is wrong with the rows themselves: their chain, seqs, storage, payloads."""
        out = []
        if self.first_broken_seq is not None:
            out.append(
                f"hash chain broken at seq {self.first_broken_seq}: the row was changed after "
                "it was written"
            )
        out += [f"hash chain broken at seq {s}" for s in self.broken_links[1:]]
        out += [f"gap in seq: {a} is followed by {b}" for a, b in self.gaps]
        out += [f"seq {s}: {what}, not TEXT: evalledger stores text"
                for s, what in self.storage_classes]
        out += [f"seq {s}: payload does not validate: {why}" for s, why in self.invalid_payloads]
        out += [f"seq {s}: payload is not canonical JSON (keys sorted, no spaces): evalledger "
                "did not write it so" for s in self.noncanonical]
        return out

    def _schema_lines(self) -> list[str]:
        out = [f"trigger {t} is missing: events can be "
               + ("deleted" if t.endswith("_delete") else "changed")
               for t in self.missing_triggers]
        return out + [f"schema: {s}" for s in self.schema]

    def _listed(self) -> int:
        """How many of the counted problems (``problems_total``) have a line of their own."""
        return (len(self.broken_links) + len(self.gaps) + len(self.storage_classes)
                + len(self.invalid_payloads) + len(self.noncanonical) + len(self.derived)
                + len(self.storage))


def verify(ledger: Ledger, anchors: Iterable[Anchor] = (), *,
           checks: Iterable[Check] = ()) -> VerifyReport:
    """SQLite's ``quick_check`` of the file, the hash chain over every row, what the schema
    promises (gapless seqs, text envelopes, payloads that validate and are canonical
    JSON, the tables, indexes, triggers, views and meta this version creates), each of
    ``checks`` of derived data, and that the ledger still holds every anchor: all of it
    read in one read transaction, one state of the ledger."""
    with ledger.read_transaction():
        return _verify(ledger, list(anchors), list(checks))


def verify_events(ledger: Ledger) -> VerifyReport:
    """The checks of ``verify`` that are about the events alone, in one read transaction:
    the hash chain, gapless seqs, text envelopes, payloads that validate and are
    canonical JSON, and the ledger's identity. What another ledger must pass before a
    merge takes its events: rows that fail them would be chained anew here, a change
    laundered or a payload no fold can read kept for good. Its schema may be older."""
    with ledger.read_transaction():
        report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version)
        report.schema += _check_rows(ledger, (), report).identity.changed()
        return report


def _verify(ledger: Ledger, anchors: list[Anchor], checks: list[Check]) -> VerifyReport:
    report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version)
    meta, first_migration = _check_schema(ledger, report)
    _check_storage(ledger, report)
    wanted = {a.seq: a for a in anchors}
    report.anchors_checked = len(wanted)
    walk = _check_rows(ledger, wanted.keys(), report)
    _check_created_at(meta.get("created_at"), first_migration, walk.identity.first_native,
                      report)
    report.schema += walk.identity.changed()
    for check in checks:
        for line in check(ledger):
            report.problem(report.derived, line)
    for seq, anchor in sorted(wanted.items()):
        _check_anchor(anchor, ledger.ledger_id, walk.found.get(seq), walk.last_seq, report)
    return report


def _check_storage(ledger: Ledger, report: VerifyReport) -> None:
    """SQLite's own ``quick_check`` of the file's pages and indexes."""
    try:
        _, checked = ledger.query("PRAGMA quick_check")
        damage = [str(r[0]) for r in checked if r[0] != "ok"]
    except LedgerError as e:
        damage = [str(e)]
    for item in damage:
        report.problem(report.storage, item)


# -- every row, in seq order --------------------------------------------------------------------


@dataclass
class _Identity:
    """The ledger ids that ``run.started`` rows recorded, against ``meta.ledger_id``."""

    ledger_id: str
    # A run.started recorded in another ledger came by merge or import-events, which
    # commit it with a run.merged of its run (the source may itself have merged it from
    # a third ledger): run id -> such run.started still waiting for one, (seq, ledger id).
    foreign: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    first_native: EventRow | None = None  # the first run.started recorded in this ledger

    def see(self, row: EventRow, event: AnyEvent) -> None:
        """Note a ``run.started`` or ``run.merged`` row (other rows say nothing of identity)."""
        if row.type == EventType.RUN_STARTED:
            recorded = getattr(event, "ledger_id", None)
            if recorded == self.ledger_id:
                self.first_native = self.first_native or row
            elif recorded is not None:
                self.foreign.setdefault(row.run_id, []).append((row.seq or 0, recorded))
        elif row.type == EventType.RUN_MERGED and row.task_key is None:
            self.foreign.pop(row.run_id, None)

    def changed(self) -> list[str]:
        """One line per foreign ``run.started`` that no ``run.merged`` explains."""
        return [f"meta.ledger_id is {self.ledger_id!r}, but run.started at seq {seq} recorded "
                f"{recorded!r}: the ledger's identity was changed"
                for seq, recorded in sorted(chain.from_iterable(self.foreign.values()))
                [:MAX_LISTED]]


_IDENTITY_TYPES = frozenset({EventType.RUN_STARTED.value, EventType.RUN_MERGED.value})


@dataclass
class _Walk:
    """What reading every row leaves for the checks made after it."""

    identity: _Identity
    last_seq: int = 0
    found: dict[int, str] = field(default_factory=dict)  # anchored seq -> its stored hash


def _check_rows(ledger: Ledger, anchored: Collection[int], report: VerifyReport) -> _Walk:
    """The hash chain, gapless seqs, text envelopes and payloads of every row.

    The hot loop of verify (one pass over every row): what only a few rows need is
    called for those rows alone."""
    walk = _Walk(_Identity(ledger.ledger_id))
    prev_seq, prev_hash = 0, GENESIS
    for row in ledger.rows():
        seq = row.seq or 0
        report.events += 1
        if seq != prev_seq + 1:
            report.problem(report.gaps, (prev_seq, seq))
        if not _stored_as_text(row):
            report.problem(report.storage_classes, (seq, _storage_classes(row)))
            row = _as_text(row)
        if link_hash(prev_hash, row) != row.hash:
            report.problem(report.broken_links, seq)
        event = _checked_payload(row, seq, report)
        if event is not None and row.type in _IDENTITY_TYPES:
            walk.identity.see(row, event)
        if seq in anchored:
            walk.found[seq] = row.hash or ""
        prev_seq, prev_hash = seq, row.hash or ""
    report.last_hash, walk.last_seq = prev_hash, prev_seq
    return walk


def _checked_payload(row: EventRow, seq: int, report: VerifyReport) -> AnyEvent | None:
    """The row's event, with its payload checked valid and canonical; None when invalid."""
    try:
        event = decode_row(row)
    except ValidationError as e:
        report.problem(report.invalid_payloads, (seq, _first_error(e)))
        return None
    except ValueError as e:  # an opaque event whose payload is not JSON at all
        report.problem(report.invalid_payloads, (seq, str(e)))
        return None
    if not _canonical(row, event):
        report.problem(report.noncanonical, seq)
    return event


# -- rows as evalledger writes them -------------------------------------------------------------


def _stored_as_text(row: EventRow) -> bool:
    event_id, run_id, task_key, type_, ts, _, _, hash_ = row
    return (type(event_id) is str and type(run_id) is str and type(type_) is str
            and type(ts) is str and type(hash_) is str
            and (task_key is None or type(task_key) is str))


def _storage_classes(row: EventRow) -> str:
    """Which envelope columns are not text, and what they are: ``run_id is stored as BLOB``."""
    wrong = [(name, value) for name, value in zip((*_ENVELOPE, "hash"),
                                                  (*row[:5], row.hash), strict=True)
             if value is not None and type(value) is not str]
    return ", ".join(f"{name} is stored as {_STORAGE_CLASS.get(type(value), 'NULL')}"
                     for name, value in wrong)


def _as_text(row: EventRow) -> EventRow:
    """The row with its envelope read as the text it holds (the bytes of a BLOB as UTF-8),
    so the rest of the row is still checked: the hash covers the text, not how SQLite
    stores it."""

    def text(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value if value is None or isinstance(value, str) else str(value)

    event_id, run_id, task_key, type_, ts, payload, seq, hash_ = row
    return EventRow(text(event_id), text(run_id), text(task_key), text(type_), text(ts),
                    payload, seq, text(hash_))


def _canonical(row: EventRow, event: AnyEvent) -> bool:
    """Whether the stored payload is canonical JSON (docs/events.md): the text its own
    object re-encodes to, with keys sorted at every level."""
    if type(event) is TaskOutput:
        # Nearly every row: first the text the runner writes for it (TaskOutput.encoded,
        # without building a row: a third of the cost); any other text, an older
        # ledger's "stream":"stdout" included, goes through the general check below.
        text = f'{{"line":{_json_string(event.line)},"n":{event.n}'
        if event.stream != "stdout":
            text += f',"stream":"{event.stream}"'
        if (text + (',"truncated":true}' if event.truncated else "}")) == row.payload:
            return True
    return canonical_json(row.payload)


def canonical_json(text: str) -> bool:
    """Whether ``text`` is a JSON object in canonical form: what pydantic-core writes for
    the value it holds (no spaces, its spelling of numbers and strings) with the keys of
    every object sorted. Duplicate keys, ``NaN``, ``1E2`` or ``\\u00e9`` are not."""
    try:
        value = from_json(text)
    except ValueError:
        return False
    if not isinstance(value, dict) or not _sorted_keys(value):
        return False
    try:
        return bool(to_json(value, inf_nan_mode="null").decode() == text)
    except ValueError:
        return False


def _sorted_keys(value: Any) -> bool:
    if isinstance(value, dict):
        keys = list(value)
        return keys == sorted(keys) and all(_sorted_keys(v) for v in value.values()
                                            if isinstance(v, dict | list))
    return all(_sorted_keys(v) for v in value if isinstance(v, dict | list))


# -- anchors ----------------------------------------------------------------------------------


def _check_anchor(anchor: Anchor, ledger_id: str, stored: str | None, last: int,
                  report: VerifyReport) -> None:
    where = f"seq {anchor.seq}" + (f" ({anchor.ts})" if anchor.ts else "")
    if anchor.ledger_id != ledger_id:
        report.anchors.append(f"{where}: anchored in ledger {anchor.ledger_id}, this is "
                              f"{ledger_id}")
    elif stored is None:
        report.anchors.append(
            f"{where}: the ledger ends at seq {last}: its tail was cut" if anchor.seq > last
            else f"{where}: no such row any more")
    elif stored != anchor.hash:
        report.anchors.append(
            f"{where}: hash {stored} where the anchor has {anchor.hash}: history up to there "
            "was rewritten")


# -- the schema this version creates ----------------------------------------------------------


@cache
def expected_schema(migrations: tuple[str, ...]) -> dict[tuple[str, str], str | None]:
    """``(type, name) -> SQL`` of what applying these migrations to an empty file creates."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db = Database(conn)
        known = [m.name for m in MIGRATIONS.pending(db)]  # all of them, on an empty file
        stop = next((name for name in known if name not in migrations), None)
        MIGRATIONS.apply(db, stop_before=stop)
        return {(t, n): sql for t, n, sql in conn.execute(
            "SELECT type, name, sql FROM sqlite_master")}
    finally:
        conn.close()


def _check_schema(ledger: Ledger, report: VerifyReport) -> tuple[dict[str, Any], Any]:
    """Compare the schema with what the recorded migrations create; return ``meta`` and
    when the first migration was recorded (None: not recorded)."""
    _, objects = ledger.query("SELECT type, name, sql FROM sqlite_master")
    actual: dict[tuple[str, str], str | None] = {
        (t, n): sql for t, n, sql in objects if not (t == "table" and n in SQLITE_OWN)}
    try:
        _, applied = ledger.query(
            "SELECT name, applied_at FROM _sqlite_migrations WHERE migration_set = 'evalledger' "
            "ORDER BY id")
        migrations = tuple(r[0] for r in applied)
        first_migration = applied[0][1] if applied else None
    except LedgerError:
        migrations, first_migration = (), None
        report.schema.append("table _sqlite_migrations is missing: which migrations made "
                             "this ledger cannot be told")
    expected = expected_schema(migrations)
    report.missing_triggers = [t for t in TRIGGERS if ("trigger", t) not in actual]
    for (type_, name), sql in sorted(expected.items()):
        if (type_, name) not in actual:
            if not (type_ == "trigger" and name in TRIGGERS):  # said above
                report.schema.append(f"{type_} {name} is missing")
        elif actual[(type_, name)] != sql:
            report.schema.append(f"{type_} {name} differs from what evalledger creates")
    report.schema += [f"unexpected {t} {n}" for t, n in sorted(actual.keys() - expected.keys())]
    return _check_meta(ledger, migrations, report), first_migration


def _check_meta(ledger: Ledger, migrations: Sequence[str],
                report: VerifyReport) -> dict[str, Any]:
    try:
        _, rows = ledger.query("SELECT key, value FROM meta")
    except LedgerError as e:
        report.schema.append(f"meta cannot be read: {e}")
        return {}
    meta = dict(rows)
    report.schema += [f"meta.{k} is missing" for k in sorted(META_KEYS - meta.keys())]
    report.schema += [f"unexpected meta.{k}" for k in sorted(meta.keys() - META_KEYS)]
    version = str(len(migrations))
    if "schema_version" in meta and meta["schema_version"] != version:
        report.schema.append(f"meta.schema_version is {meta['schema_version']!r}, but the "
                             f"ledger's {len(migrations)} migrations make it {version}")
    if "ledger_id" in meta:
        try:
            uuid.UUID(str(meta["ledger_id"]))
        except ValueError:
            report.schema.append(f"meta.ledger_id {meta['ledger_id']!r} is not a UUID")
    return meta


def _check_created_at(created_at: Any, first_migration: Any, first_native: EventRow | None,
                      report: VerifyReport) -> None:
    """``meta.created_at`` is a UTC time, written with the first migration's record, and
    no later than the first run recorded in this ledger (a ``run.started`` naming this
    ledger's id) began. Runs merged or imported keep their own, older times: they
    are not compared."""
    if created_at is None:
        return  # said with the meta keys
    created = _utc(created_at)
    if created is None:
        report.schema.append(f"meta.created_at {created_at!r} is not an ISO-8601 UTC time")
        return
    migrated = _utc(first_migration, strict=False)
    if migrated is not None and abs(created - migrated) > MIGRATION_SLACK:
        report.schema.append(
            f"meta.created_at is {created_at}, but the ledger's first migration was recorded "
            f"at {first_migration}: they are written together, one of them was changed")
    if first_native is not None:
        began = _utc(first_native.ts)
        if began is not None and created > began + CLOCK_SLACK:
            report.schema.append(
                f"meta.created_at is {created_at}, after the first run recorded here began "
                f"(seq {first_native.seq}, {first_native.ts}): a ledger holds no event "
                "older than itself")


def _utc(value: Any, *, strict: bool = True) -> datetime | None:
    """``value`` as an aware UTC time; None when it is not one. ``strict``: only the
    ISO-8601 form evalledger writes (``T``, ``Z`` or ``+00:00``)."""
    if not isinstance(value, str) or (strict and not _UTC_TIME.fullmatch(value)):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.utcoffset() != timedelta(0):
        return None
    return moment
