"""Bad input to the ledger: each case raises its own class, says so in one line that
names the file, and writes nothing.

Everything here runs against real files in a temporary folder, and the lock test
holds SQLite's write lock from a real second process.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import (
    SCHEMA_VERSION,
    AppendOnlyViolation,
    EventRow,
    Ledger,
    LedgerError,
    LedgerIOError,
    LedgerLocked,
    LedgerNotFound,
    LedgerReadOnly,
    LedgerTooNew,
    NotALedger,
    RunFinished,
    RunStarted,
    TaskOutput,
    verify,
)
from evalledger.ledger._store import translate_errors
from evalledger.statuses import RunStatus

APPEND_ONLY = "events are append-only"


# -- helpers ---------------------------------------------------------------------------------


def _events(run_id: str = "run-1") -> list:
    return [
        RunStarted(run_id=run_id, planned=["t1"]),
        TaskOutput(run_id=run_id, task_key="t1", line="hello", n=1),
        RunFinished(run_id=run_id, status=RunStatus.COMPLETED),
    ]


def _make_ledger(path: Path, batches: int = 1) -> None:
    with Ledger(path) as ledger:
        for i in range(batches):
            ledger.append(_events(f"run-{i}"))


def _assert_one_line_naming(error: BaseException, path: Path) -> None:
    message = str(error)
    assert message, "empty message"
    assert "\n" not in message and "\r" not in message, f"message is not one line: {message!r}"
    assert str(path) in message, f"message does not name {path}: {message!r}"


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def _raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection in autocommit mode, like an outside tool would use."""
    return sqlite3.connect(path, isolation_level=None)


def _raw_tables(path: Path) -> set[str]:
    with closing(_raw(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _raw_state(path: Path) -> tuple[list[tuple], dict[str, str]]:
    """Every stored row and the whole meta table, read without evalledger."""
    with closing(_raw(path)) as conn:
        rows = conn.execute("SELECT * FROM events ORDER BY seq").fetchall()
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    return rows, meta


# -- a file that is not a SQLite database ----------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize(
    "content",
    [
        b"hello",
        b"this is a plain text file, not a database\n" * 40,
        b"SQLite format 3\x00 but truncated",
    ],
    ids=["short-text", "long-text", "fake-header"],
)
def test_text_file_is_not_a_ledger(db_path: Path, read_only: bool, content: bytes) -> None:
    db_path.write_bytes(content)
    before = _listing(db_path.parent)

    with pytest.raises(NotALedger) as info:
        Ledger(db_path, read_only=read_only)

    _assert_one_line_naming(info.value, db_path)
    assert db_path.read_bytes() == content
    assert _listing(db_path.parent) == before, "a -wal/-shm or other file was left behind"


# -- a SQLite database of something else ------------------------------------------------------


@pytest.fixture
def foreign_db(db_path: Path) -> Path:
    with closing(_raw(db_path)) as conn:
        conn.execute("CREATE TABLE foo (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO foo (name) VALUES ('bar')")
    return db_path


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_foreign_database_is_not_a_ledger(foreign_db: Path, read_only: bool) -> None:
    content = foreign_db.read_bytes()
    before = _listing(foreign_db.parent)

    with pytest.raises(NotALedger) as info:
        Ledger(foreign_db, read_only=read_only)

    _assert_one_line_naming(info.value, foreign_db)
    assert foreign_db.read_bytes() == content
    assert _listing(foreign_db.parent) == before
    assert _raw_tables(foreign_db) == {"foo"}, "events/meta were added to someone else's db"
    with closing(_raw(foreign_db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT name FROM foo").fetchall() == [("bar",)]


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_foreign_database_with_meta_and_events_tables(db_path: Path, read_only: bool) -> None:
    with closing(_raw(db_path)) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
    content = db_path.read_bytes()

    try:
        with pytest.raises(NotALedger) as info:
            Ledger(db_path, read_only=read_only).close()
        _assert_one_line_naming(info.value, db_path)
    finally:
        assert db_path.read_bytes() == content


# -- a ledger written by a newer evalledger ---------------------------------------------------


@pytest.fixture
def too_new(db_path: Path) -> Path:
    _make_ledger(db_path)
    with closing(_raw(db_path)) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    return db_path


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_newer_schema_is_refused(too_new: Path, read_only: bool) -> None:
    rows, meta = _raw_state(too_new)
    content = too_new.read_bytes()
    assert meta["schema_version"] == "99"

    with pytest.raises(LedgerTooNew) as info:
        Ledger(too_new, read_only=read_only)

    _assert_one_line_naming(info.value, too_new)
    assert "99" in str(info.value)
    assert too_new.read_bytes() == content
    assert _raw_state(too_new) == (rows, meta)
    assert len(rows) == 3


def test_newer_schema_refused_again_after_a_failed_open(too_new: Path) -> None:
    """A refused read-write open does not half-migrate the file for the next try."""
    for _ in range(2):
        with pytest.raises(LedgerTooNew):
            Ledger(too_new)
    assert "_sqlite_migrations" in _raw_tables(too_new)
    assert _raw_state(too_new)[1]["schema_version"] == "99"


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_garbled_schema_version_is_a_ledger_error(db_path: Path, read_only: bool) -> None:
    _make_ledger(db_path)
    with closing(_raw(db_path)) as conn:
        conn.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")

    with pytest.raises(LedgerError) as info:
        Ledger(db_path, read_only=read_only)
    _assert_one_line_naming(info.value, db_path)


# -- a ledger locked by another process -------------------------------------------------------

_HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute(sys.argv[2])
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
def lock_holder(request: pytest.FixtureRequest, db_path: Path) -> Iterator[subprocess.Popen]:
    """Another real process holding the ledger's write lock until it is killed."""
    _make_ledger(db_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(db_path), request.param],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_locked_past_busy_timeout(db_path: Path, lock_holder: subprocess.Popen) -> None:
    before = _raw_state(db_path)[0]

    # Opening only reads (the file is already migrated and in WAL mode): that works.
    with Ledger(db_path, busy_timeout=0.3) as ledger:
        started = time.monotonic()
        with pytest.raises(LedgerLocked) as info:
            ledger.append(_events("run-blocked"))
        waited = time.monotonic() - started

        _assert_one_line_naming(info.value, db_path)
        assert "0.3s" in str(info.value)
        assert waited >= 0.25, f"gave up after {waited:.3f}s, before the busy timeout"
        assert waited < 10
        assert ledger.count() == len(before)

        lock_holder.kill()
        lock_holder.wait(timeout=10)

        # Nothing of the refused batch was written, and the same handle works again.
        assert ledger.count() == len(before)
        assert _raw_state(db_path)[0] == before
        assert ledger.append(_events("run-after")) == [4, 5, 6]
        assert verify(ledger).ok


def test_read_only_readers_are_not_blocked_by_the_lock(
    db_path: Path, lock_holder: subprocess.Popen
) -> None:
    with Ledger(db_path, read_only=True, busy_timeout=0.3) as ledger:
        assert ledger.count() == 3
        assert verify(ledger).ok


# -- missing file, directory, missing folder --------------------------------------------------


def test_missing_file_read_only(db_path: Path) -> None:
    assert not db_path.exists()

    with pytest.raises(LedgerNotFound) as info:
        Ledger(db_path, read_only=True)

    _assert_one_line_naming(info.value, db_path)
    assert not db_path.exists()
    assert _listing(db_path.parent) == set()


@pytest.mark.parametrize(
    ("read_only", "error"),
    [(False, NotALedger), (True, NotALedger)],
    ids=["read-write", "read-only"],
)
def test_directory_as_ledger_path(tmp_path: Path, read_only: bool, error: type) -> None:
    folder = tmp_path / "a-folder.db"
    folder.mkdir()

    with pytest.raises(error) as info:
        Ledger(folder, read_only=read_only)

    _assert_one_line_naming(info.value, folder)
    assert folder.is_dir()
    assert _listing(folder) == set()
    assert _listing(tmp_path) == {"a-folder.db"}


def test_missing_parent_folder(tmp_path: Path) -> None:
    path = tmp_path / "no-such-folder" / "evalledger.db"

    with pytest.raises(LedgerIOError) as info:
        Ledger(path)

    _assert_one_line_naming(info.value, path)
    assert _listing(tmp_path) == set()


# -- read-only ledgers refuse writes ----------------------------------------------------------


def test_append_to_read_only_ledger(db_path: Path) -> None:
    _make_ledger(db_path)
    rows, meta = _raw_state(db_path)

    with Ledger(db_path, read_only=True) as ledger:
        with pytest.raises(LedgerReadOnly) as info:
            ledger.append(_events("run-2"))
        _assert_one_line_naming(info.value, db_path)
        assert ledger.count() == len(rows)

    assert _raw_state(db_path) == (rows, meta)


def test_empty_append_to_read_only_ledger_is_still_refused(db_path: Path) -> None:
    _make_ledger(db_path)
    with Ledger(db_path, read_only=True) as ledger, pytest.raises(LedgerReadOnly):
        ledger.append([])


def test_raw_write_through_read_only_handle_translates(db_path: Path) -> None:
    """SQLite's own refusal (query_only) becomes LedgerReadOnly at the store boundary."""
    _make_ledger(db_path)
    rows, meta = _raw_state(db_path)

    with Ledger(db_path, read_only=True) as ledger:
        with pytest.raises(LedgerReadOnly) as info, translate_errors(ledger.path):
            ledger.db.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
        _assert_one_line_naming(info.value, db_path)

    assert _raw_state(db_path) == (rows, meta)


# -- events are append-only -------------------------------------------------------------------

_EDITS = {
    "update-payload": 'UPDATE events SET payload = \'{"line":"forged","n":1}\' WHERE seq = 2',
    "update-hash": "UPDATE events SET hash = 'x' WHERE seq = 2",
    "update-all": "UPDATE events SET run_id = 'other'",
    "delete-one": "DELETE FROM events WHERE seq = 2",
    "delete-all": "DELETE FROM events",
}


@pytest.mark.parametrize("sql", list(_EDITS.values()), ids=list(_EDITS))
def test_edits_through_ledger_db_are_refused(ledger: Ledger, sql: str) -> None:
    ledger.append(_events())
    before = list(ledger.rows())

    with pytest.raises(sqlite3.IntegrityError, match=APPEND_ONLY):
        ledger.db.execute(sql)

    assert list(ledger.rows()) == before
    assert not ledger._conn.in_transaction
    assert verify(ledger).ok


@pytest.mark.parametrize("sql", list(_EDITS.values()), ids=list(_EDITS))
def test_edits_through_raw_sqlite_are_refused(db_path: Path, sql: str) -> None:
    _make_ledger(db_path)
    rows, meta = _raw_state(db_path)

    with closing(sqlite3.connect(db_path)) as conn:  # the module's default: implicit BEGIN
        with pytest.raises(sqlite3.IntegrityError, match=APPEND_ONLY):
            conn.execute(sql)
        conn.commit()

    assert _raw_state(db_path) == (rows, meta)
    with Ledger(db_path, read_only=True) as ledger:
        assert verify(ledger).ok


@pytest.mark.parametrize("sql", list(_EDITS.values()), ids=list(_EDITS))
def test_append_only_violation_at_the_store_boundary(ledger: Ledger, sql: str) -> None:
    ledger.append(_events())
    before = list(ledger.rows())

    with pytest.raises(AppendOnlyViolation) as info, translate_errors(ledger.path):
        ledger.db.execute(sql)

    _assert_one_line_naming(info.value, ledger.path)
    assert APPEND_ONLY in str(info.value)
    assert list(ledger.rows()) == before


def test_refused_edit_inside_a_batch_rolls_back_nothing_else(ledger: Ledger) -> None:
    """The trigger aborts the statement, not the ledger: appends keep working."""
    ledger.append(_events())
    with pytest.raises(sqlite3.IntegrityError, match=APPEND_ONLY):
        ledger.db.execute("DELETE FROM events WHERE seq = 3")
    assert ledger.append(_events("run-2")) == [4, 5, 6]
    rows = list(ledger.rows())
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(r, EventRow) and r.seq and r.hash for r in rows)
    assert verify(ledger).ok


# -- schema version and identity --------------------------------------------------------------


def test_fresh_file_is_stamped(db_path: Path) -> None:
    with Ledger(db_path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        ledger_id = ledger.ledger_id
    assert uuid.UUID(ledger_id)
    assert _raw_tables(db_path) >= {"events", "meta", "_sqlite_migrations"}
    meta = _raw_state(db_path)[1]
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    assert meta["ledger_id"] == ledger_id
    assert meta["created_at"]


def test_reopening_keeps_identity_and_migrates_once(db_path: Path) -> None:
    _make_ledger(db_path)
    rows, meta = _raw_state(db_path)
    with closing(_raw(db_path)) as conn:
        migrations = conn.execute("SELECT * FROM _sqlite_migrations").fetchall()

    for read_only in (False, True, False):
        with Ledger(db_path, read_only=read_only) as ledger:
            assert ledger.ledger_id == meta["ledger_id"]
            assert ledger.schema_version == SCHEMA_VERSION

    assert _raw_state(db_path) == (rows, meta)
    with closing(_raw(db_path)) as conn:
        assert conn.execute("SELECT * FROM _sqlite_migrations").fetchall() == migrations


def test_two_fresh_ledgers_have_different_ids(tmp_path: Path) -> None:
    with Ledger(tmp_path / "a.db") as a, Ledger(tmp_path / "b.db") as b:
        assert a.ledger_id != b.ledger_id
