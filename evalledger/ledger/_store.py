"""The SQLite event store: open, append, replay.

One ``Ledger`` owns one ``sqlite3`` connection to one file. Writes are batches:
``append`` takes the write lock with ``BEGIN IMMEDIATE``, reads the last
``(seq, hash)``, assigns the next seqs, chains the hashes and inserts the batch,
all in one transaction. Several processes appending to one file therefore
interleave whole batches, and the chain stays one valid chain.

Invariant: ``seq`` runs 1..N without gaps, because only ``append`` inserts and it
assigns ``last + 1`` under the write lock (a chunk of ``k`` lines takes ``last + 1`` to
``last + k`` and is stored at the last: ``_lines``).

A ``Ledger`` is not for concurrent use by several threads at once; it may move
between threads (the executor appends from one worker thread at a time).
"""

from __future__ import annotations

import heapq
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._chain import GENESIS, chain_rows
from ._errors import (
    AppendOnlyViolation,
    InvalidEvent,
    LedgerError,
    LedgerGone,
    LedgerIOError,
    LedgerLocked,
    LedgerNotFound,
    LedgerReadOnly,
    LedgerTooNew,
    NotALedger,
    NotUtf8,
    QueryInterrupted,
    RunConflict,
    RunNotFound,
)
from ._lines import LINES, ChunkError, lines_of, widened
from ._packed import sql_unpack
from ._rows import (
    LIFECYCLE_WHERE,
    LIFECYCLE_WHERE_3,
    LIFECYCLE_WHERE_6,
    STREAM_TYPES,
    UNFOLDED_TYPES,
    EventRow,
    EventType,
    fetched,
    stored_id,
    text_hash,
    text_id,
)
from ._version import SCHEMA_VERSION

if TYPE_CHECKING:  # pydantic and sqlite-utils are imported where used: start-up time
    from pydantic import ValidationError

    from ._anchor import Anchor
    from ._events import AnyEvent
    from ._lite import LiteEvent
    from ._signing import SealReport
    from ._sqlite_utils import Database

DEFAULT_BUSY_TIMEOUT = 30.0
PAGE_SIZE = 8192

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_INTERRUPT, _SQLITE_AUTH = 5, 6, 8, 9, 23
_SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_CONSTRAINT, _SQLITE_NOTADB = (
    11, 13, 14, 19, 26)
_SQLITE_TOOBIG = 18
_SQLITE_CONSTRAINT_TRIGGER = 1811
_SQLITE_READONLY_ROLLBACK = 776  # a hot rollback journal met by a read-only connection

# The longest string or blob a connection to another's file (``untrusted``: merge's
# other ledger) reads or makes (SQLite's SQLITE_LIMIT_LENGTH; 1e9 by default): a value
# computed as it is read (an SQL
# function's result, a column checked away below) must not grow past what a real ledger
# holds. The largest real value is a run.snapshot's: 44 MB of JSON for a 100,000-task run
# (``_packed``; stored so in a ledger before schema 12, and what ``evalledger_unpack``
# returns in SQL); next a run.started's plan, 141 bytes a task. 256 MiB is six times the
# snapshot (a run of some 580,000 tasks) and still a bound on what one crafted row costs.
MAX_VALUE_BYTES = 256 << 20
# The columns of a ledger's tables as PRAGMA table_xinfo lists them: name, declared
# types (0001 made them; 0014 made the event id and the hash binary).
_SHAPES: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    "meta": (("key", frozenset({"TEXT"})), ("value", frozenset({"TEXT"}))),
    "events": tuple((name, frozenset(types.split("|"))) for name, types in (
        ("seq", "INTEGER"), ("event_id", "BLOB|TEXT"), ("run_id", "TEXT"), ("task_key", "TEXT"),
        ("type", "TEXT"), ("ts", "TEXT"), ("payload", "TEXT"), ("hash", "BLOB|TEXT"))),
}

# In EventRow's order: a fetched row is an EventRow as it comes.
_COLUMNS = "event_id, run_id, task_key, type, ts, payload, seq, hash"
# In chain_rows' order.
_INSERT = ("INSERT INTO events (seq, event_id, run_id, task_key, type, ts, payload, hash) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
# Big batches go in as multi-row INSERTs of up to this many rows: the sqlite3
# module releases and retakes the GIL around every statement step, and with the
# event loop busy reading output each retake is a contended hand-off. One step per
# chunk instead of one per row measured +25% alone and more under a busy loop.
# (Fewer where SQLite allows fewer variables: 999 before 3.32.)
_CHUNK = 256
# SQLite's default SQLITE_MAX_VARIABLE_NUMBER is 32766; stay well under it.
_LOOKUP_CHUNK = 900


@contextmanager
def translate_errors(path: Path, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Iterator[None]:
    """Turn ``sqlite3`` exceptions into ``LedgerError``s with a one-line message naming ``path``.

    This is the one place that knows SQLite's error codes.
    """
    try:
        yield
    except sqlite3.Error as e:
        code = getattr(e, "sqlite_errorcode", 0) or 0
        primary = code & 0xFF
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, sqlite3.OperationalError) and detail.startswith(
                "Could not decode to UTF-8 column"):  # Python's words, not SQLite's
            column = detail.split("'")[1] if detail.count("'") >= 2 else "a column"
            raise NotUtf8(f"{path}: a row's {column} is not UTF-8 text; "
                          "`evalledger verify` names it") from e
        if code == _SQLITE_CONSTRAINT_TRIGGER or "append-only" in detail:
            raise AppendOnlyViolation(f"{path}: {detail}") from e
        if primary == _SQLITE_INTERRUPT:
            raise QueryInterrupted(f"{path}: the query was interrupted") from e
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
            raise LedgerLocked(
                f"{path} is locked by another process (waited {busy_timeout:g}s); "
                "try again when it is done"
            ) from e
        if primary == _SQLITE_AUTH:
            raise LedgerReadOnly(
                f"{path} is opened read-only: {detail} (ATTACH and VACUUM INTO are refused)"
            ) from e
        if code == _SQLITE_READONLY_ROLLBACK:
            raise LedgerIOError(
                f"{path} was left mid-write by a process that was killed, and a read-only "
                "command cannot roll that back: any command that writes it does") from e
        if primary == _SQLITE_READONLY:
            raise LedgerReadOnly(f"{path} is read-only here: {detail}") from e
        if primary in (_SQLITE_NOTADB, _SQLITE_CORRUPT):
            raise NotALedger(f"{path} is not an evalledger ledger ({detail})") from e
        if primary == _SQLITE_TOOBIG:
            raise LedgerIOError(
                f"{path}: {detail}: a value over {MAX_VALUE_BYTES >> 20} MiB, more than a "
                "ledger holds, is not read from another's file") from e
        if primary == _SQLITE_FULL:
            # SQLite writes temporary files too (large transactions, sorts): the full disk
            # may be the temp folder's, not the ledger's.
            raise LedgerIOError(
                f"{path}: {detail}: the disk holding the ledger, or the temp folder "
                f"({tempfile.gettempdir()}), is full") from e
        if primary == _SQLITE_CANTOPEN:
            folder = Path(path).absolute().parent
            if not folder.is_dir():  # SQLite says only "unable to open database file"
                raise LedgerIOError(f"cannot open {path}: its folder {folder} does not "
                                    "exist (a ledger is created in an existing folder)") from e
            raise LedgerIOError(f"cannot open {path}: {detail}") from e
        raise LedgerIOError(f"{path}: {detail}") from e


class Ledger:
    """An append-only, hash-chained event log in one SQLite file.

    Args:
        path: the ledger file. Opened read-write it is created (and migrated) if
            needed; opened read-only it must exist.
        read_only: open with ``mode=ro``: for ``sql``, ``verify`` and reports.
        durable: ``synchronous=FULL`` (survives power loss) instead of ``NORMAL``
            (survives a killed process, which is what WAL guarantees either way).
        busy_timeout: seconds to wait for another process's write lock.

    Raises:
        LedgerNotFound: read-only and there is no file.
        NotALedger: not a SQLite database, or a SQLite database of something else.
        LedgerTooNew: written by a newer evalledger.
        LedgerLocked: another process held the lock past ``busy_timeout``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        durable: bool = False,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        untrusted: bool = False,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        # Another's file (merge's other ledger): no value read from it is built past
        # MAX_VALUE_BYTES. Not the user's own, whose largest snapshot (a run of more than
        # some 580,000 tasks) may be larger.
        self.untrusted = untrusted
        self.busy_timeout = busy_timeout
        # Invariant: True once check_file found that the path no longer names this
        # ledger's file or -wal; close then empties the -wal into the ledger's own file.
        self._gone = False
        # The newest seal check of each run, by (run, until, last seq): reads of one run
        # ask it once per fold, not once per event stream.
        self._seals: dict[tuple[str, int], tuple[tuple[int | None, int], SealReport]] = {}
        self._snapshot_keys: dict[str, tuple[tuple[str, int], dict[str, bytes]]] = {}
        if self.path.is_dir():
            raise NotALedger(f"{self.path} is a directory, not a ledger file")
        if self.path.exists() and not self.path.is_file():
            # /dev/null, a FIFO: SQLite reads it as an empty file, then a writer fails
            # ("disk I/O error") and leaves its journal beside it (/dev/null-journal).
            kind = "FIFO" if self.path.is_fifo() else "socket" if self.path.is_socket() \
                else "device"
            raise NotALedger(f"{self.path} is a {kind}, not a ledger file")
        if read_only and not self.path.is_file():
            folder = self.path.absolute().parent
            missing = "" if folder.is_dir() else f" (there is no folder {folder})"
            raise LedgerNotFound(f"no ledger at {self.path.absolute()}{missing}")
        _refuse_non_sqlite(self.path)
        if not read_only and self.path.exists() and not os.access(self.path, os.W_OK):
            # Said now, not at the first append: a run must not start (make its folder,
            # start its watchdog) on a ledger it cannot record in.
            raise LedgerReadOnly(f"{self.path} is read-only here: it cannot be written")
        try:
            self._open(durable, immutable=False)
        except (LedgerIOError, LedgerReadOnly):
            # A WAL ledger in a read-only folder (an archive, a read-only mount): SQLite
            # cannot make the -shm file beside it (an I/O error, or "attempt to write a
            # readonly database" where the file is not writable either). With no frame
            # in a -wal file either (none, or one copied empty), every event is in the
            # main file and nobody can be writing it: read it as immutable.
            if not (read_only and _nobody_writes(self.path) and _no_frames(self.path)):
                raise
            self._open(durable, immutable=True)
        # Invariant: the files this connection writes, as (st_dev, st_ino). Every commit
        # checks that the path still names them (``check_file``).
        self._file_id: tuple[int, int] | None = None
        self._wal_id: tuple[int, int] | None = None
        # As str, made once (every commit stats both), absolute as SQLite holds them: a
        # later chdir changes nothing, and the -wal is beside the file a link points to.
        self._names = (os.path.abspath(self.path), f"{os.path.realpath(self.path)}-wal")
        if not read_only:
            self._file_id = _file_id(self._names[0])
            self._wal_id = _file_id(self._names[1])

    @property
    def db(self) -> Database:
        """The connection as a sqlite-utils ``Database`` (for migrations and tests)."""
        from ._sqlite_utils import Database

        return Database(self._conn)

    def _open(self, durable: bool, *, immutable: bool) -> None:
        with self._translate():
            if self.read_only:
                target = f"{self.path.resolve().as_uri()}?mode=ro"
                target += "&immutable=1" if immutable else ""
            else:
                target = str(self.path)
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves, so
            # the sqlite3 module never opens a deferred transaction behind our back.
            self._conn = sqlite3.connect(
                target, uri=self.read_only, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False,
            )
            if self.untrusted:
                self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            self._conn.create_function("evalledger_unpack", 1, sql_unpack, deterministic=True)
        try:
            with self._translate():
                self._prepare(durable)
                # What the lifecycle index's WHERE is in this file (a query must repeat it).
                version = self.schema_version
                self._lifecycle_where = (LIFECYCLE_WHERE if version >= 17 else
                                         LIFECYCLE_WHERE_6 if version >= 6 else
                                         LIFECYCLE_WHERE_3)
        except BaseException:
            self._conn.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _prepare(self, durable: bool) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if self.read_only:
            # Before any row is read: a generated column is computed on every read (a
            # 28 KB file made 300 MB a row of a payload column printf() fills).
            for table in _SHAPES:
                if table in tables and (odd := _odd_column(conn, table)) is not None:
                    raise NotALedger(f"{self.path} is not an evalledger ledger ({odd})")
        if self._is_ledger(tables):
            self._check_version()
        elif tables - {"_sqlite_migrations"}:
            # Someone else's database: refuse before touching it (not even WAL mode).
            raise NotALedger(f"{self.path} is a SQLite database but not an evalledger ledger")
        elif self.read_only:
            # No table yet: an empty file, or a ledger whose creation was cut off before
            # its first migration committed (which makes every table at once). A writer
            # finishes it below; to a reader it is no ledger yet.
            raise LedgerNotFound(f"no ledger at {self.path} (it holds no table yet: its "
                                 "creation was cut off, or it is empty; `evalledger run` "
                                 "makes one there)")
        if self.read_only:
            conn.execute("PRAGMA query_only = 1")
            conn.set_authorizer(_read_only_authorizer)
            return
        if not tables:
            # A new file: 8 KiB pages, set before anything is written (WAL mode fixes
            # the size). Measured -5% size and a summary snapshot's or a task.started's
            # index entry no longer spilling onto overflow pages (bench/rebuild.py).
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            if not tables:
                # Switching to WAL writes the first page through a rollback journal: a
                # process killed then left a hot journal that no read-only command can
                # roll back. With nothing to lose yet, keep that journal in memory: the
                # page is written in one write, and the file is empty or one blank page.
                conn.execute("PRAGMA journal_mode = MEMORY")
            self._switch_to_wal()
        conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        if self._migrations_pending():
            from ._schema import MIGRATIONS
            from ._sqlite_utils import Database

            db = Database(conn)
            if not tables:
                # A new file has no rows: its migrations' statement journals and index
                # builds fit in memory, and must not fail for a full temp folder.
                conn.execute("PRAGMA temp_store = MEMORY")
            try:
                with self._immediate():
                    # Another process may have migrated while we waited for the lock.
                    if self._is_ledger({r[0] for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type='table'"
                    )}):
                        self._check_version()
                    MIGRATIONS.apply(db)
            finally:
                conn.execute("PRAGMA temp_store = DEFAULT")

    def check_file(self) -> None:
        """Check that the path still names the file this ledger opened, and its ``-wal``.

        A file deleted, moved or replaced under an open connection takes every write
        after that with it: SQLite goes on writing the unlinked file. Every append
        checks this before it commits; call it before telling anyone that what was
        written is in the ledger at this path (``run.json``).

        Raises:
            LedgerGone: the file or its ``-wal`` is no longer there, or is another file.
        """
        if self._file_id is None:  # read-only: nothing this process writes can be lost
            return
        try:
            self._check_file()
        except LedgerGone:
            self._gone = True
            raise

    def _check_file(self) -> None:
        now = _file_id(self._names[0])
        if now is None:
            raise LedgerGone(f"{self.path} was deleted or moved away while in use here; "
                             "stopped: what is written now would reach no ledger at that path")
        if now != self._file_id:
            raise LedgerGone(f"{self.path} was replaced by another file while in use here; "
                             "stopped: what is written now would not reach that file")
        # The -wal cannot change while this connection holds the database (SQLite
        # deletes it only at the last connection's close): one that went missing or
        # changed was deleted by hand, and the events it held are lost to every reader.
        wal = _file_id(self._names[1])
        if self._wal_id is None:
            self._wal_id = wal
        elif wal != self._wal_id:
            raise LedgerGone(f"{self.path}-wal was deleted or replaced while {self.path} was "
                             "in use here; stopped: the events it held are lost to every "
                             "other reader")

    def _switch_to_wal(self) -> None:
        # Changing the journal mode needs an exclusive lock, and SQLite answers
        # SQLITE_BUSY at once instead of calling the busy handler: wait here, as
        # long as the busy timeout would have.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                busy = (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _migrations_pending(self) -> bool:
        """Whether this file is short of the current schema (a new file included): the
        schema version says so without importing the migrations."""
        tables = {r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        return not self._is_ledger(tables) or self.schema_version < SCHEMA_VERSION

    def _is_ledger(self, tables: set[str]) -> bool:
        if not {"meta", "events"} <= tables:
            return False
        try:
            return self._meta("ledger_id") is not None
        except sqlite3.OperationalError:  # a "meta" table of some other shape
            return False

    def _check_version(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise LedgerTooNew(
                f"{self.path} has ledger schema version {version}, but this evalledger "
                f"reads up to {SCHEMA_VERSION}: upgrade evalledger"
            )

    def _meta(self, key: str) -> Any:
        """The value stored under ``key``: text as a ledger writes it, but a file may hold
        any SQLite value there."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return None if row is None else row[0]

    @property
    def schema_version(self) -> int:
        raw = self._meta("schema_version")
        if raw is None or raw == "":
            return 0
        # Digits, as a ledger writes them: int() overflows on a REAL inf, and takes 17.9,
        # b"17" and Arabic-Indic digits too.
        if (type(raw) is int and raw >= 0) or (
                isinstance(raw, str) and raw.isascii() and raw.isdigit()):
            return int(raw)
        raise NotALedger(f"{self.path} has a corrupt schema_version {_shown(raw)}")

    @property
    def ledger_id(self) -> str:
        return self._meta("ledger_id") or ""

    def close(self) -> None:
        if self._gone:
            # SQLite neither checkpoints nor deletes the -wal of a file that was moved
            # or unlinked (it may be another's now): left at the path, it would be
            # replayed over whatever file is put there next (a backup renamed over the
            # ledger read as this one, and rewritten so by its next writer). Empty it
            # into this ledger's own file instead, through the descriptors SQLite holds:
            # a ledger moved away then holds every event committed.
            with suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Ledger {str(self.path)!r}{' read-only' if self.read_only else ''}>"

    # -- transactions ----------------------------------------------------------------------

    def _translate(self) -> Any:
        return translate_errors(self.path, self.busy_timeout)

    @contextmanager
    def _immediate(self) -> Iterator[None]:
        """A write transaction that holds the write lock from its first statement.

        A deferred BEGIN would take a read snapshot first and could then fail to
        upgrade to a writer without the busy handler ever being called.
        """
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself fails: never keep the write lock after an error.
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    @contextmanager
    def read_transaction(self) -> Iterator[None]:
        """Every query inside the block reads one state of the ledger.

        Outside a transaction each statement reads the ledger as it is when that
        statement starts, so a check made of several queries can see a commit land
        between two of them (a merge's ``run.started`` in one, not its ``run.merged``
        in the other). A read transaction begun before the first query keeps the
        state that query saw (one WAL snapshot) until the block ends; writers go on
        meanwhile. Inside another transaction of this connection, the block joins it.
        """
        if self._conn.in_transaction:
            yield
            return
        with self._translate():
            self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if self._conn.in_transaction:
                with self._translate():
                    # Nothing was written: ending it releases the snapshot, nothing more.
                    self._conn.execute("ROLLBACK")

    # -- append ----------------------------------------------------------------------------

    def append(
        self, events: Iterable[AnyEvent | EventRow], *,
        if_run_at: tuple[str, int] | None = None,
    ) -> list[int]:
        """Append a batch of events in one transaction; return their seqs in order.

        An event whose ``event_id`` is already stored (or appears earlier in the
        batch) is not written again: its stored seq is returned, so a retried
        batch is harmless.

        ``if_run_at=(run_id, seq)`` appends only if that run's latest
        ``run.started`` / ``run.resumed`` is still the one at ``seq`` (0: the run
        has none), checked under the write lock: optimistic concurrency, so two
        processes cannot both start, or both resume, one run.

        Raises:
            LedgerReadOnly: the ledger was opened read-only.
            LedgerLocked: another writer held the lock past the busy timeout.
            RunConflict: ``if_run_at`` no longer holds.
        """
        if self.read_only:
            raise LedgerReadOnly(f"{self.path} was opened read-only; cannot append")
        # Serialise before taking the lock: the lock is held only for the insert. Rows
        # (nearly every event of a run) skip the call.
        rows: list[EventRow] = [e if type(e) is EventRow else EventRow.of(e) for e in events]
        if not rows:
            return []
        with self._translate(), self._immediate():
            if if_run_at is not None:
                self._check_run_at(*if_run_at)
            seqs = self._append_rows(rows)
            # Last before the commit, under the write lock: a batch is never reported
            # committed into a file that is no longer the ledger at this path.
            self.check_file()
            return seqs

    def append_then(
        self, events: Iterable[AnyEvent | EventRow],
        then: Callable[[list[int], int], Iterable[AnyEvent | EventRow]],
    ) -> list[int]:
        """Append a batch as ``append`` does, then, in the same transaction, what ``then``
        makes of it; return the batch's seqs.

        ``then(seqs, before)`` gets the batch's seqs and the last seq before the batch (a
        seq above it is new here) and returns the events to append after it, or raises to
        roll the whole batch back. What a transfer needs: the events it carries and the
        ``run.merged`` that accounts for them commit together or not at all.

        Raises:
            as ``append``, and whatever ``then`` raises.
        """
        if self.read_only:
            raise LedgerReadOnly(f"{self.path} was opened read-only; cannot append")
        rows: list[EventRow] = [e if type(e) is EventRow else EventRow.of(e) for e in events]
        with self._translate(), self._immediate():
            (before,) = self._conn.execute(
                "SELECT coalesce(max(seq), 0) FROM events").fetchone()
            seqs = self._append_rows(rows) if rows else []
            if more := [EventRow.of(e) for e in then(seqs, before)]:
                self._append_rows(more)
        return seqs

    def _check_run_at(self, run_id: str, expected: int) -> None:
        (latest,) = self._conn.execute(
            "SELECT coalesce(max(seq), 0) FROM events WHERE task_key IS NULL "
            "AND type IN (?, ?) AND run_id = ?",
            [EventType.RUN_STARTED, EventType.RUN_RESUMED, run_id],
        ).fetchone()
        if latest != expected:
            raise RunConflict(
                f"run {run_id} already exists in {self.path}; resume it instead"
                if expected == 0 else
                f"run {run_id} was resumed by another process meanwhile (at seq {latest})"
            )

    def _append_rows(self, rows: Sequence[EventRow]) -> list[int]:
        conn = self._conn
        last = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        last_seq, last_hash = (last[0], text_hash(last[1])) if last is not None else (0, GENESIS)
        if last_seq > _MAX_SEQ - len(rows):  # a seq written into the file by hand
            raise LedgerIOError(f"{self.path}: its last seq, {last_seq}, leaves no room for "
                                f"{len(rows)} event(s) more (SQLite counts to {_MAX_SEQ}); "
                                "run `evalledger verify`")
        # The common case: no event stored before, none repeated in the batch. Try it as
        # is; a retried or repeated event shows up as a UNIQUE violation of event_id and
        # takes the slow path below.
        conn.execute("SAVEPOINT optimistic")
        chained = chain_rows(last_hash, last_seq + 1, rows)
        try:
            _insert(conn, chained)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO optimistic")
            conn.execute("RELEASE optimistic")
        else:
            conn.execute("RELEASE optimistic")
            return [row[0] for row in chained]
        seq_of = self._stored_seqs([row[0] for row in rows])
        new_rows: list[EventRow] = []
        for row in rows:
            if row[0] not in seq_of:
                seq_of[row[0]] = 0
                new_rows.append(row)
        chained = chain_rows(last_hash, last_seq + 1, new_rows)
        seq_of.update((row.event_id, stored[0]) for row, stored in zip(new_rows, chained,
                                                                       strict=True))
        _insert(conn, chained)
        return [seq_of[row[0]] for row in rows]

    def _stored_seqs(self, event_ids: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for i in range(0, len(event_ids), _LOOKUP_CHUNK):
            chunk = [stored_id(event_id) for event_id in event_ids[i : i + _LOOKUP_CHUNK]]
            marks = ",".join("?" * len(chunk))
            found.update(
                (text_id(event_id), seq) for event_id, seq in self._conn.execute(
                    f"SELECT event_id, seq FROM events WHERE event_id IN ({marks})", chunk))
        return found

    # -- replay ----------------------------------------------------------------------------

    def rows(
        self,
        run_id: str | None = None,
        *,
        task_key: str | None = None,
        types: Iterable[str] | None = None,
        after_seq: int = 0,
        until_seq: int | None = None,
        stored: bool = False,
    ) -> Iterator[EventRow]:
        """Rows in ``seq`` order, filtered; streamed, never fetched all at once.

        ``after_seq < seq <= until_seq``: a run as it was at ``until_seq`` is its rows
        up to there (what time travel folds).

        A chunk of lines (``task.lines``, ``_lines``) comes as the lines it holds, each
        with its own seq, type and payload; ``stored``: as the row the table holds (what
        the chain, seals, export and merge read).

        With a run and several types, each type is one index range scan already in
        seq order, and the scans are merged here: no sort, constant memory.
        """
        type_list = sorted(set(types)) if types is not None else None
        if type_list is not None and not type_list:
            return
        if stored or not (type_list is None or set(type_list) & set(STREAM_TYPES)):
            yield from self._rows(run_id, task_key, type_list, after_seq, until_seq)
            return
        # Lines may sit in a chunk stored after until_seq (at its last line's seq).
        wanted = None if type_list is None else frozenset(type_list)
        scan_types = None if type_list is None else sorted({*type_list, LINES})
        yield from read_as_lines(
            self.path, self._rows(run_id, task_key, scan_types, after_seq, widened(until_seq)),
            wanted, after_seq, until_seq)

    def _rows(self, run_id: str | None, task_key: str | None, type_list: list[str] | None,
              after_seq: int, until_seq: int | None) -> Iterator[EventRow]:
        """The stored rows ``rows`` reads."""
        if run_id is not None and type_list is not None and task_key is None:
            if not set(type_list) & set(UNFOLDED_TYPES):
                # Lifecycle types only: one index-only scan, already in seq order.
                yield from self._scan(run_id, None, type_list, after_seq, until_seq,
                                      self._lifecycle_where)
                return
            if len(type_list) > 1:
                scans = [self._scan(run_id, None, [t], after_seq, until_seq) for t in type_list]
                yield from heapq.merge(*scans, key=_by_seq)
                return
        yield from self._scan(run_id, task_key, type_list, after_seq, until_seq)

    def _scan(
        self, run_id: str | None, task_key: str | None, types: list[str] | None, after_seq: int,
        until_seq: int | None, *extra_where: str,
    ) -> Iterator[EventRow]:
        where = ["seq > ?", *extra_where]
        params: list[Any] = [after_seq]
        if until_seq is not None:
            where.append("seq <= ?")
            params.append(until_seq)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if task_key is not None:
            where.append("task_key = ?")
            params.append(task_key)
        if types is not None:
            where.append(f"type IN ({','.join('?' * len(types))})")
            params.extend(types)
        sql = f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq"
        for row in self._fetch(sql, params):
            yield fetched(row)

    def events(
        self,
        run_id: str | None = None,
        *,
        task_key: str | None = None,
        types: Iterable[str] | None = None,
        after_seq: int = 0,
        until_seq: int | None = None,
    ) -> Iterator[AnyEvent]:
        """Typed events in ``seq`` order, filtered like ``rows``. A run's seals
        (``run.signed``) are bookkeeping like the hash column: left out unless ``types``
        names them; and of a signed run, what no seal of its own vouches for is left
        out (``seal_report``).

        Raises:
            InvalidEvent: a stored payload does not fit its type (``verify`` lists them all).
        """

        from ._events import decode_row

        ignored: frozenset[int] = frozenset()
        types = None if types is None else set(types)
        seals = types is not None and EventType.RUN_SIGNED in types
        if run_id is not None:
            now = self.last_seq()
            # Seals after ``until_seq`` vouch for what came before it too.
            ignored = self.seal_report(run_id, until_seq=now).ignored
            until_seq = now if until_seq is None else min(until_seq, now)
        for row in self.rows(run_id, task_key=task_key, types=types, after_seq=after_seq,
                             until_seq=until_seq):
            if (ignored and row.seq in ignored) or (
                    row.type == EventType.RUN_SIGNED and not seals):
                continue
            try:
                yield decode_row(row)
            except ValueError as e:  # pydantic's ValidationError included
                raise _invalid(self.path, row, e) from e

    def lite_events(
        self,
        run_id: str,
        *,
        types: Iterable[str],
        after_seq: int = 0,
        until_seq: int | None = None,
        sealed_through: int = 0,
    ) -> Iterator[LiteEvent | AnyEvent]:
        """Events for folding, like ``events``, but the per-task lifecycle events come
        partially decoded (``_lite``): only the fields folds read. What rebuilds use.
        ``sealed_through``: as ``seal_report``'s (the fold starts from such a snapshot).

        Lifecycle types only (what folds read) is one scan of the covering lifecycle
        index, fetching only the columns an event needs (not its hash).

        Raises:
            InvalidEvent: a stored payload does not fit its type.
        """
        from ._lite import decode_lite

        type_list = sorted(set(types))
        if not type_list:
            return
        now = self.last_seq()
        until_seq = now if until_seq is None else min(until_seq, now)
        if set(type_list) & set(UNFOLDED_TYPES):
            rows: Iterable[tuple[Any, ...]] = (
                (r.event_id, r.seq, r.task_key, r.type, r.ts, r.payload)
                for r in self.rows(run_id, types=type_list, after_seq=after_seq,
                                   until_seq=until_seq))
        else:
            rows = self._fetch(
                f"SELECT event_id, seq, task_key, type, ts, payload FROM events WHERE seq > ? AND "
                f"seq <= ? AND {self._lifecycle_where} AND run_id = ? "
                f"AND type IN ({','.join('?' * len(type_list))}) ORDER BY seq",
                [after_seq, until_seq, run_id, *type_list])
        ignored = self.seal_report(run_id, until_seq=now,
                                   sealed_through=min(sealed_through, after_seq)).ignored
        for event_id, seq, task_key, type_, ts, payload in rows:
            if ignored and seq in ignored:
                continue
            event_id = text_id(event_id)
            try:
                yield decode_lite(event_id, run_id, seq, task_key, type_, ts, payload)
            except ValueError as e:
                row = EventRow(event_id, run_id, task_key, type_, ts, payload, seq)
                raise _invalid(self.path, row, e) from e

    def seal_report(self, run_id: str, *, until_seq: int | None = None,
                    sealed_through: int = 0) -> SealReport:
        """Which of the run's events of sealed types no valid seal of its own processes
        covers (``_signing``): what every read of a signed run leaves out.

        ``sealed_through``: the ``through_seq`` of a snapshot one of the run's batches
        sealed (``snapshot_vouched``), which the read starts from: only what came after
        it is checked (its batch had ended; what it folded was checked when it was
        made). Reads of a large finished run then check what is new, not all of it."""
        from ._signing import SEALED_TYPES, SealReport, seal_report

        mark = (until_seq, self.last_seq())
        cached = self._seals.get((run_id, sealed_through))
        if cached is not None and cached[0] == mark:
            return cached[1]
        if not self.run_signed(run_id):
            # Recorded before signing, or imported from such a run: nothing to hold it to
            # (verify walks it all the same, for seals a later process made).
            report = SealReport(False, frozenset(), (), (), unannounced=False)
            self._seals[(run_id, sealed_through)] = (mark, report)
            return report
        types = sorted({*SEALED_TYPES, EventType.RUN_SIGNED})
        rows = self._fetch(
            f"SELECT seq, event_id, task_key, type, ts, payload FROM events WHERE seq > ? "
            f"AND seq <= ? AND {self._lifecycle_where} AND run_id = ? "
            f"AND type IN ({','.join('?' * len(types))}) ORDER BY seq",
            [sealed_through, until_seq if until_seq is not None else 2**62, run_id, *types])
        report = seal_report(((seq, text_id(event_id), task_key, type_, ts, payload)
                              for seq, event_id, task_key, type_, ts, payload in rows), run_id,
                             signed=True, ended=sealed_through > 0)
        if sealed_through and report.unannounced:
            # A key announced before the snapshot seals after it (a regrade a resume
            # overlapped): its chain starts there, so the whole run is checked.
            report = self.seal_report(run_id, until_seq=until_seq)
        self._seals[(run_id, sealed_through)] = (mark, report)
        return report

    def cursor(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        """Rows of a query one at a time, as its reader takes them: a page that reads a
        few rows of a range reads no more of the file (``_fetch`` reads a thousand)."""
        with self._translate():
            cursor = self._conn.execute(sql, params)
            try:
                # Not `yield from cursor`: closing this generator would close the cursor
                # itself, outside _close, on a ledger already closed (a traceback after
                # the one-line error of `search` meeting a damaged chunk).
                for row in cursor:  # noqa: UP028
                    yield row
            finally:
                _close(cursor)

    def _fetch(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        """Rows of a query, a thousand at a time (never all in memory at once)."""
        with self._translate():
            cursor = self._conn.execute(sql, params)
            try:
                while batch := cursor.fetchmany(1000):
                    yield from batch
            finally:
                _close(cursor)

    def latest_row(self, run_id: str, type_: str, payload_prefix: str, *,
                   until_seq: int | None = None,
                   accept: Callable[[EventRow], bool] | None = None) -> EventRow | None:
        """The run's newest run-level row of ``type_`` (at or before ``until_seq``) whose
        payload text starts with ``payload_prefix`` (and that ``accept`` accepts).
        Payloads are canonical JSON (keys sorted, no spaces): a prefix names the values
        of the first fields exactly."""
        # The candidates by index, each payload's first bytes read through a blob handle,
        # the one row that matches read whole: substr() in SQL would load every
        # candidate's payload whole (a 100,000-task run's summary snapshot is 44 MB),
        # and SQLite would hold two copies of the one read.
        prefix = payload_prefix.encode()
        with self._translate():
            seqs = [seq for (seq,) in self._conn.execute(
                "SELECT seq FROM events WHERE type = ? AND run_id = ? AND task_key IS NULL "
                "AND seq <= ? AND typeof(payload) = 'text' ORDER BY seq DESC",
                [type_, run_id, until_seq if until_seq is not None else 2**62])]
            for seq in seqs:
                if self.payload_start(seq, len(prefix)) == prefix:
                    row = self._conn.execute(f"SELECT {_COLUMNS} FROM events WHERE seq = ?",
                                             [seq]).fetchone()
                    found = None if row is None else fetched(row)
                    if found is not None and (accept is None or accept(found)):
                        return found
        return None

    def run_signed(self, run_id: str) -> bool:
        """Whether the run's first ``run.started`` announces a signing key (runs recorded
        before signing, and imported ones, do not)."""
        with self._translate():
            first = self._conn.execute(
                # CASE, not AND: SQLite may evaluate both sides, and json_type raises on
                # a payload that is not JSON (a forged or damaged row: verify names it).
                "SELECT CASE WHEN json_valid(payload) THEN "
                "json_type(payload, '$.public_key') = 'text' END "
                "FROM events WHERE type = ? AND run_id = ? AND task_key IS NULL "
                "ORDER BY seq LIMIT 1", [EventType.RUN_STARTED, run_id]).fetchone()
        return first is not None and bool(first[0])

    def snapshot_keys(self, run_id: str) -> dict[str, bytes]:
        """The keys, by id, of the run's batches whose snapshots a read believes: each
        batch whose opening is sealed by the key it announces, unless a batch opened
        before it went on sealing after it opened (a batch forged in the middle of the
        run). A signature per batch, not a check of the whole run (``seal_report``)."""
        from ._signing import key_id_of, opening_key

        mark = ("keys", self.last_seq())
        if (cached := self._snapshot_keys.get(run_id)) is not None and cached[0] == mark:
            return cached[1]
        openings = [row for row in self.rows(run_id, types=[EventType.RUN_STARTED,
                                                            EventType.RUN_RESUMED])
                    if '"public_key":"' in row.payload]
        keys: dict[str, bytes] = {}
        earlier: list[str] = []
        for row in openings:
            raw = opening_key(run_id, row, self.next_seal(run_id, row.seq or 0))
            if raw is None:
                continue
            if earlier and self._sealed_after(run_id, earlier, row.seq or 0):
                continue
            keys[key_id_of(raw)] = raw
            earlier.append(key_id_of(raw))
        self._snapshot_keys[run_id] = (mark, keys)
        return keys

    def _sealed_after(self, run_id: str, key_ids: list[str], seq: int) -> bool:
        """Whether one of ``key_ids`` has a ``run.signed`` of the run after ``seq``."""
        with self._translate():
            row = self._conn.execute(
                f"SELECT 1 FROM events WHERE seq > ? AND {self._lifecycle_where} AND "
                "run_id = ? AND type = ? AND CASE WHEN json_valid(payload) THEN "
                f"json_extract(payload, '$.key') IN ({','.join('?' * len(key_ids))}) END "
                "LIMIT 1", [seq, run_id, EventType.RUN_SIGNED, *key_ids]).fetchone()
        return row is not None

    def next_seal(self, run_id: str, seq: int) -> EventRow | None:
        """The run's first ``run.signed`` after ``seq``."""
        with self._translate():
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM events WHERE seq > ? AND {self._lifecycle_where} "
                "AND run_id = ? AND type = ? ORDER BY seq LIMIT 1",
                [seq, run_id, EventType.RUN_SIGNED]).fetchone()
        return None if row is None else fetched(row)

    def payload_start(self, seq: int, size: int) -> bytes | None:
        """The first ``size`` bytes (UTF-8) of the text payload at ``seq``, read through a
        blob handle: the payload is never loaded whole (``substr()`` would). None when
        there is no such row. ``typeof(payload)`` in SQL tells text from a forged BLOB or
        number without loading it either."""
        with self._translate():
            try:
                with self._conn.blobopen("events", "payload", seq, readonly=True) as blob:
                    return blob.read(size)
            except sqlite3.OperationalError:  # no such row, or a number stored there
                return None

    def query(
        self, sql: str, params: Sequence[Any] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one SQL statement; return its column names and rows.

        For audits and listings over the views; errors come back as ``LedgerError``s
        (a write on a read-only ledger as ``LedgerReadOnly``).
        """
        with self._translate():
            cursor = self._conn.execute(sql, params)
            return [d[0] for d in cursor.description or []], cursor.fetchall()

    def stream(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = (), *,
        stop: Callable[[], bool] | None = None,
    ) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """Run one statement; return its column names and its rows as they are produced.

        Memory stays flat in the result's size: rows are fetched a batch at a time.
        ``stop`` is asked every few thousand steps of SQLite's machine while the query
        runs (and between batches): when it answers true the query is interrupted.

        Raises:
            QueryInterrupted: ``stop`` said so.
            LedgerError: the statement failed (a write on a read-only ledger as
                ``LedgerReadOnly``).
        """
        conn = self._conn
        if stop is not None:
            conn.set_progress_handler(lambda: 1 if stop() else 0, 10_000)
        try:
            with self._translate():
                cursor = conn.execute(sql, params)
        except BaseException:
            conn.set_progress_handler(None, 0)
            raise
        columns = [d[0] for d in cursor.description or []]

        def rows() -> Iterator[tuple[Any, ...]]:
            try:
                with self._translate():
                    while batch := cursor.fetchmany(1000):
                        yield from batch
                        if stop is not None and stop():
                            raise QueryInterrupted(f"{self.path}: the query was interrupted")
            finally:
                cursor.close()
                conn.set_progress_handler(None, 0)

        return columns, rows()

    def last_seq(self) -> int:
        with self._translate():
            row = self._conn.execute("SELECT max(seq) FROM events").fetchone()
        return row[0] or 0

    def count(self) -> int:
        with self._translate():
            return int(self._conn.execute("SELECT count(*) FROM events").fetchone()[0])

    def run_ids(self) -> list[str]:
        """Every run id, oldest start first: the one order of runs (``runs`` lists it
        backwards, ``latest`` is its last, the viewer lists it too).

        A run's start time is the ``ts`` of its first ``run.started`` (in seq order: a
        run merged from shards, which has one per shard, counts once and starts when
        its first one does), what the ``runs`` view calls ``started_at``. An imported
        run keeps its original start there, so an old run imported today sorts where
        it started. Ties (the same microsecond) go by that ``run.started``'s seq.

        One index range over the run-level index and a row per run: cheap however
        many task events the ledger holds.
        """
        # A bare column beside min() comes from the row that holds the minimum
        # (SQLite's documented rule): ts is that of the run's first run.started.
        with self._translate():
            return [
                r[0]
                for r in self._conn.execute(
                    "SELECT run_id FROM (SELECT run_id, ts, min(seq) AS first FROM events "
                    "WHERE task_key IS NULL AND type = ? GROUP BY run_id) "
                    "ORDER BY ts, first",
                    [EventType.RUN_STARTED],
                )
            ]

    def anchor(self, run_id: str | None = None, *, until_seq: int | None = None
               ) -> Anchor | None:
        """An anchor of the ledger's last row, or of a run's last row that is not an output
        line (for a finished run: its last snapshot, else its ``run.finished``), at or
        before ``until_seq``; None when there is none. What ``run.json`` and
        ``checkpoint`` record: cutting anything of the run after it is then visible."""
        limit = until_seq if until_seq is not None else 2**62
        if run_id is None:
            row = self._last("seq <= ?", [limit])
        else:
            rows = [self._last(f"seq <= ? AND run_id = ? AND {self._lifecycle_where}",
                               [limit, run_id]),
                    self._last("seq <= ? AND run_id = ? AND task_key IS NULL", [limit, run_id])]
            row = max((r for r in rows if r is not None), default=None)
        if row is None:
            return None
        from ._anchor import Anchor

        return Anchor(ledger_id=self.ledger_id, seq=row[0], hash=text_hash(row[1]), ts=row[2])

    def last_lifecycle_seq(self, run_id: str, *, until_seq: int | None = None) -> int:
        """The seq of the run's last lifecycle event (not an output line, not a
        snapshot, not a seal) at or before ``until_seq``; 0 when it has none."""
        row = self._last(f"seq <= ? AND run_id = ? AND {self._lifecycle_where} AND type != ?",
                         [until_seq if until_seq is not None else 2**62, run_id,
                          EventType.RUN_SIGNED])
        return 0 if row is None else int(row[0])

    def _last(self, where: str, params: list[Any]) -> tuple[Any, ...] | None:
        with self._translate():
            row: tuple[Any, ...] | None = self._conn.execute(
                f"SELECT seq, hash, ts FROM events WHERE {where} ORDER BY seq DESC LIMIT 1",
                params,
            ).fetchone()
        return row

    def resolve_run(self, spec: str) -> str:
        """The run id named by ``spec``: an id, a unique prefix of one, or ``latest``
        (the newest by start time, see ``run_ids``).

        Raises:
            RunNotFound: no run matches, or the prefix matches several (they are listed).
        """
        return pick_run(spec, self.run_ids(), str(self.path))

    def __iter__(self) -> Iterator[AnyEvent]:
        return self.events()


def pick_run(spec: str, run_ids: Sequence[str], where: str) -> str:
    """The run id named by ``spec`` among ``run_ids``, oldest start first as
    ``Ledger.run_ids`` gives them (``latest`` is the last); see ``resolve_run``."""
    if not spec:
        raise RunNotFound("an empty run name matches nothing: give a run id, a prefix or "
                          "`latest`")
    if not run_ids:
        raise RunNotFound(f"no runs in {where}")
    if spec == "latest":
        return run_ids[-1]
    if spec in run_ids:
        return spec
    matches = [r for r in run_ids if r.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {spec!r} in {where} (see `evalledger runs`)")
    raise RunNotFound(f"{spec!r} matches several runs: {', '.join(matches[:10])}")


_by_seq = attrgetter("seq")
# tuple.__new__ skips the NamedTuple's Python-level __new__ (every row of a replay).


# The largest seq a row can have: SQLite's INTEGER is 64 bits, signed.
_MAX_SEQ = 2**63 - 1


def _insert(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    size = max(1, min(_CHUNK, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 8))
    whole = len(rows) - len(rows) % size
    if whole:
        sql = _INSERT + ", (?, ?, ?, ?, ?, ?, ?, ?)" * (size - 1)
        for start in range(0, whole, size):
            conn.execute(sql, list(chain.from_iterable(rows[start : start + size])))
    if whole < len(rows):
        conn.executemany(_INSERT, rows[whole:])


# The smallest page SQLite writes: a database file is empty or at least one page long.
_SMALLEST_PAGE = 512


def _refuse_non_sqlite(path: Path) -> None:
    """Refuse a file too short to be a SQLite database before SQLite opens it.

    SQLite itself takes any file shorter than its header for an empty database and
    would write a ledger over it (a one-line note made by ``echo > notes``). A longer
    file that is not a database SQLite refuses itself (SQLITE_NOTADB) at its first read.

    Only ``stat``: no descriptor of the ledger is opened but SQLite's. Closing any
    descriptor of a file drops every POSIX lock the process holds on it, those of this
    process's open connections too (sqlite.org/howtocorrupt.html, 2.2).
    """
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return
    except OSError as e:
        raise LedgerIOError(f"cannot open {path}: {e.strerror or e}") from e
    if not os.access(path, os.R_OK):  # said as plainly as open() said it
        raise LedgerIOError(f"cannot open {path}: Permission denied")
    if 0 < size < _SMALLEST_PAGE:
        raise NotALedger(f"{path} is not an evalledger ledger (not a SQLite database)")


def _odd_column(conn: sqlite3.Connection, table: str) -> str | None:
    """What no ledger's ``table`` has among its columns, or None: a generated or hidden
    column, another name, type or number of them."""
    found = conn.execute(f"PRAGMA table_xinfo({table})").fetchall()
    for _, name, _, _, _, _, hidden in found:
        if hidden:
            return f"{table}.{_shown(name)} is a generated or hidden column"
    expected = _SHAPES[table]
    for (_, name, declared, *_), (want, types) in zip(found, expected, strict=False):
        if name != want or str(declared).upper() not in types:
            return (f"{table} has a column {_shown(name)} {_shown(declared) or 'of no type'} "
                    f"where a ledger has {want} {'/'.join(sorted(types))}")
    if len(found) != len(expected):
        return f"{table} has {len(found)} columns, a ledger's {len(expected)}"
    return None


def _shown(value: object) -> str:
    """A name or value read from a file, for a one-line message: as it is when a plain
    word, else its repr; cut short."""
    text = value if isinstance(value, str) and value.isascii() and (
        value.isidentifier() or value == "") else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _close(cursor: sqlite3.Cursor) -> None:
    # A reader left suspended (its caller raised) is closed when it is collected, often
    # after the ledger was: the connection freed the cursor then, and an error here
    # would print a traceback after the caller's own one-line error.
    with suppress(sqlite3.ProgrammingError):
        cursor.close()


def _file_id(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:  # a folder made unreadable: it cannot be checked, nor reached
        raise LedgerGone(f"{path} can no longer be reached while in use here "
                         f"({e.strerror or e}); stopped") from e
    return st.st_dev, st.st_ino


def _nobody_writes(path: Path) -> bool:
    """Whether no process can be writing the file (immutable=1 turns locking off): it
    is on a read-only mount, or its folder has no write bit for anyone, so no writer
    can make the -wal file a WAL ledger is written through."""
    if _read_only_mount(path):
        return True
    try:
        return not path.resolve().parent.stat().st_mode & 0o222
    except OSError:
        return False


def _no_frames(path: Path) -> bool:
    """Whether the ledger's -wal holds no frame: it is missing, or no longer than the
    32-byte header a WAL file starts with (a frame is 24 bytes and a page past it)."""
    try:
        return os.stat(f"{path}-wal").st_size <= 32
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# Pragmas that change the file (or how it is shared) when given a value: refused on a
# read-only handle with a clear error, not the "disk I/O error" SQLite would give.
_WRITING_PRAGMAS = frozenset({
    "application_id", "auto_vacuum", "incremental_vacuum", "journal_mode",
    "journal_size_limit", "locking_mode", "optimize", "page_size", "schema_version",
    "user_version", "wal_checkpoint", "writable_schema",
})


def _read_only_authorizer(action: int, arg1: str | None, arg2: str | None,
                          *_: object) -> int:
    """``query_only`` still lets ATTACH and VACUUM INTO create files elsewhere, and some
    pragmas try to change the file: refuse those on a read-only handle."""
    if action == sqlite3.SQLITE_ATTACH:
        return sqlite3.SQLITE_DENY
    if (action == sqlite3.SQLITE_PRAGMA and arg2 is not None
            and (arg1 or "").lower() in _WRITING_PRAGMAS):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def read_as_lines(path: Path, rows: Iterable[EventRow], wanted: frozenset[str] | None,
                  after_seq: int, until_seq: int | None, *, backwards: bool = False,
                  ) -> Iterator[EventRow]:
    """Stored ``rows`` (in seq order, or newest first when ``backwards``) as a reader gets
    them: each chunk as its lines of ``wanted`` types (None: all) in ``after_seq < seq <=
    until_seq``, every other row kept when it is within ``until_seq`` and of ``wanted``
    (the rows were read as far as ``_lines.widened`` looks).

    Raises:
        InvalidEvent: a chunk does not read as lines (damaged or forged), named as any
            such row is.
    """
    for row in rows:
        if row.type == LINES:
            try:
                lines = list(lines_of(row, wanted, after_seq, until_seq))
            except ChunkError as e:
                raise _invalid(path, row, e) from e
            yield from reversed(lines) if backwards else lines
        elif (until_seq is None or (row.seq or 0) <= until_seq) and (
                wanted is None or row.type in wanted):
            yield row


def _invalid(path: Path, row: EventRow, error: ValueError) -> InvalidEvent:
    from pydantic import ValidationError

    why = _first_error(error) if isinstance(error, ValidationError) else str(error)
    return InvalidEvent(f"{path}: event seq {row.seq} ({row.type}) does not validate: {why}; "
                        "run `evalledger verify`")


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first['msg']}" if where else first["msg"]


__all__ = ["DEFAULT_BUSY_TIMEOUT", "Ledger", "LedgerError", "pick_run", "translate_errors"]
