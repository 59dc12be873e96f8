"""Named read queries over rows an adversary may have written: a ``run.started`` whose
``imported`` is no JSON object (inserted by hand, past the models) is not believed,
and it takes no reader down."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import Ledger, RunStarted
from evalledger.ledger._page_queries import run_imported
from evalledger.ledger._queries import imported_runs


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
