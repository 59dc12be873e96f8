"""Snapshots nobody should believe, through real ``evalledger`` processes and real files.

A ``run.snapshot`` is derived data appended to the log, and an appended row keeps the
hash chain valid: only a replay can tell that it lies. Plain ``verify`` replays what
every snapshot claims. The readers (``runs``, ``show``, ``diff``) replay nothing: they
ignore a snapshot that claims events after its own seq (so past the ledger's end),
and believe one through a plausible seq (docs/results.md, "Snapshots").
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalledger.app._repository import write_snapshot
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    EventType,
    Ledger,
    RunSnapshot,
    TaskCompleted,
)
from evalledger.projections import ResumeFold, SummaryFold, fold
from evalledger.projections._snapshots import snapshot_events, snapshot_kinds
from evalledger.statuses import FinalStatus

from .helpers import EntryPoint, Result, _env
from .recorded import KEYS, record_large_run, record_run


@pytest.fixture(scope="module")
def entry_point(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryPoint]:
    server = EntryPoint(tmp_path_factory.mktemp("entry-point"))
    yield server
    server.close()


def call(entry_point: EntryPoint, db: Path, *args: str) -> Result:
    """``evalledger --ledger DB ARGS...`` in a process of its own."""
    return entry_point("--ledger", str(db), *args, cwd=db.parent, env=_env())


def forge(db: Path, run_id: str, statuses: dict[str, FinalStatus],
          through_seq: int | None = None) -> list[int]:
    """Append a snapshot of the run as if its keys had ended with ``statuses``: all four
    kinds, made by the real folds from the altered events, so they agree with each
    other. Through the run's last lifecycle event (what the real one is through)
    unless ``through_seq`` says otherwise. Returns the four seqs."""
    with Ledger(db) as ledger:
        lied: list[AnyEvent] = []
        for event in ledger.events(run_id):
            if isinstance(event, TaskCompleted) and event.task_key in statuses:
                status = statuses[event.task_key]
                event = event.model_copy(update={
                    "final_status": status, "category": status.category,
                    "weighted_score": 1.0 if status == FinalStatus.SUCCESS else 0.0})
            lied.append(event)
        summary, resume = fold(SummaryFold(run_id), lied), fold(ResumeFold(run_id), lied)
        through = through_seq if through_seq is not None else ledger.last_lifecycle_seq(run_id)
        return ledger.append(snapshot_events(run_id, through, summary, resume))


def listed(entry_point: EntryPoint, db: Path) -> dict[str, dict]:
    out = call(entry_point, db, "runs", "--json")
    assert out.returncode == 0, out
    return {row["run_id"]: row for row in map(json.loads, out.stdout.splitlines())}


def snapshot_lines(out: Result) -> dict[int, str]:
    """The problem lines naming a snapshot, by the snapshot's seq."""
    found = {}
    for line in out.out_lines:
        if match := re.match(r"snapshot: run \S+: the \w+ snapshot at seq (\d+) ", line):
            found[int(match[1])] = line
    return found


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_forged_snapshot_through_the_real_seq_is_caught_by_plain_verify(
    entry_point: EntryPoint, db_path: Path,
) -> None:
    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", {KEYS[0]: FinalStatus.SUCCESS,
                                     KEYS[1]: FinalStatus.FAILURE})
        assert write_snapshot(ledger, "run-1")
    assert call(entry_point, db_path, "verify").returncode == 0

    forged = forge(db_path, "run-1", {KEYS[1]: FinalStatus.SUCCESS})

    # Through the same seq as the real one and newer: a reader cannot tell without a
    # replay, and believes it (docs/results.md says so).
    assert listed(entry_point, db_path)["run-1"]["tasks_failed"] == 0
    for args in (("verify",), ("verify", "--deep")):
        out = call(entry_point, db_path, *args)
        assert out.returncode == 1, out
        assert out.out_lines[0].startswith("FAILED: "), out.stdout
        named = snapshot_lines(out)
        assert sorted(named) == forged, out.stdout  # each forged one, no real one
        assert all("differs from a full replay of the run" in line for line in named.values())
        assert "Traceback" not in out.stderr


def test_snapshots_claiming_events_past_their_own_seq_are_ignored_by_runs_show_and_diff(
    entry_point: EntryPoint, db_path: Path,
) -> None:
    both = {KEYS[0]: FinalStatus.SUCCESS, KEYS[1]: FinalStatus.SUCCESS}
    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", both)
        record_run(ledger, "run-2", both)
        assert write_snapshot(ledger, "run-1") and write_snapshot(ledger, "run-2")

    # run-2 "regressed" on a task it passed, in all four kinds, through seq 10**9.
    forged = forge(db_path, "run-2", {KEYS[0]: FinalStatus.FAILURE}, through_seq=10**9)

    row = listed(entry_point, db_path)["run-2"]
    assert (row["tasks_succeeded"], row["tasks_failed"]) == (2, 0), row
    shown = call(entry_point, db_path, "show", "run-2", "--json")
    assert shown.returncode == 0, shown
    summary = json.loads(shown.stdout)
    assert {t["task_key"]: t["final_status"] for t in summary["tasks"]
            if t["final_status"]} == {KEYS[0]: "SUCCESS", KEYS[1]: "SUCCESS"}
    diff = call(entry_point, db_path, "diff", "run-1", "run-2", "--json")
    assert diff.returncode == 0, diff  # no regression
    assert not [t for t in json.loads(diff.stdout)["tasks"] if t["change"] == "regression"]

    out = call(entry_point, db_path, "verify")
    assert out.returncode == 1, out
    named = snapshot_lines(out)
    assert sorted(named) == forged, out.stdout
    last = forged[-1]
    assert all(line.endswith(f"claims events that come after it: the ledger ends at seq {last}")
               for line in named.values()), out.stdout


@pytest.mark.parametrize("stored", ["CAST(payload AS BLOB)", "42"])
def test_a_snapshot_payload_that_is_no_text_is_passed_over(
    entry_point: EntryPoint, db_path: Path, stored: str,
) -> None:
    """A payload stored as a BLOB or a number (a hand edit behind the triggers) is no
    snapshot a reader can use: it reads the run as if it had none, without a traceback."""
    import sqlite3
    from contextlib import closing

    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", {KEYS[0]: FinalStatus.SUCCESS, KEYS[1]: FinalStatus.FAILURE})
        write_snapshot(ledger, "run-1")
    before = call(entry_point, db_path, "show", "run-1")
    assert before.returncode == 0, before
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        conn.execute("DROP TRIGGER events_no_update")
        changed = conn.execute(
            f"UPDATE events SET payload = {stored} WHERE type = 'run.snapshot'").rowcount
    assert changed == 4, "the run has its four snapshots"

    after = call(entry_point, db_path, "show", "run-1")

    assert after.returncode == 0, after
    assert "Traceback" not in after.stderr
    assert after.stdout == before.stdout


def stored_values(db: Path) -> dict[str, str]:
    """Each stored snapshot's kind and the first characters of its value."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT payload FROM events WHERE type = 'run.snapshot'")
        return {json.loads(p)["kind"]: p[p.index('"value":') + 8:][:6] for (p,) in rows}


def test_a_large_run_s_snapshots_are_packed_read_and_a_forged_packed_one_is_caught(
    entry_point: EntryPoint, db_path: Path,
) -> None:
    keys = record_large_run(db_path, "run-1", 120)
    assert stored_values(db_path) == {"summary_fold": '"zstd:', "resume_fold": '"zstd:',
                                      "summary": '"zstd:', "headline": '{"cost'}
    assert call(entry_point, db_path, "verify").returncode == 0
    shown = call(entry_point, db_path, "show", "run-1", "--json")
    assert shown.returncode == 0, shown
    statuses = {t["task_key"]: t["final_status"] for t in json.loads(shown.stdout)["tasks"]}
    assert statuses == {k: "FAILURE" if i % 3 == 0 else "SUCCESS" for i, k in enumerate(keys)}
    # Readable with SQL through evalledger_unpack (docs/ledger.md).
    sql = call(entry_point, db_path, "sql", "--format", "json",
               "SELECT json_extract(evalledger_unpack(json_extract(payload, '$.value')), "
               "'$.tasks_planned') AS planned FROM events "
               "WHERE type = 'run.snapshot' AND json_extract(payload, '$.kind') = 'summary'")
    assert sql.returncode == 0, sql
    assert [json.loads(line) for line in sql.out_lines] == [{"planned": 120}]

    forged = forge(db_path, "run-1", {keys[0]: FinalStatus.SUCCESS})

    # Believed by the readers, as a plain one would be: the packed summary is what `show`
    # reads (a replay would say FAILURE).
    assert listed(entry_point, db_path)["run-1"]["tasks_failed"] == 39
    shown = call(entry_point, db_path, "show", "run-1", "--json")
    assert json.loads(shown.stdout)["tasks"][0]["final_status"] == "SUCCESS", shown
    for args in (("verify",), ("verify", "--deep")):
        out = call(entry_point, db_path, *args)
        assert out.returncode == 1, out
        named = snapshot_lines(out)
        assert sorted(named) == forged, out.stdout
        assert all("differs from a full replay of the run" in line for line in named.values())
        assert "Traceback" not in out.stderr


@pytest.mark.parametrize("value", [
    "zstd:AAAA",
    "zstd:" + base64.b64encode(b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little")
                               + b"\x01\x00\x00").decode(),
], ids=["not-a-frame", "claims-a-terabyte"])
def test_a_packed_value_that_does_not_unpack_is_replayed_past_and_named(
    entry_point: EntryPoint, db_path: Path, value: str,
) -> None:
    record_large_run(db_path, "run-1", 120)
    before = [call(entry_point, db_path, *args) for args in (("show", "run-1"), ("runs",))]
    with Ledger(db_path) as ledger:
        through = ledger.last_lifecycle_seq("run-1")
        bad = ledger.append([RunSnapshot(run_id="run-1", kind=kind, fold_version=made.version,
                                         through_seq=through, value=value)
                             for kind, made in snapshot_kinds(
                                 SummaryFold("run-1"), ResumeFold("run-1")).items()
                             if kind != "headline"])

    after = [call(entry_point, db_path, *args) for args in (("show", "run-1"), ("runs",))]

    assert [(a.returncode, a.stdout) for a in after] == [(b.returncode, b.stdout)
                                                       for b in before]
    out = call(entry_point, db_path, "verify")
    assert out.returncode == 1, out
    assert sorted(snapshot_lines(out)) == bad, out.stdout
    assert all("Traceback" not in r.stderr for r in [*after, out])


def _summary_row(db: Path) -> EventRow:
    with Ledger(db) as ledger:
        return next(r for r in ledger.rows(types=[EventType.RUN_SNAPSHOT])
                    if '"kind":"summary"' in r.payload)


def _append_payload(db: Path, like: EventRow, payload: str) -> list[int]:
    """A row like ``like`` with another payload, appended as any writer appends (the
    chain stays whole: only the payload's own check can tell)."""
    with Ledger(db) as ledger:
        return ledger.append([EventRow(str(uuid.uuid4()), like.run_id, like.task_key,
                                       like.type, like.ts, payload, None, None)])


@pytest.mark.parametrize("instead", ["X", "[", "\\"])
def test_a_packed_value_without_its_opening_quote_is_no_json_and_verify_says_so(
    entry_point: EntryPoint, db_path: Path, instead: str,
) -> None:
    record_large_run(db_path, "run-1", 120)
    row = _summary_row(db_path)
    at = row.payload.index('"value":') + len('"value":')
    assert row.payload[at:at + 6] == '"zstd:'
    [bad] = _append_payload(db_path, row, row.payload[:at] + instead + row.payload[at + 1:])

    out = call(entry_point, db_path, "verify")

    assert out.returncode == 1, out
    assert f"seq {bad}: payload does not validate" in out.stdout, out.stdout


def test_a_second_frame_after_a_packed_value_is_not_believed(
    entry_point: EntryPoint, db_path: Path,
) -> None:
    """zstd's one-shot decompress stops at the first frame; ``zstd -d`` reads on. A
    value with a frame appended is not the value the chain's writer stored."""
    import zstandard

    record_large_run(db_path, "run-1", 120)
    row = _summary_row(db_path)
    at = row.payload.index('"zstd:') + len('"zstd:')
    frame = base64.b64decode(row.payload[at:-2])
    extra = zstandard.ZstdCompressor(write_content_size=True).compress(b'{"tasks_failed":0}')
    packed = base64.b64encode(frame + extra).decode()
    [bad] = _append_payload(db_path, row, row.payload[:at] + packed + '"}')

    for args in (("verify",), ("verify", "--deep")):
        out = call(entry_point, db_path, *args)
        assert out.returncode == 1, out
        assert bad in snapshot_lines(out), out.stdout


@pytest.mark.parametrize("kind", ["headline", "summary_fold"])
def test_a_packed_value_nested_a_million_deep_is_passed_over(
    entry_point: EntryPoint, db_path: Path, kind: str,
) -> None:
    """Packed, a value nested a million arrays deep is a few dozen bytes: the readers
    that parse it replay the run instead of failing with a RecursionError."""
    import zstandard

    record_large_run(db_path, "run-1", 120)
    before = [call(entry_point, db_path, *args) for args in (("show", "run-1"), ("runs",))]
    deep = zstandard.ZstdCompressor(write_content_size=True).compress(
        b"[" * 1_000_000 + b"]" * 1_000_000)
    value = "zstd:" + base64.b64encode(deep).decode()
    with Ledger(db_path) as ledger:
        through = ledger.last_lifecycle_seq("run-1")
        version = snapshot_kinds(SummaryFold("run-1"), ResumeFold("run-1"))[kind].version
        ledger.append([RunSnapshot(run_id="run-1", kind=kind, fold_version=version,
                                   through_seq=through, value=value)])

    after = [call(entry_point, db_path, *args) for args in (("show", "run-1"), ("runs",))]

    assert [(a.returncode, a.stdout) for a in after] == [(b.returncode, b.stdout)
                                                       for b in before]
    assert all("Traceback" not in a.stderr for a in after)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("respell", ["spaced", "true-for-1"])
def test_a_packed_value_spelled_otherwise_inside_its_frame_is_not_believed(
    entry_point: EntryPoint, db_path: Path, respell: str,
) -> None:
    """A packed value is its JSON as msgspec writes it: the same data spelled otherwise
    (spaces, ``true`` where the replay has ``1``: equal in Python, read otherwise by a
    reader) is no snapshot this code writes, and verify says so."""
    import zstandard

    from evalledger.ledger._packed import unpack

    record_large_run(db_path, "run-1", 120)
    row = _summary_row(db_path)
    at = row.payload.index('"zstd:')
    text = unpack(row.payload[at:-1]).decode()
    data = json.loads(text)
    if respell == "spaced":
        text = json.dumps(data, sort_keys=True, indent=1)
    else:
        assert data["tasks_planned"] == 120 and data["tasks"][1]["attempts"] == 1
        text = text.replace('"attempts":1,', '"attempts":true,', 1)
    assert json.loads(text) == data  # the same data to Python's eyes
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(text.encode())
    [bad] = _append_payload(db_path, row, row.payload[:at] + '"zstd:'
                            + base64.b64encode(frame).decode() + '"}')

    for args in (("verify",), ("verify", "--deep")):
        out = call(entry_point, db_path, *args)
        assert out.returncode == 1, out
        assert bad in snapshot_lines(out), out.stdout
