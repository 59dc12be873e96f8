"""The named read queries over rows no writer of this version validated (a file edited
by hand; a merge appends another ledger's rows without decoding them): a payload that
holds no object where an event holds one reads as none, never as a crash."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from evalledger.ledger import Ledger
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
        assert [data for _, _, data in usage_lines(ledger, "r1", "k")] == [None, None]
