"""The file under a ``Ledger``: only SQLite opens it, and it stays the file that was opened.

- Closing any descriptor of a file drops every POSIX lock the process holds on it. A
  ``Ledger`` that read the file's header with ``open()`` while another connection of
  the process was open dropped that connection's lock: the next process to close
  the database deleted ``-wal``/``-shm`` under it, and it never saw another event.
- A file deleted, moved or replaced under an open ledger took every later append with
  it, reported committed: each commit now checks that the path still names the file.
- A file opened read-only may be anyone's (merge's other ledger): a 28 KB file whose
  payload column was generated (computed on every read) made 300 MB a row and ended a
  merge in a MemoryError; now its columns are checked before a row is read, and no
  value is built from another's file past ``MAX_VALUE_BYTES``.
"""

from __future__ import annotations

import gc
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import (
    Ledger,
    LedgerGone,
    LedgerIOError,
    LedgerNotFound,
    NotALedger,
    verify,
)
from evalledger.ledger._store import MAX_VALUE_BYTES

from .runs import short_run


def _append_elsewhere(db: Path, run_id: str) -> None:
    """Append a run from another process, which then closes the ledger."""
    code = ("import sys; from tests.ledger.runs import short_run; "
            "from evalledger.ledger import Ledger; "
            "l = Ledger(sys.argv[1]); l.append(short_run(sys.argv[2])); l.close()")
    subprocess.run([sys.executable, "-c", code, str(db), run_id], check=True, timeout=60,
                   cwd=Path(__file__).parents[2])


def test_opening_a_ledger_keeps_the_locks_of_the_others_open_in_the_process(
    db_path: Path,
) -> None:
    with Ledger(db_path) as ledger:
        ledger.append(short_run("first"))
    reader = Ledger(db_path, read_only=True)
    try:
        assert reader.run_ids() == ["first"]
        for _ in range(3):  # other handles come and go (a viewer opens one per thread)
            Ledger(db_path, read_only=True).close()
        wal = os.stat(f"{db_path}-wal").st_ino
        _append_elsewhere(db_path, "second")
        # The other process closed last but one: the reader's shared lock kept it from
        # checkpointing and deleting the -wal the reader still maps.
        assert os.stat(f"{db_path}-wal").st_ino == wal
        assert reader.run_ids() == ["first", "second"]
    finally:
        reader.close()


@pytest.mark.parametrize("size", [1, 100, 511])
def test_a_file_shorter_than_a_page_is_refused_unread(db_path: Path, size: int) -> None:
    db_path.write_bytes(b"SQLite format 3\x00".ljust(size, b"\x00")[:size])
    with pytest.raises(NotALedger, match="not a SQLite database"):
        Ledger(db_path)
    assert db_path.stat().st_size == size


def _crafted(path: Path, events: str, *, meta: str = "value TEXT NOT NULL",
             version: object = "17") -> Path:
    """A file shaped as a ledger but for ``events`` (its columns) and ``meta`` (its
    value column), holding ``version`` as its schema_version."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"CREATE TABLE meta (key TEXT PRIMARY KEY, {meta})")
        conn.execute("INSERT INTO meta VALUES ('ledger_id', "
                     "'11111111-1111-4111-8111-111111111111'), ('schema_version', ?)",
                     [version])
        conn.execute(f"CREATE TABLE events ({events})")
        conn.commit()
    return path


_EVENTS = ("seq INTEGER PRIMARY KEY, event_id BLOB NOT NULL UNIQUE, run_id TEXT NOT NULL, "
           "task_key TEXT, type TEXT NOT NULL, ts TEXT NOT NULL, {payload}, hash BLOB NOT NULL")


@pytest.mark.parametrize("payload", [
    "payload TEXT GENERATED ALWAYS AS (printf('%.*c', 1000, 'x')) VIRTUAL",
    "payload TEXT GENERATED ALWAYS AS ('x') STORED",
])
def test_a_column_no_ledger_has_is_refused_before_a_row_is_read(
        tmp_path: Path, payload: str) -> None:
    """A generated payload is computed on every read: a 28 KB file of 50 rows made 300 MB
    each (the merge that read them ended in a MemoryError)."""
    db = _crafted(tmp_path / "crafted.db", _EVENTS.format(payload=payload))
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO events (seq, event_id, run_id, type, ts, hash) "
                     "VALUES (1, x'00', 'r', 'run.started', 't', x'00')")
        conn.commit()
    with pytest.raises(NotALedger, match=r"\(events\.payload is a generated or hidden column\)"):
        Ledger(db, read_only=True)


@pytest.mark.parametrize(("columns", "says"), [
    ("x", "events has a column x of no type where a ledger has seq INTEGER"),
    (_EVENTS.format(payload="payload BLOB NOT NULL"),
     "events has a column payload BLOB where a ledger has payload TEXT"),
    (_EVENTS.format(payload="payload TEXT") + ", extra TEXT", "events has 9 columns, a ledger's 8"),
])
def test_an_events_table_of_another_shape_is_refused(tmp_path: Path, columns: str,
                                                     says: str) -> None:
    with pytest.raises(NotALedger, match=f"\\({says}\\)"):
        Ledger(_crafted(tmp_path / "crafted.db", columns), read_only=True)


def test_another_s_file_builds_no_value_past_the_limit(db_path: Path) -> None:
    """SQLite's own bound is 1e9 bytes: a value computed as it is read (here by printf)
    was built whole from merge's other ledger."""
    Ledger(db_path).close()
    with Ledger(db_path, read_only=True, untrusted=True) as ledger:
        # printf stops at the bound (a NULL); a blob that big is an error, said in one line.
        assert ledger.query("SELECT printf('%.*c', ?, 'x') IS NULL",
                            [MAX_VALUE_BYTES + 1])[1] == [(1,)]
        with pytest.raises(LedgerIOError, match="string or blob too big: a value over 256 MiB"):
            ledger.query("SELECT length(zeroblob(?))", [MAX_VALUE_BYTES + 1])
    with Ledger(db_path, read_only=True) as ledger:  # the user's own: SQLite's bound
        assert ledger.query("SELECT length(zeroblob(?))", [MAX_VALUE_BYTES + 1])[1] == [
            (MAX_VALUE_BYTES + 1,)]


@pytest.mark.parametrize("version", [float("inf"), "\u0661\u0667", 17.5, "-1"],
                         ids=["REAL inf", "Arabic-Indic 17", "17.5", "-1"])
def test_a_schema_version_a_ledger_never_writes_is_not_a_ledger(tmp_path: Path,
                                                                version: object) -> None:
    """A REAL inf made int() raise OverflowError: a traceback from every command."""
    db = _crafted(tmp_path / "crafted.db", _EVENTS.format(payload="payload TEXT NOT NULL"),
                  meta="value", version=version)
    with pytest.raises(NotALedger, match="has a corrupt schema_version"):
        Ledger(db)


def _delete(db: Path) -> None:
    db.unlink()


def _move(db: Path) -> None:
    db.rename(db.with_name("moved.db"))


def _delete_folder(db: Path) -> None:
    shutil.rmtree(db.parent)


def _replace(db: Path) -> None:
    """A backup of the ledger (taken by SQLite: its events are still in the -wal) renamed
    over it, as a restore does."""
    copy = db.with_name("copy.db")
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    os.replace(copy, db)


def _delete_wal(db: Path) -> None:
    Path(f"{db}-wal").unlink()


CHANGES = {"deleted": _delete, "moved": _move, "folder deleted": _delete_folder,
           "replaced": _replace, "-wal deleted": _delete_wal}


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_append_to_a_ledger_that_is_no_longer_at_its_path_is_refused(
    tmp_path: Path, change: str
) -> None:
    db = tmp_path / "folder" / "l.db"
    db.parent.mkdir()
    ledger = Ledger(db)
    try:
        ledger.append(short_run("before"))
        CHANGES[change](db)
        with pytest.raises(LedgerGone) as gone:
            ledger.append(short_run("after"))
        message = str(gone.value)
        assert str(db) in message and "\n" not in message, message
        with pytest.raises(LedgerGone):  # and every append after it
            ledger.append(short_run("later"))
        assert "after" not in ledger.run_ids()  # rolled back, not committed
    finally:
        ledger.close()
    if change == "replaced":  # the file now at the path got nothing either
        with Ledger(db, read_only=True) as there:
            assert there.run_ids() == ["before"]


def test_a_ledger_left_in_place_appends_as_before(db_path: Path) -> None:
    with Ledger(db_path) as ledger:
        for i in range(3):
            ledger.append(short_run(f"run-{i}"))
        ledger.check_file()
        assert ledger.run_ids() == ["run-0", "run-1", "run-2"]


CREATOR = """\
import sys, time
from pathlib import Path
from evalledger.ledger import Ledger
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
with Ledger(sys.argv[1]) as ledger:
    print(ledger.ledger_id)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_processes_creating_one_ledger_at_once_all_open_the_same_one(tmp_path: Path) -> None:
    db, go = tmp_path / "l.db", tmp_path / "go"
    creators = [subprocess.Popen([sys.executable, "-c", CREATOR, str(db), str(go)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(4)]
    try:
        go.touch()
        results = [p.communicate(timeout=60) for p in creators]
    finally:
        for p in creators:
            p.kill()
    assert [p.returncode for p in creators] == [0] * 4, results
    with Ledger(db, read_only=True) as ledger:
        assert {out.strip() for out, _ in results} == {ledger.ledger_id}
        assert verify(ledger).ok


# -- a ledger whose creation was cut off --------------------------------------------------------


def _empty(db: Path) -> None:
    db.write_bytes(b"")


def _wal_no_table(db: Path) -> None:
    """Killed after the switch to WAL, before the first migration committed."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA page_size = 8192")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


def _migrations_table_only(db: Path) -> None:
    """sqlite-utils' bookkeeping made, no migration applied yet."""
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

    conn = sqlite3.connect(db, isolation_level=None)
    Migrations("evalledger").ensure_migrations_table(Database(conn))
    conn.close()


HALF_MADE = {"empty": _empty, "WAL, no table": _wal_no_table,
             "migrations table only": _migrations_table_only}


@pytest.mark.parametrize("make", list(HALF_MADE))
def test_a_file_with_no_table_yet_is_no_ledger_to_a_reader_and_a_writer_finishes_it(
    db_path: Path, make: str
) -> None:
    HALF_MADE[make](db_path)
    with pytest.raises(LedgerNotFound) as none:
        Ledger(db_path, read_only=True)
    assert str(none.value).startswith(f"no ledger at {db_path} ("), none.value
    assert "\n" not in str(none.value)
    with Ledger(db_path) as ledger:
        ledger.append(short_run("r"))
    with Ledger(db_path, read_only=True) as ledger:
        assert ledger.run_ids() == ["r"]
        assert verify(ledger).ok


HOT_JOURNAL = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t (x BLOB)")
conn.execute("INSERT INTO t VALUES (randomblob(100000))")
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN")
conn.execute("UPDATE t SET x = randomblob(100000)")  # spills to the file: the journal is hot
print("ready", flush=True)
sys.stdin.readline()
"""


def test_a_file_left_mid_write_by_a_killed_process_is_one_line_to_a_reader(
    db_path: Path,
) -> None:
    """A hot rollback journal (only ever made by a creation before this version, or by
    another program): a read-only open cannot roll it back, and says so."""
    writer = subprocess.Popen([sys.executable, "-c", HOT_JOURNAL, str(db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        writer.kill()
        writer.wait(60)
    finally:
        writer.kill()
        writer.communicate()
    assert Path(f"{db_path}-journal").exists()
    with pytest.raises(LedgerIOError) as failed:
        Ledger(db_path, read_only=True)
    message = str(failed.value)
    assert str(db_path) in message and "killed" in message and "\n" not in message, message


def test_a_reader_left_open_past_its_ledger_closes_without_a_traceback(
    db_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A caller that raised mid-read leaves its reader to the collector, which closes it
    # after the ledger: nothing may print after the caller's one-line error.
    from evalledger.ledger import RunStarted

    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with Ledger(db_path) as ledger:
        ledger.append([RunStarted(run_id="r1")])
        readers = [ledger.lite_events("r1", types={"run.started"}), ledger.events("r1"),
                   ledger.rows("r1")]
        for reader in readers:
            next(iter(reader))
    for reader in readers:
        reader.close()  # each is a generator
    del readers
    gc.collect()
    assert unraisable == []
