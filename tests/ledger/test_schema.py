"""The ledger's layout: schema 14's binary envelope, schema 15's leaner completions, and
the migration of older files to them."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunFinished,
    RunStarted,
    TaskOutput,
    verify,
)
from evalledger.ledger._rows import stored_hash, stored_id, text_hash, text_id
from evalledger.ledger._schema import VIEWS
from evalledger.ledger._version import SCHEMA_VERSION
from evalledger.statuses import FinalStatus
from tests.projections.builders import RUN, completed, key, old_ledger, started, usage

# An imported event may carry an id of any shape; only a canonical UUID is packed.
ODD_ID = "legacy:run-7/line-12"


def a_run() -> list[AnyEvent]:
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(i) for i in range(4)])]
    for i in range(4):
        status = FinalStatus.SUCCESS if i % 2 else FinalStatus.FAILURE
        events += [started(key(i)),
                   TaskOutput(run_id=RUN, task_key=key(i), line=f"line {i}", n=1),
                   usage(key(i), 0.01 * i, input_tokens=10 * i),
                   completed(key(i), status)]
    events.append(TaskOutput(event_id=ODD_ID, run_id=RUN, task_key=key(0), line="x", n=2))
    events.append(RunFinished(run_id=RUN, status="completed"))
    return events


def raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def test_a_schema_13_ledger_migrates_with_its_history_and_views_as_they_were(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    events = a_run()
    assert old_ledger(path, events, "0014_binary_envelope") == "13"
    before = {name: raw(path, f"SELECT * FROM {name} ORDER BY 1, 2") for name in VIEWS}
    columns = "seq, event_id, run_id, task_key, type, ts, payload, hash"
    rows_before = raw(path, f"SELECT {columns} FROM events ORDER BY seq")
    assert all(isinstance(r[1], str) and isinstance(r[7], str) for r in rows_before)

    with Ledger(path) as ledger:  # read-write: migrates
        assert ledger.schema_version == SCHEMA_VERSION == 17
        assert [(r.seq, r.event_id, r.run_id, r.task_key, r.type, r.ts, r.payload, r.hash)
                for r in ledger.rows()] == rows_before
        report = verify(ledger)
        assert report.ok, report.lines()
        assert report.events == len(events)

    assert {name: raw(path, f"SELECT * FROM {name} ORDER BY 1, 2") for name in VIEWS} == before
    kinds = raw(path, "SELECT typeof(event_id), length(event_id), typeof(hash), length(hash) "
                      "FROM events ORDER BY seq")
    odd = next(i for i, r in enumerate(rows_before) if r[1] == ODD_ID)
    assert kinds[odd] == ("text", len(ODD_ID), "blob", 32)
    assert set(kinds[:odd] + kinds[odd + 1:]) == {("blob", 16, "blob", 32)}
    # What a plain sqlite3 shell reads: the hash in hex, the id as the UUID it was.
    assert raw(path, "SELECT lower(hex(hash)) FROM events ORDER BY seq") == [
        (r[7],) for r in rows_before]


def test_a_completion_without_tokens_reads_zero_tokens_in_the_views(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    assert old_ledger(path, a_run(), "0015_tokens_left_out_when_none") == "14"
    before = raw(path, "SELECT * FROM task_results ORDER BY 1, 2")
    with Ledger(path) as ledger:  # migrates, then records a completion of no tokens
        ledger.append([started(key(9), run_id="r2"),
                       completed(key(9), FinalStatus.SUCCESS, run_id="r2")])
    assert raw(path, "SELECT payload FROM events WHERE type = 'task.completed' "
                     "AND run_id = 'r2'")[0][0].count("tokens") == 0
    cells = raw(path, "SELECT input_tokens, output_tokens, cache_read_tokens, "
                      "cache_write_tokens, error_message FROM task_results WHERE run_id = 'r2'")
    assert cells == [(0, 0, 0, 0, None)]
    assert raw(path, "SELECT * FROM task_results WHERE run_id = ? ORDER BY 1, 2".replace(
        "?", f"'{RUN}'")) == before


def test_the_covering_lifecycle_index_is_gone_and_the_partial_one_is_used(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        ledger.append(a_run())
        plan = ledger.query("EXPLAIN QUERY PLAN SELECT seq, payload FROM events "
                            f"WHERE run_id = 'x' AND {ledger._lifecycle_where} ORDER BY seq")[1]
    assert "events_lifecycle" in str(plan) and "TEMP B-TREE" not in str(plan)
    [(sql,)] = raw(path, "SELECT sql FROM sqlite_master WHERE name = 'events_lifecycle'")
    assert "payload" not in sql


def test_appended_events_are_stored_packed_and_read_back_as_text(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    events = a_run()
    with Ledger(path) as ledger:
        ledger.append(events)
        again = ledger.append(events)  # a retried batch: every event is already held
        stored = list(ledger.rows())
    assert again == list(range(1, len(events) + 1))
    assert [r.event_id for r in stored] == [e.event_id for e in events]
    assert all(len(r.hash or "") == 64 for r in stored)
    assert raw(path, "SELECT count(*) FROM events WHERE typeof(event_id) = 'blob'") == [
        (len(events) - 1,)]


@given(st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper()) | st.text(max_size=40))
def test_an_event_id_reads_back_as_it_was_written(event_id: str) -> None:
    packed = stored_id(event_id)
    assert text_id(packed) == event_id
    assert isinstance(packed, bytes) == (canonical_uuid(event_id) == event_id)


def canonical_uuid(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


@given(st.binary(min_size=32, max_size=32).map(bytes.hex) | st.text(max_size=70))
def test_a_hash_reads_back_as_it_was_written(hash_: str) -> None:
    assert text_hash(stored_hash(hash_)) == hash_


@pytest.mark.parametrize("column", ["event_id", "hash"])
def test_an_id_or_hash_stored_as_text_under_schema_14_is_named(tmp_path: Path,
                                                               column: str) -> None:
    # The same value as text: the chain holds, but an id so stored escapes the UNIQUE
    # index (text never equals a BLOB), so a forged second event of that id could follow.
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        ledger.append(a_run())
        [row] = ledger.rows(after_seq=1, until_seq=2)
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute(f"UPDATE events SET {column} = ? WHERE seq = 2", [getattr(row, column)])
    with Ledger(path, read_only=True) as ledger:
        report = verify(ledger)
    said = {"event_id": "event_id is stored as TEXT: evalledger stores a UUID as its 16 "
                        "bytes (as text it escapes the UNIQUE index)",
            "hash": "hash is stored as TEXT: evalledger stores its 32 bytes"}[column]
    assert f"seq 2: {said}" in report.lines()
    assert not report.broken_links
