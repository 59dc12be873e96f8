"""Tampering with a ledger file behind evalledger's back, and what ``verify`` says.

Every case edits a real ledger with plain ``sqlite3`` (as an attacker with the file
would), then runs ``verify``, with and without anchors kept elsewhere. A chain cut
short or rewritten from some row on is a valid chain on its own: without an anchor
that is not detectable (pinned below, and said in the README); with one it is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from evalledger.ledger import (
    GENESIS,
    Anchor,
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    verify,
)
from evalledger.ledger._chain import chain_rows
from evalledger.ledger._events import EventRow
from evalledger.ledger._rows import text_hash, text_id
from evalledger.statuses import FinalStatus, RunStatus

RUN = "r1"
KEYS = [f"default/t{i}/00" for i in range(3)]


@pytest.fixture
def built(db_path: Path) -> tuple[Path, Anchor, Anchor]:
    """A ledger of one finished run; the run's anchor (as run.json holds it) and a
    checkpoint of the whole ledger."""
    with Ledger(db_path) as ledger:
        ledger.append([RunStarted(run_id=RUN, planned=KEYS, ledger_id=ledger.ledger_id)])
        for key in KEYS:
            ledger.append([
                TaskStarted(run_id=RUN, task_key=key, task_id=key.split("/")[1]),
                *(TaskOutput(run_id=RUN, task_key=key, line=f"line {n}", n=n)
                  for n in range(1, 4)),
                TaskCompleted(run_id=RUN, task_key=key, final_status=FinalStatus.FAILURE,
                              category="failed"),
            ])
        ledger.append([RunFinished(run_id=RUN, status=RunStatus.COMPLETED)])
        run_anchor, checkpoint = ledger.anchor(RUN), ledger.anchor()
    assert run_anchor is not None and checkpoint is not None
    return db_path, run_anchor, checkpoint


def tamper(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def rechain_from(path: Path, first: int, edit: Callable[[str], str] | None = None) -> None:
    """Rewrite rows from ``first`` on (their payloads through ``edit``) and recompute every
    later hash: a chain that is valid on its own."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("DROP TRIGGER events_no_update")
        prev = GENESIS if first == 1 else text_hash(conn.execute(
            "SELECT hash FROM events WHERE seq = ?", [first - 1]).fetchone()[0])
        rows = conn.execute(
            "SELECT event_id, run_id, task_key, type, ts, payload FROM events WHERE seq >= ? "
            "ORDER BY seq", [first]).fetchall()
        edited = [EventRow(text_id(row[0]), *row[1:5], edit(row[5]) if edit else row[5])
                  for row in rows]
        for seq, *_, payload, hash_ in chain_rows(prev, first, edited):
            conn.execute("UPDATE events SET payload = ?, hash = ? WHERE seq = ?",
                         [payload, hash_, seq])
        conn.execute("CREATE TRIGGER events_no_update BEFORE UPDATE ON events "
                     "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END")
    finally:
        conn.close()


def lines(path: Path, *anchors: Anchor) -> list[str]:
    with Ledger(path, read_only=True) as ledger:
        report = verify(ledger, anchors)
    return report.lines() if not report.ok else []


NO_OP_TRIGGERS = (
    "DROP TRIGGER events_no_update", "DROP TRIGGER events_no_delete",
    "CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT 1; END",
    "CREATE TRIGGER events_no_delete BEFORE DELETE ON events BEGIN SELECT 1; END",
)

# name -> (statements, a phrase verify must print)
CASES: dict[str, tuple[tuple[str, ...], str]] = {
    "payload edited": (("DROP TRIGGER events_no_update",
                        "UPDATE events SET payload = replace(payload, 'line 2', 'line X') "
                        "WHERE seq = 4"), "hash chain broken at seq 4"),
    "row deleted": (("DROP TRIGGER events_no_delete", "DELETE FROM events WHERE seq = 5"),
                    "gap in seq: 4 is followed by 6"),
    "do-nothing triggers": (NO_OP_TRIGGERS, "trigger events_no_update differs"),
    "do-nothing triggers, then an edit": (
        (*NO_OP_TRIGGERS, "UPDATE events SET payload = replace(payload, 'FAILURE', 'SUCCESS')"
         " WHERE type = 'task.completed'"), "hash chain broken"),
    "trigger dropped": (("DROP TRIGGER events_no_delete",),
                        "trigger events_no_delete is missing"),
    "a lying view": (("DROP VIEW task_results",
                      "CREATE VIEW task_results AS SELECT run_id, task_key, 'SUCCESS' AS "
                      "final_status FROM task_attempts"), "view task_results differs"),
    "index dropped": (("DROP INDEX events_by_run_task",), "index events_by_run_task is missing"),
    "trigger added": (("CREATE TRIGGER sneaky AFTER INSERT ON events BEGIN SELECT 1; END",),
                      "unexpected trigger sneaky"),
    "table added": (("CREATE TABLE notes (x)",), "unexpected table notes"),
    "ledger id changed": (("UPDATE meta SET value = '00000000-0000-4000-8000-000000000000' "
                           "WHERE key = 'ledger_id'",), "the ledger's identity was changed"),
    "ledger id not a uuid": (("UPDATE meta SET value = 'mine' WHERE key = 'ledger_id'",),
                             "meta.ledger_id 'mine' is not a UUID"),
    "schema version changed": (("UPDATE meta SET value = '3' WHERE key = 'schema_version'",),
                               "meta.schema_version is '3'"),
    "meta key added": (("INSERT INTO meta VALUES ('note', 'x')",), "unexpected meta.note"),
    "migration record deleted": (
        ("DELETE FROM _sqlite_migrations WHERE name = '0017_chunked_lines'",),
        "but the ledger's 16 migrations make it 16"),
}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("case", sorted(CASES))
def test_tampering_is_caught_without_an_anchor(
    built: tuple[Path, Anchor, Anchor], case: str
) -> None:
    path, _, _ = built
    statements, said = CASES[case]
    assert lines(path) == []
    tamper(path, *statements)
    found = lines(path)
    assert found and found[0].startswith("FAILED"), found
    assert any(said in line for line in found), found


def test_an_invalid_payload_under_a_valid_chain_is_caught(
    built: tuple[Path, Anchor, Anchor]
) -> None:
    path, _, _ = built
    rechain_from(path, 5, lambda payload: payload.replace('"n":', '"n":"x","m":'))
    found = lines(path)
    assert any("seq 5: payload does not validate" in line for line in found), found


@pytest.mark.parametrize("how", ["tail cut", "chain rewritten", "whole chain rewritten"])
def test_a_history_rewritten_whole_needs_an_anchor(
    built: tuple[Path, Anchor, Anchor], how: str
) -> None:
    path, run_anchor, checkpoint = built
    if how == "tail cut":
        tamper(path, "DROP TRIGGER events_no_delete",
               f"DELETE FROM events WHERE seq > {checkpoint.seq - 2}",
               "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
               "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END")
        said = f"the ledger ends at seq {checkpoint.seq - 2}: its tail was cut"
    else:
        first = 1 if how == "whole chain rewritten" else 7
        rechain_from(path, first, lambda payload: payload.replace("line ", "LINE "))
        said = "history up to there was rewritten"
    assert lines(path) == []  # the chain alone cannot tell: documented
    for anchor in (run_anchor, checkpoint):
        found = lines(path, anchor)
        assert any(said in line for line in found), found


def test_an_anchor_of_another_ledger_fails(
    built: tuple[Path, Anchor, Anchor], tmp_path: Path
) -> None:
    path, run_anchor, _ = built
    with Ledger(tmp_path / "other.db") as other:
        other.append([RunStarted(run_id="x")])
        foreign = other.anchor()
    assert foreign is not None
    found = lines(path, foreign)
    assert any(f"anchored in ledger {foreign.ledger_id}" in line for line in found), found
    assert lines(path, run_anchor) == []


def test_anchors_load_from_run_json_and_checkpoint_files(
    built: tuple[Path, Anchor, Anchor], tmp_path: Path
) -> None:
    _, run_anchor, checkpoint = built
    (tmp_path / "run.json").write_text('{"run_id": "r1", "anchor": '
                                       + run_anchor.model_dump_json() + "}")
    (tmp_path / "cp.json").write_text(checkpoint.model_dump_json())
    assert Anchor.load(tmp_path / "run.json") == run_anchor
    assert Anchor.load(tmp_path / "cp.json") == checkpoint
    (tmp_path / "bad.json").write_text('{"run_id": "r1"}')
    for bad in ("bad.json", "missing.json"):
        with pytest.raises(ValueError, match=bad):
            Anchor.load(tmp_path / bad)


def test_the_run_anchor_is_its_last_lifecycle_event(built: tuple[Path, Anchor, Anchor]) -> None:
    path, run_anchor, checkpoint = built
    with Ledger(path, read_only=True) as ledger:
        [finished] = ledger.rows(RUN, types={"run.finished"})
        assert (run_anchor.seq, run_anchor.hash) == (finished.seq, finished.hash)
        assert run_anchor.ledger_id == checkpoint.ledger_id == ledger.ledger_id
        # As of an earlier event: the last lifecycle event at or before it.
        early = ledger.anchor(RUN, until_seq=4)
        assert early is not None and early.seq == 2
        assert ledger.anchor("no-such-run") is None
