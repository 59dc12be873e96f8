"""``verify`` at scale: the rows walked in parts by processes of their own, output lines
checked without their models, and ``since`` (only what came after a verified prefix).

Each claim is held against the plain walk: the report of a ledger cut into parts is the
report of one walk, whatever was done to the rows; an output line shown plain by the
fast check is one the full models accept as valid and canonical.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    Anchor,
    EventRow,
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskEmitted,
    TaskOutput,
    TaskStarted,
    chunked,
    verify,
)
from evalledger.ledger import _verify as verify_module
from evalledger.ledger._events import decode_row
from evalledger.ledger._verify import _plain_chunk, _plain_output, canonical_json
from evalledger.statuses import FinalStatus, RunStatus

RUN, KEY = "run-1", "default/t/00"


def _ledger(path: Path, tasks: int = 3, lines: int = 8) -> None:
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=RUN, planned=[f"default/t{i}/00" for i in range(tasks)],
                                  ledger_id=ledger.ledger_id)])
        for i in range(tasks):
            key = f"default/t{i}/00"
            ledger.append([TaskStarted(run_id=RUN, task_key=key, task_id=f"t{i}"),
                           *(TaskOutput(run_id=RUN, task_key=key, line=f"line {n}", n=n,
                                        stream="stderr" if n % 3 == 0 else "stdout")
                             for n in range(1, lines + 1)),
                           TaskCompleted(run_id=RUN, task_key=key,
                                         final_status=FinalStatus.SUCCESS, category="succeeded",
                                         exit_code=0)])
        ledger.append([RunFinished(run_id=RUN, status=RunStatus.COMPLETED)])


def _behind_triggers(path: Path, sql: str, params: list[object]) -> None:
    """``sql`` run with the triggers dropped, then put back as they were (a careful
    attacker leaves the schema as it found it)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        triggers = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master "
                                               "WHERE type = 'trigger'")]
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute(sql, params)
        for trigger in triggers:
            conn.execute(trigger)


# What an attacker of the file can do to one row, behind the triggers' back.
TAMPERS = {
    "edit a line": ("UPDATE events SET payload = '{\"line\":\"forged\",\"n\":1}' WHERE seq = ?",),
    "delete a row": ("DELETE FROM events WHERE seq = ?",),
    "store a run id as a BLOB": ("UPDATE events SET run_id = CAST(run_id AS BLOB) WHERE seq = ?",),
    "spell a line with spaces": (
        "UPDATE events SET payload = replace(payload, ':', ': ') WHERE seq = ?",),
    "garbage payload": ("UPDATE events SET payload = 'not json' WHERE seq = ?",),
}


def _report_lines(path: Path, parts: int) -> list[str]:
    with pytest.MonkeyPatch.context() as patch, Ledger(path, read_only=True) as ledger:
        patch.setattr(verify_module, "PARALLEL_ROWS", 1)
        patch.setattr(verify_module, "_cpus", lambda: parts)
        return verify(ledger).lines()


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=12)  # each example starts up to 3 processes
@given(tampered=st.lists(st.tuples(st.sampled_from(sorted(TAMPERS)), st.integers(1, 32)),
                         max_size=3, unique_by=lambda t: t[1]),
       parts=st.integers(2, 4))
@example(tampered=[("delete a row", 32)], parts=2)
@example(tampered=[("delete a row", 31), ("edit a line", 12)], parts=3)
def test_a_ledger_walked_in_parts_reads_as_one_walk(
        tmp_path_factory: pytest.TempPathFactory, tampered: list[tuple[str, int]],
        parts: int) -> None:
    path = tmp_path_factory.mktemp("parts") / "ledger.db"
    _ledger(path)
    for name, seq in tampered:
        _behind_triggers(path, TAMPERS[name][0], [seq])
    whole = _report_lines(path, 1)
    assert _report_lines(path, parts) == whole
    # Deleting the last rows leaves a valid chain (a cut tail: only an anchor shows it).
    deleted = {seq for name, seq in tampered if name == "delete a row"}
    seen = [seq for _, seq in tampered if not set(range(seq, 33)) <= deleted]
    assert whole[0].startswith("FAILED" if seen else "OK"), whole


def test_parts_cover_the_range_once() -> None:
    for after, last, cpus in ((0, 10, 3), (5, 6, 4), (7, 7, 2), (0, 1_000_001, 2)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(verify_module, "PARALLEL_ROWS", 1)
            patch.setattr(verify_module, "_cpus", lambda c=cpus: c)
            parts = verify_module._parts(after, last)
        covered = [seq for lo, hi in parts for seq in range(lo + 1, hi + 1)]
        assert covered == list(range(after + 1, last + 1)), (after, last, parts)


# -- output lines without their models ---------------------------------------------------------


def _full_check(row: EventRow) -> bool:
    """What verify's full path says of a row: it validates and is canonical JSON."""
    try:
        decode_row(row)
    except ValueError:
        return False
    return canonical_json(row.payload)


@given(line=st.text(), n=st.integers(-2**63, 2**63 - 1), stream=st.sampled_from(["stdout",
       "stderr"]), truncated=st.booleans())
def test_every_line_the_runner_writes_is_shown_plain(line: str, n: int, stream: str,
                                                     truncated: bool) -> None:
    row = TaskOutput.encoded(RUN, KEY, "2026-12-02T00:00:00Z", stream, line, n, truncated)
    assert _plain_output(row.event_id, row.run_id, row.task_key, row.ts, row.payload)
    assert _full_check(row)


_SPELLINGS = st.one_of(
    st.builds(lambda d: json.dumps(d), st.fixed_dictionaries(
        {"line": st.text(max_size=5), "n": st.integers(0, 9)},
        optional={"stream": st.sampled_from(["stdout", "stderr", "other"]),
                  "truncated": st.booleans(), "extra": st.just(1)})),
    st.builds(lambda d: json.dumps(d, separators=(",", ":"), ensure_ascii=False,
                                   sort_keys=True), st.fixed_dictionaries(
        {"line": st.text(max_size=5), "n": st.one_of(st.integers(0, 9), st.floats(0, 9))},
        optional={"stream": st.sampled_from(["stdout", "stderr"]),
                  "truncated": st.booleans()})),
    st.text(max_size=30),
)


@given(payload=_SPELLINGS, envelope=st.sampled_from([
    ("id-1", RUN, KEY, "2026-12-02T00:00:00Z"), ("", RUN, KEY, "t"), ("id\n", RUN, KEY, "t"),
    ("id", RUN, None, "t"), ("id", "run\r", KEY, "t")]))
def test_a_line_shown_plain_passes_the_full_check(payload: str,
                                                  envelope: tuple[str, str, str, str]) -> None:
    event_id, run_id, task_key, ts = envelope
    row = EventRow(event_id, run_id, task_key, "task.output", ts, payload, 1, "h")
    if _plain_output(event_id, run_id, task_key, ts, payload):
        assert _full_check(row), payload


_LINE_PAYLOADS = st.one_of(
    _SPELLINGS,
    st.builds(lambda d, n: json.dumps({"data": d, "n": n}, separators=(",", ":"),
                                      ensure_ascii=False, sort_keys=True),
              st.dictionaries(st.text(max_size=3), st.integers() | st.floats() | st.none()
                              | st.lists(st.integers(), max_size=2), max_size=3),
              st.integers(0, 9)),
    st.builds(lambda d: json.dumps({"data": d, "n": 1}), st.dictionaries(st.text(max_size=3),
                                                                         st.integers())),
)


@given(lines=st.lists(st.tuples(st.sampled_from(["2026-12-02T00:00:00Z", "t\n", ""]),
                                _LINE_PAYLOADS), min_size=1, max_size=4),
       envelope=st.sampled_from([("id-1", RUN, KEY, "2026-12-02T00:00:00Z"),
                                 ("id", RUN, None, "t"), ("id\n", RUN, KEY, "t")]))
def test_a_chunk_shown_plain_passes_the_full_check(lines: list[tuple[str, str]],
                                                   envelope: tuple[str, str, str, str]) -> None:
    """verify's fast path for a chunk says "as the runner writes it" only of a chunk the
    full check accepts: every line valid for its type, and all of it canonical."""
    event_id, run_id, task_key, ts = envelope
    payload = '{"lines":[' + ",".join(f"[{json.dumps(t)},{p}]" for t, p in lines) + "]}"
    row = EventRow(event_id, run_id, task_key, "task.lines", ts, payload, len(lines), "h")
    if _plain_chunk(event_id, run_id, task_key or "", ts, payload):
        assert _full_check(row), payload


@given(lines=st.lists(st.tuples(st.text(), st.sampled_from(["stdout", "stderr"]),
                                st.booleans()), min_size=2, max_size=5),
       data=st.dictionaries(st.text(max_size=3), st.integers() | st.floats(allow_nan=False)
                            | st.text(max_size=4), max_size=3))
def test_every_chunk_the_runner_writes_is_shown_plain(lines: list[tuple[str, str, bool]],
                                                      data: dict[str, object]) -> None:
    rows: list[EventRow | TaskEmitted] = [
        TaskOutput.encoded(RUN, KEY, "2026-12-02T00:00:00Z", stream, line, n, truncated)
        for n, (line, stream, truncated) in enumerate(lines, 1)]
    rows.insert(1, TaskEmitted(run_id=RUN, task_key=KEY, ts="2026-12-02T00:00:01Z", data=data,
                               n=9))
    (chunk,) = chunked(rows)
    assert _plain_chunk(chunk.event_id, chunk.run_id, KEY, chunk.ts, chunk.payload) == len(rows)
    assert _full_check(chunk._replace(seq=len(rows)))


# -- since: only what is new --------------------------------------------------------------------


def _anchor_at(path: Path, seq: int) -> Anchor:
    with Ledger(path, read_only=True) as ledger:
        anchor = ledger.anchor(until_seq=seq)
        assert anchor is not None
        return anchor


def _since(path: Path, anchor: Anchor) -> list[str]:
    with Ledger(path, read_only=True) as ledger:
        return verify(ledger, since=anchor).lines()


def test_since_reads_only_the_rows_after_its_anchor(db_path: Path) -> None:
    _ledger(db_path)
    anchor = _anchor_at(db_path, 20)
    with Ledger(db_path, read_only=True) as ledger:
        report = verify(ledger, since=anchor)
        assert report.ok and report.events == ledger.last_seq() - 20
        assert report.last_hash == verify(ledger).last_hash
    # An edit before the anchor is the earlier check's to have found: not read again.
    _behind_triggers(db_path, "UPDATE events SET ts = 'x' WHERE seq = 3", [])
    assert _since(db_path, anchor)[0].startswith("OK")
    _behind_triggers(db_path, "UPDATE events SET ts = 'x' WHERE seq = 25", [])
    assert "hash chain broken at seq 25: the row was changed after it was written" in (
        _since(db_path, anchor))


def test_since_fails_where_the_anchored_prefix_is_gone(db_path: Path) -> None:
    _ledger(db_path)
    anchor = _anchor_at(db_path, 20)
    _behind_triggers(db_path, "UPDATE events SET hash = ? WHERE seq = 20", ["0" * 64])
    lines = _since(db_path, anchor)
    assert lines[0].startswith("FAILED") and any(
        "history up to there was rewritten" in line for line in lines), lines
    _behind_triggers(db_path, "DELETE FROM events WHERE seq >= 15", [])
    lines = _since(db_path, anchor)
    assert any("the ledger ends at seq 14: its tail was cut" in line for line in lines), lines


def test_since_an_anchor_of_another_ledger_fails(db_path: Path) -> None:
    _ledger(db_path)
    other = _anchor_at(db_path, 5).model_copy(update={"ledger_id": str(uuid.uuid4())})
    lines = _since(db_path, other)
    assert lines[0].startswith("FAILED") and "anchored in ledger" in lines[1], lines


# -- snapshots: parsed once --------------------------------------------------------------------


def _rechained(path: Path, seq: int, payload: str) -> None:
    """Row ``seq`` given ``payload`` and every hash from there recomputed, behind the
    triggers' back: a valid chain over a changed row."""
    from evalledger.ledger._chain import chain_rows

    with Ledger(path, read_only=True) as ledger:
        rows = list(ledger.rows(after_seq=seq - 1))
        prev = ledger.anchor(until_seq=seq - 1)
    assert prev is not None
    rows[0] = rows[0]._replace(payload=payload)
    for new_seq, *_, new_payload, new_hash in chain_rows(prev.hash, seq, rows):
        _behind_triggers(path, "UPDATE events SET payload = ?, hash = ? WHERE seq = ?",
                         [new_payload, new_hash, new_seq])


def test_a_snapshot_respelled_and_rechained_is_named_once(db_path: Path) -> None:
    from evalledger.app._repository import write_snapshot
    from evalledger.app._snapshot_check import SnapshotCheck

    _ledger(db_path)
    with Ledger(db_path) as ledger:
        write_snapshot(ledger, RUN)
    with Ledger(db_path, read_only=True) as ledger:
        check = SnapshotCheck()
        assert verify(ledger, checks=[check]).ok
        snapshots = [r.seq for r in ledger.rows(types=["run.snapshot"])]
        # Every snapshot as this version writes it: none was parsed a second time.
        assert check.vouched == set(snapshots) and snapshots
        payload = next(ledger.rows(after_seq=snapshots[0] - 1)).payload
    _rechained(db_path, snapshots[0], json.dumps(json.loads(payload), indent=1))
    with Ledger(db_path, read_only=True) as ledger:
        check = SnapshotCheck()
        report = verify(ledger, checks=[check])
    assert snapshots[0] not in check.vouched
    assert report.noncanonical == [snapshots[0]] and not report.broken_links, report.lines()


def test_a_part_whose_process_cannot_start_is_checked_here(db_path: Path) -> None:
    _ledger(db_path)
    _behind_triggers(db_path, TAMPERS["edit a line"][0], [30])
    whole = _report_lines(db_path, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify_module.sys, "executable", str(db_path.parent / "no-python"))
        assert _report_lines(db_path, 3) == whole
    assert "hash chain broken at seq 30: the row was changed after it was written" in whole


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_part_refuses_a_file_put_in_the_ledgers_place(db_path: Path) -> None:
    """A part process is told which file verify reads (device and inode): one that opens
    another under the ledger's name (swapped in meanwhile: a copy without the edit) exits
    without a word, and verify checks that part itself in the file it began with."""
    import subprocess
    import sys

    _ledger(db_path)
    _behind_triggers(db_path, TAMPERS["edit a line"][0], [30])
    file = db_path.stat()
    refused = subprocess.run(
        [sys.executable, "-m", "evalledger.ledger._verify_part", str(db_path),
         f"{file.st_dev}:{file.st_ino + 1}", "16", "32"], capture_output=True, check=False)
    assert (refused.returncode, refused.stdout) == (3, b"")
    whole = _report_lines(db_path, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify_module, "_file_id", lambda path: (file.st_dev, file.st_ino + 1))
        assert _report_lines(db_path, 3) == whole
    assert "hash chain broken at seq 30: the row was changed after it was written" in whole


_JSON = st.recursive(  # JSON's values (no NaN or infinity: JSON has none)
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


def _sorted(value: object) -> object:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


@given(value=st.dictionaries(st.text(max_size=3), _JSON, max_size=4),
       sort_keys=st.booleans(), spaced=st.booleans())
def test_canonical_json_is_pydantics_spelling_with_every_key_sorted(
        value: dict[str, object], sort_keys: bool, spaced: bool) -> None:
    """verify's canonical check against its definition: the text pydantic-core writes for
    the value with every object's keys sorted."""
    from pydantic_core import to_json

    text = (json.dumps(value, sort_keys=sort_keys) if spaced else
            to_json(_sorted(value) if sort_keys else value).decode())
    assert canonical_json(text) == (text == to_json(_sorted(json.loads(text))).decode())
