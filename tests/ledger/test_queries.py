"""The named read queries over rows no writer of this version validated (a file edited
by hand): a payload that holds no object where an event holds one reads as none, never
as a crash."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import Ledger, RunStarted
from evalledger.ledger._page_queries import completion_environments, run_imported, usage_lines
from evalledger.ledger._queries import imported_runs

# Each payload holds a string, a list or nothing where an event holds an object; the
# first string is an object's JSON text, which json_extract hands back bare.
FORGED = [
    ("e1", None, "run.started", '{"imported":"{\\"source\\":\\"/etc\\"}"}'),
    ("e2", "k", "task.completed", '{"attempt":1,"environment_info":"x"}'),
    ("e3", "k", "task.event", '{"data":"usage","n":1}'),
    ("e4", "k", "task.event", '["usage"]'),
]


def forged(tmp_path: Path) -> Path:
    """A ledger holding the ``FORGED`` rows of run ``r1``."""
    db = tmp_path / "ledger.db"
    Ledger(db).close()
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO events (event_id, run_id, task_key, type, ts, payload, hash) "
            "VALUES (?, 'r1', ?, ?, '2026-01-01T00:00:00Z', ?, 'x')", FORGED)
    conn.close()
    return db


def test_a_payload_that_holds_no_object_where_one_belongs_reads_as_none(tmp_path: Path) -> None:
    with Ledger(forged(tmp_path), read_only=True) as ledger:
        assert imported_runs(ledger, ledger.last_seq()) == {}
        assert run_imported(ledger, "r1") is None
        assert completion_environments(ledger, "r1") == [("k", 1, {})]
        assert [data for _, _, data, _ in usage_lines(ledger, "r1", "k")] == [None, None]


@pytest.mark.parametrize("imported", ['"x"', "[1, 2]", "7", '"{not json"'])
def test_an_imported_record_that_is_no_object_is_not_believed(tmp_path: Path,
                                                              imported: str) -> None:
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id="good", planned=[], imported={"source": "/old"})])
    with closing(sqlite3.connect(db)) as raw:
        raw.execute(
            "INSERT INTO events (event_id, run_id, task_key, type, ts, payload, hash) "
            "VALUES ('forged', 'bad', NULL, 'run.started', '2026-01-01T00:00:00Z', ?, 'x')",
            [f'{{"planned": [], "imported": {imported}}}'])
        raw.commit()
    with Ledger(db, read_only=True) as ledger:
        assert imported_runs(ledger, ledger.last_seq()) == {"good": {"source": "/old"}}
        assert run_imported(ledger, "bad") is None
        assert run_imported(ledger, "good") == {"source": "/old"}


def test_a_run_started_twice_is_imported_as_its_first_start_says(tmp_path: Path) -> None:
    """Shards of one run merged: each recorded a run.started; the first one counts, as
    the runs view and the report read it."""
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([RunStarted(run_id="r", planned=[], imported={"source": "/first"})])
        ledger.append([RunStarted(run_id="r", planned=[], imported={"source": "/second"})])
        assert imported_runs(ledger, ledger.last_seq()) == {"r": {"source": "/first"}}
        assert run_imported(ledger, "r") == {"source": "/first"}
