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

import functools
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

import msgspec
from pydantic import ValidationError
from pydantic_core import from_json, to_json

from ._anchor import Anchor
from ._chain import GENESIS, link
from ._errors import LedgerError, NotUtf8
from ._events import AnyEvent, decode_row, output_payload
from ._lines import MAX_LINES, ChunkError, count_lines, unstored
from ._rows import EventRow, EventType, fetched, stored_id, text_hash, text_id
from ._schema import MIGRATIONS, TRIGGERS
from ._sqlite_utils import Database
from ._store import Ledger, _file_id, _first_error
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

Check = Callable[[Ledger], Iterable[str]]
"""A check of what is derived from the events: called with the ledger inside verify's
read transaction, it returns one line per problem (``evalledger.app._snapshot_check.
SnapshotCheck`` is one, for snapshots). A check may then hold ``vouched``, the seqs of
``run.snapshot`` rows whose stored text it found to be exactly what this version writes
(valid and canonical by construction): verify does not parse those payloads again."""


@dataclass
class VerifyReport:
    """What ``verify`` found. ``ok`` is true only when every check passed."""

    path: str
    schema_version: int
    events: int = 0
    """Rows read: every row, or with ``since`` the rows after it."""
    last_seq: int = 0
    last_hash: str = GENESIS
    since: Anchor | None = None
    """The anchor of a prefix verified before: only the rows after it were read."""
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
    # Events of signed runs their own processes did not seal, and bad seals (_signing).
    seals: list[str] = field(default_factory=list)
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
        out = [self._headline(), *self._row_lines(), *self._schema_lines(), *self.seals,
               *self.derived,
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
        events = f"{self.events} events"
        if self.since is not None:
            at = f" at {self.since.ts}" if self.since.ts else ""
            events += (f" after seq {self.since.seq} (verified up to there{at}; file pages "
                       "not read)")
        return (f"{verdict}: {self.path}: {events}, schema version "
                f"{self.schema_version} (this evalledger: {SCHEMA_VERSION}), last hash "
                f"{self.last_hash}{anchored}")

    def anchor(self, ledger_id: str, ts: str | None = None) -> Anchor | None:
        """An anchor of the last row this report vouches for (None: it vouches for none,
        or found a problem)."""
        if not self.ok or self.last_seq == 0:
            return None
        return Anchor(ledger_id=ledger_id, seq=self.last_seq, hash=self.last_hash, ts=ts)

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
        out += [f"seq {s}: {what}" for s, what in self.storage_classes]
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
                + len(self.seals)
                + len(self.storage))


def verify(ledger: Ledger, anchors: Iterable[Anchor] = (), *,
           checks: Iterable[Check] = (), since: Anchor | None = None,
           recorded: Anchor | None = None, seal_rows: bool = False) -> VerifyReport:
    """SQLite's ``quick_check`` of the file, the hash chain over every row, what the schema
    promises (gapless seqs, text envelopes, payloads that validate and are canonical
    JSON, the tables, indexes, triggers, views and meta this version creates), each of
    ``checks`` of derived data, and that the ledger still holds every anchor: all of it
    read in one read transaction, one state of the ledger.

    ``since``: an anchor of a prefix verified before. The ledger must still hold it
    (as any anchor); then only the rows after it are walked, their chain going on from
    its hash, and the file's ``quick_check`` (a read of every page) is left out: the
    cost is that of what is new. ``checks`` are the caller's to narrow the same way.

    ``recorded``: the anchor an earlier check that found this ledger intact left (kept
    by the caller): held like ``anchors``, but not counted among them.

    Signed runs (``_signing``): every event of a sealed type sealed by the run's own
    processes and every seal valid; ``seal_rows`` (``--deep``) reads every row of each
    run for what its seals say of the other rows too."""
    with ledger.read_transaction():
        return _verify(ledger, list(anchors), list(checks), since, recorded, seal_rows)


def verify_events(ledger: Ledger) -> VerifyReport:
    """The checks of ``verify`` that are about the events alone, in one read transaction:
    the hash chain, gapless seqs, text envelopes, payloads that validate and are
    canonical JSON, and the ledger's identity. What another ledger must pass before a
    merge takes its events: rows that fail them would be chained anew here, a change
    laundered or a payload no fold can read kept for good. Its schema may be older."""
    with ledger.read_transaction():
        report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version)
        walk = _check_rows(ledger, report)
        _check_snapshot_rows(ledger, walk.snapshots, report)
        report.schema += walk.identity.changed()
        return report


def _verify(ledger: Ledger, anchors: list[Anchor], checks: list[Check],
            since: Anchor | None, recorded: Anchor | None, seal_rows: bool) -> VerifyReport:
    report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version,
                          since=since)
    meta, first_migration = _check_schema(ledger, report)
    last = ledger.last_seq()
    wanted = sorted({a.seq: a for a in anchors}.items())
    report.anchors_checked = len(wanted)
    if recorded is not None:
        wanted.append((recorded.seq, recorded))
    if since is not None:
        problems = len(report.anchors)
        _check_anchor(since, ledger.ledger_id, _stored_hash(ledger, since.seq), last, report)
        if len(report.anchors) > problems:  # the prefix it vouched for is not there
            return report
        walk = _check_rows(ledger, report, (since.seq, since.hash),
                           functools.partial(_derived, ledger, checks))
        # Cheap, and meta is not in the anchored prefix: a back-dated created_at is
        # found after each run too.
        _check_created_at(meta.get("created_at"), first_migration, _first_native(ledger),
                          report)
    else:
        # The file's own check runs beside what follows (SQLite's, in a thread of its own).
        storage = _StorageCheck(ledger)
        walk = _check_rows(ledger, report, meanwhile=functools.partial(_derived, ledger, checks))
        storage.report_to(report)
        _check_created_at(meta.get("created_at"), first_migration,
                          walk.identity.first_native, report)
    report.schema += walk.identity.changed()
    _check_seals(ledger, since.seq if since is not None else 0, seal_rows, report)
    for line in walk.derived:
        report.problem(report.derived, line)
    vouched = set().union(*(getattr(check, "vouched", ()) for check in checks))
    _check_snapshot_rows(ledger, [s for s in walk.snapshots if s not in vouched], report)
    for seq, anchor in wanted:
        _check_anchor(anchor, ledger.ledger_id, _stored_hash(ledger, seq), last, report)
    return report


def _derived(ledger: Ledger, checks: list[Check]) -> list[str]:
    """What each check of derived data finds. Made before this process walks rows: a
    check's memory (a large run's folds) is given back before the walk holds its own,
    so verify's peak is the larger of the two, not their sum."""
    return [line for check in checks for line in check(ledger)]


def _check_seals(ledger: Ledger, after: int, rows: bool, report: VerifyReport) -> None:
    """Each signed run written to after ``after``: every event of a sealed type sealed by
    the run's own processes, every seal valid (``_signing``); with ``rows``, each seal's
    other rows too, read in full."""
    from ._signing import Seals

    with ledger._translate():
        runs = [run_id for (run_id,) in ledger._conn.execute(
            "SELECT DISTINCT CAST(run_id AS BLOB) FROM events WHERE seq > ? ORDER BY 1",
            [after])]
    for raw in runs:
        try:  # a run whose rows do not read as text: the walk named them already
            run_id = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            if rows:
                seals = Seals(run_id, rest=True)
                for row in ledger.rows(run_id, stored=True):
                    seals.feed(row.seq or 0, row.event_id, row.task_key, row.type, row.ts,
                               row.payload)
                found = seals.report()
            else:
                found = ledger.seal_report(run_id)
            late = _late(ledger, run_id)
        except (UnicodeDecodeError, NotUtf8):
            continue
        named = {seq for seq, _ in found.problems}
        problems = [*found.problems, *((seq, what) for seq, what in late if seq not in named)]
        for seq, what in sorted(problems):
            report.problem(report.seals, f"run {run_id}: seq {seq}: {what}")


# What only a batch writes, while it runs: none of them comes after its run.finished.
# (A regrade's gradings and their usage, a scan's flags and a transfer's account do.)
_BATCH_TASK_TYPES = (EventType.TASK_STARTED, EventType.TASK_COMPLETED,
                     EventType.TASK_INTERRUPTED, EventType.TASK_SKIPPED,
                     EventType.TASK_ISOLATION, EventType.TASK_EGRESS, EventType.TASK_STALLED,
                     EventType.TASK_OUTPUT_TRUNCATED)
_OPENINGS = (EventType.RUN_STARTED, EventType.RUN_RESUMED)


def _late(ledger: Ledger, run_id: str) -> list[tuple[int, str]]:
    """A batch's task events of the run recorded after its ``run.finished`` with no
    ``run.started``/``run.resumed`` since (another batch). Not for a run carried in by a
    transfer (a ``run.merged``): a transfer appends what the run lacked, in any order
    of batches; its seals are what holds a signed one to its processes."""
    finished = False
    pending: list[tuple[int, str]] = []
    for row in ledger.rows(run_id, types=[*_BATCH_TASK_TYPES, *_OPENINGS,
                                          EventType.RUN_FINISHED, EventType.RUN_MERGED]):
        if row.type == EventType.RUN_MERGED or (
                row.type == EventType.RUN_STARTED and '"imported":{' in row.payload):
            return []  # carried in, or imported again from a folder that grew: any order
        if row.type in _OPENINGS:
            finished = False
        elif row.type == EventType.RUN_FINISHED:
            finished = True
        elif finished:
            pending.append((row.seq or 0, f"{row.type} after the run's run.finished, with no "
                                          "run.resumed since: no batch of the run wrote it"))
    return pending


def _check_snapshot_rows(ledger: Ledger, seqs: list[int], report: VerifyReport) -> None:
    """The payload check of ``run.snapshot`` rows the walk left for later (one at a time:
    a large run's are tens of MB each)."""
    for seq in seqs:
        for row in ledger.rows(after_seq=seq - 1, until_seq=seq, stored=True):
            _checked_payload(row, seq, report)


def _stored_hash(ledger: Ledger, seq: int) -> str | None:
    _, rows = ledger.query("SELECT hash FROM events WHERE seq = ?", [seq])
    return str(text_hash(rows[0][0])) if rows else None


class _StorageCheck:
    """SQLite's own ``quick_check`` of the file's pages and indexes, on a connection of its
    own in a thread beside the row walk: SQLite lets go of the GIL while it reads, so the
    two overlap (on a 4 GB ledger, 10 s of pages read while the rows are checked)."""

    def __init__(self, ledger: Ledger) -> None:
        self._path, self._damage = ledger.path, list[str]()
        self._file = _file_id(str(ledger.path))
        self._thread = threading.Thread(target=self._run, name="verify quick_check",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with Ledger(self._path, read_only=True) as ledger:
                if _file_id(str(self._path)) != self._file:
                    self._damage.append("another file was put in the ledger's place while "
                                        "verify read it: its pages were not checked")
                    return
                _, checked = ledger.query("PRAGMA quick_check")
            self._damage += [str(r[0]) for r in checked if r[0] != "ok"]
        except LedgerError as e:
            self._damage.append(str(e))

    def report_to(self, report: VerifyReport) -> None:
        self._thread.join()
        for item in self._damage:
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

    def see(self, row: EventRow, recorded: str | None) -> None:
        """Note a ``run.started`` (that recorded ``recorded`` as its ledger's id) or a
        ``run.merged`` row (other rows say nothing of identity)."""
        if row.type == EventType.RUN_STARTED:
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
# Below this many rows one process checks them all: a worker's start-up (a fresh
# interpreter importing this module) costs more than it saves.
PARALLEL_ROWS = 400_000


@dataclass
class _Part:
    """What checking the rows ``lo < seq <= hi`` found, for the checks made after the walk
    and to merge with the other parts (in seq order)."""

    report: VerifyReport
    first_seq: int = 0  # 0: no row in the part
    last_seq: int = 0
    last_hash: str = GENESIS
    # run.started / run.merged rows whose payload validated, with the ledger id a
    # run.started recorded: identity is judged in seq order over all parts.
    identity: list[tuple[EventRow, str | None]] = field(default_factory=list)
    # run.snapshot rows whose payload check waits for the snapshot check (which may find
    # each exactly as this version writes it: then it is not parsed twice).
    snapshots: list[int] = field(default_factory=list)

    def to_json(self) -> bytes:
        report = self.report
        return json.dumps({
            "events": report.events, "problems_total": report.problems_total,
            **{name: getattr(report, name) for name in _LISTS},
            "first_seq": self.first_seq, "last_seq": self.last_seq,
            "last_hash": self.last_hash, "identity": self.identity,
            "snapshots": self.snapshots}).encode()

    @classmethod
    def from_json(cls, text: bytes) -> _Part:
        data = json.loads(text)
        report = VerifyReport(path="", schema_version=0, events=data["events"],
                              problems_total=data["problems_total"])
        for name in _LISTS:  # JSON has no tuples: a pair comes back a list
            setattr(report, name, [tuple(i) if isinstance(i, list) else i for i in data[name]])
        return cls(report, data["first_seq"], data["last_seq"], data["last_hash"],
                   [(EventRow(*row), recorded) for row, recorded in data["identity"]],
                   data["snapshots"])


@dataclass
class _Walk:
    """What reading every row leaves for the checks made after it."""

    identity: _Identity
    last_seq: int = 0
    snapshots: list[int] = field(default_factory=list)  # their payloads not yet checked
    derived: list[str] = field(default_factory=list)  # what the derived checks found


def _check_rows(ledger: Ledger, report: VerifyReport,
                since: tuple[int, str] = (0, GENESIS),
                meanwhile: Callable[[], list[str]] | None = None) -> _Walk:
    """The hash chain, gapless seqs, text envelopes and payloads of every row after
    ``since`` (a seq and the hash the row there holds: the chain goes on from it); and
    what ``meanwhile`` (the checks of derived data) finds, in ``walk.derived``.

    A range of more than ``PARALLEL_ROWS`` rows is cut into one part per CPU, each
    checked by its own process (a row's link needs only its predecessor's stored
    hash, so parts are independent); this process checks the first, after
    ``meanwhile``, or, when there is more than one part, runs ``meanwhile`` while every
    part is checked by a process of its own (a 100,000-task run's replay took a third
    of verify, alone). The parts read the rows at or below the last seq this read
    transaction sees: rows never change (append-only), so each part reads the same rows
    this transaction would."""
    last = ledger.last_seq()
    parts = _parts(since[0], last)
    mine = parts[:1] if meanwhile is None or len(parts) == 1 else []
    # The other parts first, each in a fresh interpreter (never a fork of a process that
    # may run threads, never a re-import of the caller's __main__ as multiprocessing does),
    # each told which file this is: it refuses another put in the ledger's place.
    file = _file_id(str(ledger.path)) if len(parts) > 1 else None
    theirs = parts[len(mine):]
    workers = [_start_part(ledger.path, file, lo, hi) for lo, hi in theirs]
    try:
        derived = meanwhile() if meanwhile is not None else []
        results = [_check_part(ledger, lo, hi, since) for lo, hi in mine]
        for (lo, hi), worker in zip(theirs, workers, strict=True):
            # A part whose process failed (no interpreter to start, no memory) is checked
            # here: slower, never less. A real fault of the ledger raises here as it would.
            results.append(_part_result(worker) or _check_part(
                ledger, lo, hi, since if lo == since[0] else None))
    finally:
        for worker in workers:
            if worker is not None:
                worker.kill()
                worker.wait()
    walk = _merge(results, since, report, _Identity(ledger.ledger_id))
    walk.derived = derived
    return walk


def _cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _parts(after: int, last: int) -> list[tuple[int, int]]:
    """``(lo, hi]`` seq ranges covering ``(after, last]``: one, or one per CPU (at most 8)
    with at least ``PARALLEL_ROWS`` rows each."""
    rows = last - after
    count = min(_cpus(), 8, max(1, rows // PARALLEL_ROWS))
    size = -(-rows // count) if rows > 0 else 0
    return [(after + i * size, min(last, after + (i + 1) * size)) for i in range(count)]


# The lists of row problems a part keeps (each at most MAX_LISTED long, in seq order).
_LISTS = ("gaps", "broken_links", "storage_classes", "invalid_payloads", "noncanonical")


def _merge(parts: list[_Part], since: tuple[int, str], report: VerifyReport,
           identity: _Identity) -> _Walk:
    """The parts' findings as one walk would have made them, in seq order."""
    walk = _Walk(identity)
    prev_seq, prev_hash = since
    for part in parts:
        found = part.report
        report.events += found.events
        report.problems_total += found.problems_total
        for name in _LISTS:
            mine: list[Any] = getattr(report, name)
            mine += getattr(found, name)[:MAX_LISTED - len(mine)]
        for row, recorded in part.identity:
            identity.see(row, recorded)
        walk.snapshots += part.snapshots
        if part.first_seq:
            prev_seq, prev_hash = part.last_seq, part.last_hash
    report.last_hash = prev_hash
    report.last_seq = walk.last_seq = prev_seq
    return walk


def _start_part(path: Path, file: tuple[int, int] | None, lo: int, hi: int
                ) -> subprocess.Popen[bytes] | None:
    """A process checking the rows ``lo < seq <= hi`` of ``file`` (``(st_dev, st_ino)``)
    (``python -m evalledger.ledger._verify_part``), its findings as JSON on its stdout;
    None when none could be started (or the file is gone)."""
    if file is None:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "evalledger.ledger._verify_part", str(path),
             ":".join(map(str, file)), str(lo), str(hi)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def _part_result(worker: subprocess.Popen[bytes] | None) -> _Part | None:
    """What the part's process found; None when it failed."""
    if worker is None:
        return None
    out, _ = worker.communicate()
    if worker.returncode != 0:
        return None
    try:
        return _Part.from_json(out)
    except (ValueError, KeyError, TypeError):
        return None


# Graded E by radon, and kept whole: it is verify's hot loop (half a million lines a
# second), where a call per row for each check would cost more than the checks.
def _check_part(ledger: Ledger, lo: int, hi: int, start: tuple[int, str] | None) -> _Part:
    """Check the rows ``lo < seq <= hi``, the first linked onto ``start`` (a seq and its
    hash), else onto the stored row before it.

    The hot loop of verify: an output line (nearly every row) whose envelope and payload
    are what the runner writes is checked here, without building its model; any other
    row, or an output line written some other way, goes through the full model."""
    part = _Part(VerifyReport(path=str(ledger.path), schema_version=0))
    report = part.report
    if start is None:
        _, before = ledger.query(
            "SELECT seq, hash FROM events WHERE seq <= ? ORDER BY seq DESC LIMIT 1", [lo])
        start = (int(before[0][0]), str(text_hash(before[0][1]))) if before else (0, GENESIS)
    prev_seq, prev_hash = start
    # From schema 14 evalledger stores a canonical id and every hash as bytes (_rows): the
    # same value as text is written some other way, and an id so written escapes the
    # UNIQUE index (text is never equal to a BLOB): a second event of an existing id.
    packed = ledger.schema_version >= 14
    plain_output = _plain_output
    output_type, snapshot_type = EventType.TASK_OUTPUT.value, EventType.RUN_SNAPSHOT.value
    lines_type = EventType.TASK_LINES.value
    events = 0
    for row in _walked(ledger, lo, hi, report):
        event_id, run_id, task_key, type_, ts, payload, seq, stored = row
        event_id, hash_ = text_id(event_id), text_hash(stored)
        if packed and (type(stored) is str or (type(row[0]) is str
                       and type(stored_id(row[0])) is bytes)):
            report.problem(report.storage_classes, (seq, _unpacked(row[0], stored)))
        count, plain = 1, False
        if type_ == lines_type:
            payload, count, plain = _chunk(event_id, run_id, task_key, ts, payload, seq,
                                           prev_seq, report)
        if seq - count < prev_seq:  # a chunk of more lines than it has seqs for
            report.problem(report.invalid_payloads, (seq, (
                f"it holds {count} lines but takes seqs after {prev_seq} only "
                f"({seq - prev_seq})")))
            count = max(1, seq - prev_seq)
        events += count
        if seq != prev_seq + count:
            report.problem(report.gaps, (prev_seq, seq - count + 1))
        texts = (type(event_id) is str and type(run_id) is str and type(type_) is str
                 and type(ts) is str and type(hash_) is str
                 and (task_key is None or type(task_key) is str))
        if not texts:
            row = EventRow(event_id, run_id, task_key, type_, ts, payload, seq, hash_)
            report.problem(report.storage_classes, (seq, _storage_classes(row)))
            event_id, run_id, task_key, type_, ts, payload, seq, hash_ = _as_text(row)
        if link(prev_hash, seq, event_id, run_id, task_key, type_, ts, payload) != hash_:
            report.problem(report.broken_links, seq)
        # A snapshot's payload is checked after the snapshot check, which may vouch for
        # it (_check_snapshot_rows); an output line as the runner writes it validates and
        # is canonical, shown without its model. Anything else gets the full check.
        if type_ == snapshot_type and texts and task_key is None and _clean(event_id, run_id,
                                                                             ts):
            part.snapshots.append(seq)
        elif not (texts and (
                (type_ == output_type and plain_output(event_id, run_id, task_key, ts, payload))
                or (type_ == lines_type and plain))):
            full = EventRow(event_id, run_id, task_key, type_, ts, payload, seq, hash_)
            event = _checked_payload(full, seq, report)
            if event is not None and type_ in _IDENTITY_TYPES:
                part.identity.append((full, getattr(event, "ledger_id", None)))
        if not part.first_seq:
            part.first_seq = seq
        prev_seq, prev_hash = seq, hash_ or ""
    report.events = events
    part.last_seq, part.last_hash = prev_seq, prev_hash
    return part


def _walked(ledger: Ledger, lo: int, hi: int, report: VerifyReport
            ) -> Iterator[tuple[Any, ...]]:
    """The rows ``lo < seq <= hi`` as stored; a row with text that is not UTF-8 (which
    Python's sqlite3 cannot read as text) named, and handed on with it decoded with
    replacement characters (so its link reads broken too), and the walk goes on."""
    after = lo
    while after < hi:
        try:
            for row in ledger._fetch(_ROWS, [after, hi]):
                after = row[6]
                yield row
            return
        except NotUtf8:
            for row, column in _read_as_bytes(ledger, after, hi):
                after = row[6]
                yield row
                if column is not None:
                    report.problem(report.invalid_payloads,
                                   (after, f"{column} is not UTF-8 text"))
                    break


def _read_as_bytes(ledger: Ledger, after: int, hi: int
                   ) -> Iterator[tuple[tuple[Any, ...], str | None]]:
    """The rows after ``after``, their text read as bytes and decoded here: each row, and
    the first of its columns that is not UTF-8 (None: all are)."""
    conn = ledger._conn
    names = _ROW_COLUMNS
    kinds = ", ".join(f"typeof({name})" for name in names)
    cursor = conn.cursor()
    factory, conn.text_factory = conn.text_factory, bytes
    try:
        cursor.execute(_ROWS.replace(" FROM", f", {kinds} FROM", 1), [after, hi])
        for values in iter(cursor.fetchone, None):
            row, types = list(values[:8]), values[8:]
            bad = None
            for i, kind in enumerate(types):
                if kind == b"text":  # typeof() is text too, read as bytes here
                    try:
                        row[i] = row[i].decode("utf-8")
                    except UnicodeDecodeError:
                        row[i] = row[i].decode("utf-8", "replace")
                        bad = bad or names[i]
            yield tuple(row), bad
    finally:
        conn.text_factory = factory
        cursor.close()


# The stored columns, in EventRow's order.
_ROW_COLUMNS = ("event_id", "run_id", "task_key", "type", "ts", "payload", "seq", "hash")
_ROWS = (f"SELECT {', '.join(_ROW_COLUMNS)} FROM events "
         "WHERE seq > ? AND seq <= ? ORDER BY seq")


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
    if not canonical_json(row.payload):
        report.problem(report.noncanonical, seq)
    return event


# -- rows as evalledger writes them -------------------------------------------------------------


class _Output(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    line: str
    n: int
    stream: str = "stdout"
    truncated: bool = False


_decode_output = msgspec.json.Decoder(_Output).decode
_STREAMS = ("stdout", "stderr")  # TaskOutput.stream's Literal


def _clean(event_id: str, run_id: str, ts: str) -> bool:
    """Whether these envelope columns are what every event's model accepts: not empty,
    no line break."""
    envelope = f"{event_id}{run_id}{ts}"
    return bool(event_id and run_id and ts) and "\n" not in envelope and "\r" not in envelope


def _plain_output(event_id: str, run_id: str, task_key: str | None, ts: str,
                  payload: str) -> bool:
    """Whether a ``task.output`` row (its columns text) is exactly what the runner writes
    (``TaskOutput.encoded``): then it validates and is canonical JSON, and no model
    needs building (a property test holds this to the full check). False says only
    "not shown here": the full check decides."""
    if not (task_key and _clean(event_id, run_id, ts) and "\n" not in task_key
            and "\r" not in task_key):
        return False
    try:
        out = _decode_output(payload)
    except msgspec.DecodeError:
        return False
    return (out.stream in _STREAMS
            and output_payload(out.line, out.n, out.stream, out.truncated) == payload)


def _chunk(event_id: Any, run_id: Any, task_key: Any, ts: Any, payload: Any, seq: int,
           prev_seq: int, report: VerifyReport) -> tuple[Any, int, bool]:
    """A ``task.lines`` row's text, how many lines it holds (``_lines``), and whether its
    payload is checked already: exactly what the runner writes (then no model is built
    for it), or a frame that does not decompress, named here (its row read as it is: its
    link reads broken too). A payload that holds no lines is taken to fill its place
    (its check names it)."""
    if type(payload) is bytes:
        try:
            payload = unstored(payload)
        except ChunkError as e:
            report.problem(report.invalid_payloads, (seq, str(e)))
            return payload.hex(), max(1, seq - prev_seq), True
    if type(payload) is str and type(event_id) is str and type(run_id) is str and type(
            ts) is str and type(task_key) is str:
        count = _plain_chunk(event_id, run_id, task_key, ts, payload)
        if count:
            return payload, count, True
    try:
        return payload, count_lines(payload), False
    except (ChunkError, TypeError):
        return payload, max(1, seq - prev_seq), False


class _Line(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True,
            gc=False):
    # Declared in key order, defaults left out: encoded, a line reads as the runner
    # writes it (a task.output's fields, or a task.event's data kept as its raw text).
    # msgspec takes no Raw in a union: an empty one says "absent".
    data: msgspec.Raw = msgspec.Raw(b"")
    line: str | None = None
    n: int
    stream: str = "stdout"
    truncated: bool = False


class _Chunk(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    lines: list[tuple[str, _Line]]


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_encode_chunk = msgspec.json.Encoder().encode


def _plain_chunk(event_id: str, run_id: str, task_key: str, ts: str, payload: str) -> int:
    """How many lines a ``task.lines`` row holds when it is exactly what the runner writes
    (``_lines.chunked`` of lines each a ``task.output`` as ``TaskOutput.encoded`` writes
    it or a ``task.event`` of canonical data): then it validates and is canonical. 0 says
    only "not shown here": the full check decides.

    The hot loop of verify on a ledger of chunks: the chunk is decoded once and written
    again (the runner's spelling, which ``TaskOutput.encoded`` shares: a property test
    holds it to the full check); a line is looked at alone only for what that cannot
    show (its stream's name, a JSON event's data)."""
    if not (task_key and _clean(event_id, run_id, ts) and "\n" not in task_key
            and "\r" not in task_key):
        return 0
    try:
        chunk = _decode_chunk(payload)
    except msgspec.DecodeError:
        return 0
    entries = chunk.lines
    if not 0 < len(entries) <= MAX_LINES or _encode_chunk(chunk) != payload.encode():
        return 0
    if not all(_clean(event_id, run_id, t) for t in {t for t, _ in entries}):
        return 0
    for _, line in entries:
        if not line.data:
            if line.line is None or line.stream not in _STREAMS:
                return 0
            continue
        data = bytes(line.data).decode()
        if (line.line is not None or line.stream != "stdout" or line.truncated
                or not data.startswith("{") or not canonical_json(data)):
            return 0
    return len(entries)


def _storage_classes(row: EventRow) -> str:
    """Which envelope columns are stored as other than evalledger stores them, and how:
    ``run_id is stored as BLOB, not TEXT: evalledger stores text`` (``row`` has its id
    and hash read as text already: what is left a BLOB is of the wrong size)."""
    wrong = [(name, value) for name, value in zip((*_ENVELOPE, "hash"),
                                                  (*row[:5], row.hash), strict=True)
             if value is not None and type(value) is not str]
    return "; ".join(_stored_as(name, value) for name, value in wrong)


def _unpacked(event_id: Any, hash_: Any) -> str:
    """What of a row's id and hash schema 14 would have stored as bytes but is text."""
    said = []
    if type(event_id) is str and type(stored_id(event_id)) is bytes:
        said.append("event_id is stored as TEXT: evalledger stores a UUID as its 16 bytes "
                    "(as text it escapes the UNIQUE index)")
    if type(hash_) is str:
        said.append("hash is stored as TEXT: evalledger stores its 32 bytes")
    return "; ".join(said)


def _stored_as(name: str, value: Any) -> str:
    stored = _STORAGE_CLASS.get(type(value), "NULL")
    if name == "event_id" and stored == "BLOB":
        return (f"event_id is stored as a BLOB of {len(value)} bytes: evalledger stores "
                "an id as text, or a UUID as its 16 bytes")
    if name == "hash" and stored == "BLOB":
        return f"hash is stored as a BLOB of {len(value)} bytes: evalledger stores its 32"
    return f"{name} is stored as {stored}, not TEXT: evalledger stores text"


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


def canonical_json(text: str) -> bool:
    """Whether ``text`` is a JSON object in canonical form: what pydantic-core writes for
    the value it holds (no spaces, its spelling of numbers and strings) with the keys of
    every object sorted. Duplicate keys, ``NaN``, ``1E2`` or ``\\u00e9`` are not."""
    try:
        value = from_json(text)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    try:
        if to_json(value, inf_nan_mode="null").decode() != text:
            return False
    except ValueError:
        return False
    # Keys sorted at every level: msgspec writes them as they are, then sorted; the same
    # text both ways is sorted throughout (in C: 10 -> 6 us a lifecycle row).
    try:
        return bool(_encode(value) == _encode_sorted(value))
    except (TypeError, OverflowError, msgspec.EncodeError):
        return _sorted_keys(value)


_encode = msgspec.json.Encoder().encode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


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


def _first_native(ledger: Ledger) -> EventRow | None:
    """The first ``run.started`` recorded in this ledger (naming its ledger id), found
    without a walk (one row per run, by the run-level index)."""
    _, rows = ledger.query(
        f"SELECT {', '.join(_ROW_COLUMNS)} FROM events WHERE type = ? AND task_key IS NULL "
        "AND CASE WHEN json_valid(payload) THEN json_extract(payload, '$.ledger_id') END = ? "
        "ORDER BY seq LIMIT 1", [EventType.RUN_STARTED, ledger.ledger_id])
    return fetched(rows[0]) if rows else None


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
