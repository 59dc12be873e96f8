"""Integrity check of a whole ledger: storage, hash chain, seq gaps, payloads, schema,
and anchors kept elsewhere.

``verify`` never stops at the first problem of a kind it can keep counting: an
auditor wants to know the first broken link *and* how much is wrong. Lists are
capped so a badly damaged file still gives a short report.

What each check catches (docs/ledger.md, "Verify"):

- the hash chain: a row edited behind the triggers' back; a deleted row (a gap);
- the schema: every table, index, trigger and view compared, as full SQL text,
  with what this version's migrations create, and ``meta`` (its keys, the schema
  version, a ledger id that every ``run.started`` since recorded): a do-nothing
  trigger under the right name, a view that lies, a dropped index;
- anchors: a cut tail or a chain rewritten from some row on leaves a chain that
  is valid on its own; only a (seq, hash) kept outside the ledger (a
  ``run.json``, a ``checkpoint``) can tell. Without one, such a rewrite is not
  detectable.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import ValidationError
from sqlite_utils import Database

from ._anchor import Anchor
from ._chain import GENESIS, link_hash
from ._errors import LedgerError
from ._events import decode_row
from ._schema import MIGRATIONS, TRIGGERS
from ._store import Ledger, _first_error
from ._version import SCHEMA_VERSION

MAX_LISTED = 20
META_KEYS = frozenset({"ledger_id", "created_at", "schema_version"})


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
    missing_triggers: list[str] = field(default_factory=list)
    # Every other difference from the schema this version creates, one line each.
    schema: list[str] = field(default_factory=list)
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
        verdict = "OK" if self.ok else "FAILED"
        anchored = (f", {self.anchors_checked} anchor{'s' if self.anchors_checked != 1 else ''}"
                    " checked" if self.anchors_checked else "")
        out = [
            f"{verdict}: {self.path}: {self.events} events, schema version "
            f"{self.schema_version} (this evalledger: {SCHEMA_VERSION}), last hash "
            f"{self.last_hash}{anchored}"
        ]
        if self.first_broken_seq is not None:
            out.append(
                f"hash chain broken at seq {self.first_broken_seq}: the row was changed after "
                "it was written"
            )
        out += [f"hash chain broken at seq {s}" for s in self.broken_links[1:]]
        out += [f"gap in seq: {a} is followed by {b}" for a, b in self.gaps]
        out += [f"seq {s}: payload does not validate: {why}" for s, why in self.invalid_payloads]
        out += [f"trigger {t} is missing: events can be "
                + ("deleted" if t.endswith("_delete") else "changed")
                for t in self.missing_triggers]
        out += [f"schema: {s}" for s in self.schema]
        out += [f"anchor: {s}" for s in self.anchors]
        out += [f"SQLite integrity check: {s}" for s in self.storage]
        listed = (len(self.broken_links) + len(self.gaps) + len(self.invalid_payloads)
                  + len(self.storage))
        if self.problems_total > listed:
            out.append(f"... and {self.problems_total - listed} more problems")
        return out


def verify(ledger: Ledger, anchors: Iterable[Anchor] = ()) -> VerifyReport:
    """SQLite's ``quick_check`` of the file, the hash chain over every row, what the schema
    promises (gapless seqs, payloads that validate, the tables, indexes, triggers, views
    and meta this version creates), and that the ledger still holds every anchor."""
    report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version)
    _check_schema(ledger, report)

    def problem(target: list[Any], item: Any) -> None:
        report.problems_total += 1
        if len(target) < MAX_LISTED:
            target.append(item)

    try:
        _, checked = ledger.query("PRAGMA quick_check")
        damage = [str(r[0]) for r in checked if r[0] != "ok"]
    except LedgerError as e:
        damage = [str(e)]
    for item in damage:
        problem(report.storage, item)

    wanted = {a.seq: a for a in anchors}
    report.anchors_checked = len(wanted)
    found: dict[int, str] = {}
    ledger_id = ledger.ledger_id
    # A run merged in from another ledger names that ledger in its run.started; its
    # run.merged says so (a file's events: source_ledger null, any origin).
    _, merged_rows = ledger.query(
        "SELECT run_id, json_extract(payload, '$.source_ledger') FROM events "
        "WHERE type = 'run.merged' AND task_key IS NULL")
    origins: dict[str, set[str | None]] = {}
    for run_id, source in merged_rows:
        origins.setdefault(run_id, set()).add(source)
    prev_seq, prev_hash = 0, GENESIS
    for row in ledger.rows():
        seq = row.seq or 0
        report.events += 1
        if seq != prev_seq + 1:
            problem(report.gaps, (prev_seq, seq))
        if link_hash(prev_hash, row) != row.hash:
            problem(report.broken_links, seq)
        try:
            event = decode_row(row)
        except ValidationError as e:
            problem(report.invalid_payloads, (seq, _first_error(e)))
        except ValueError as e:  # an opaque event whose payload is not JSON at all
            problem(report.invalid_payloads, (seq, str(e)))
        else:
            recorded = getattr(event, "ledger_id", None)
            came = origins.get(row.run_id, set())
            if (recorded is not None and recorded != ledger_id and recorded not in came
                    and None not in came and len(report.schema) < MAX_LISTED):
                report.schema.append(
                    f"meta.ledger_id is {ledger_id!r}, but run.started at seq {seq} recorded "
                    f"{recorded!r}: the ledger's identity was changed")
        if seq in wanted:
            found[seq] = row.hash or ""
        prev_seq, prev_hash = seq, row.hash or ""
    report.last_hash = prev_hash
    for seq, anchor in sorted(wanted.items()):
        _check_anchor(anchor, ledger_id, found.get(seq), prev_seq, report)
    return report


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


def _check_schema(ledger: Ledger, report: VerifyReport) -> None:
    _, objects = ledger.query("SELECT type, name, sql FROM sqlite_master")
    actual: dict[tuple[str, str], str | None] = {(t, n): sql for t, n, sql in objects}
    try:
        _, applied = ledger.query(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = 'evalledger' ORDER BY id")
        migrations = tuple(r[0] for r in applied)
    except LedgerError:
        migrations = ()
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
    _check_meta(ledger, migrations, report)


def _check_meta(ledger: Ledger, migrations: Sequence[str], report: VerifyReport) -> None:
    try:
        _, rows = ledger.query("SELECT key, value FROM meta")
    except LedgerError as e:
        report.schema.append(f"meta cannot be read: {e}")
        return
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
