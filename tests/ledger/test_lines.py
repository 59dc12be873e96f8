"""Lines in chunks (schema 17): a ``task.lines`` row holds consecutive lines of one
attempt, compressed, and every reader gives it back as the lines it holds."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    EventRow,
    InvalidEvent,
    Ledger,
    RunStarted,
    TaskEmitted,
    TaskLines,
    TaskOutput,
    TaskUsage,
    chunked,
    verify,
)
from evalledger.ledger._events import encode_payload
from evalledger.ledger._lines import MAX_LINES, lines_payload
from evalledger.ledger._page_queries import transcript_rows, transcript_tail
from evalledger.ledger._transfer import export_lines
from tests.projections.builders import old_ledger

RUN = "r1"
KEYS = ["v/a/00", "v/b/00"]
TS = "2026-12-07T00:00:00.000000Z"

line = st.one_of(
    st.tuples(st.just("o"), st.text(max_size=30), st.sampled_from(["stdout", "stderr"])),
    st.tuples(st.just("e"), st.dictionaries(st.text(max_size=5),
                                            st.integers() | st.floats(allow_nan=False)
                                            | st.text(max_size=8), max_size=3)))
# A read: which task, its lines, and whether a usage report follows it.
reads = st.lists(st.tuples(st.integers(0, 1), st.lists(line, min_size=1, max_size=8),
                           st.booleans()), min_size=1, max_size=12)


def events_of(plan: list[Any]) -> list[list[AnyEvent | EventRow]]:
    """Each read's events, as the runner makes them (its lines, then any usage)."""
    numbers = dict.fromkeys(KEYS, 0)
    out: list[list[AnyEvent | EventRow]] = []
    for i, (task, said, usage) in enumerate(plan):
        key = KEYS[task]
        ts = f"2026-12-07T00:00:{i:02d}.000000Z"
        batch: list[AnyEvent | EventRow] = []
        for kind, *rest in said:
            numbers[key] += 1
            if kind == "o":
                text, stream = rest
                batch.append(TaskOutput.encoded(RUN, key, ts, stream, text, numbers[key], False))
            else:
                batch.append(TaskEmitted(run_id=RUN, task_key=key, ts=ts, data=rest[0],
                                         n=numbers[key]))
        if usage:
            batch.append(TaskUsage(run_id=RUN, task_key=key, ts=ts, model="m", input_tokens=1))
        out.append(batch)
    return out


def line_view(row: EventRow) -> tuple[Any, ...]:
    return (row.seq, row.run_id, row.task_key, row.type, row.ts, row.payload)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads, st.integers(0, 80), st.integers(0, 80), st.integers(1, 20))
def test_chunks_read_back_as_the_lines_they_hold(plan: list[Any], after: int, until: int,
                                                 limit: int) -> None:
    """A ledger written in chunks reads, by every reader, as one written a row a line:
    same seqs, types, times and payloads, whatever the bounds, types or task asked."""
    batches = events_of(plan)
    with tempfile.TemporaryDirectory() as folder:
        chunks, rows = Ledger(Path(folder) / "c.db"), Ledger(Path(folder) / "r.db")
        for ledger in (chunks, rows):
            ledger.append([RunStarted(run_id=RUN, ts=TS)])
        for batch in batches:
            chunks.append(chunked(batch))
            rows.append(batch)
        assert chunks.last_seq() == rows.last_seq()
        for kwargs in ({}, {"after_seq": after, "until_seq": until},
                       {"types": ["task.event"]}, {"types": ["task.output", "task.usage"]},
                       {"task_key": KEYS[1], "after_seq": after}):
            assert ([line_view(r) for r in chunks.rows(RUN, **kwargs)]  # type: ignore[arg-type]
                    == [line_view(r) for r in rows.rows(RUN, **kwargs)]), kwargs  # type: ignore[arg-type]
        assert ([e.model_dump(exclude={"event_id"}) for e in chunks.events(RUN)]
                == [e.model_dump(exclude={"event_id"}) for e in rows.events(RUN)])
        for key in KEYS:
            for page in ({"after": after}, {"before": until or -1}, {"search": "a"}):
                mine = transcript_rows(chunks, RUN, key, limit=limit, **page)  # type: ignore[arg-type]
                theirs = transcript_rows(rows, RUN, key, limit=limit, **page)  # type: ignore[arg-type]
                assert ([line_view(r) for r in mine[0]], mine[1]) == (
                    [line_view(r) for r in theirs[0]], theirs[1]), page
            assert ([line_view(r) for r in transcript_tail(chunks, RUN, key, after, limit)]
                    == [line_view(r) for r in transcript_tail(rows, RUN, key, after, limit)])
        for ledger in (chunks, rows):
            report = verify(ledger)
            assert report.ok, report.lines()
            assert report.events == ledger.last_seq()  # counted as lines
            ledger.close()


@given(st.lists(st.tuples(st.sampled_from([TS, "2026-12-07T00:00:01.500000Z"]),
                          line), min_size=1, max_size=6))
def test_a_chunk_payload_is_what_its_model_writes(said: list[Any]) -> None:
    lines: list[tuple[str, str]] = []
    for n, (ts, (kind, *rest)) in enumerate(said, 1):
        event: AnyEvent = (TaskOutput(run_id=RUN, task_key=KEYS[0], line=rest[0],
                                      stream=rest[1], n=n) if kind == "o" else
                           TaskEmitted(run_id=RUN, task_key=KEYS[0], data=rest[0], n=n))
        lines.append((ts, encode_payload(event)))
    model = TaskLines(run_id=RUN, task_key=KEYS[0],
                      lines=[(ts, json.loads(payload)) for ts, payload in lines])
    assert encode_payload(model) == lines_payload(lines)


def test_a_read_of_many_lines_is_one_compressed_row(ledger: Ledger) -> None:
    batch = [TaskOutput.encoded(RUN, KEYS[0], TS, "stdout", f"line {n} of the build", n, False)
             for n in range(1, 2501)]
    stored = chunked(batch)
    assert [len(json.loads(r.payload)["lines"]) for r in stored] == [MAX_LINES, MAX_LINES, 452]
    assert ledger.append(stored) == [1024, 2048, 2500]  # each chunk at its last line's seq
    kinds = ledger.db.execute("SELECT typeof(payload), length(payload) FROM events").fetchall()
    assert {kind for kind, _ in kinds} == {"blob"}
    text = sum(len(r.payload) for r in batch)
    assert sum(size for _, size in kinds) < text / 5
    # One line alone is its own row, as before.
    assert chunked(batch[:1]) == batch[:1]


def tamper(ledger: Ledger, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(ledger.path)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("DROP TRIGGER events_no_delete")
    conn.execute(sql, params)
    conn.commit()
    conn.close()


@pytest.fixture
def chunk_at_seq_5(ledger: Ledger) -> Ledger:
    ledger.append([RunStarted(run_id=RUN)])
    ledger.append(chunked([TaskOutput.encoded(RUN, KEYS[0], TS, "stdout", f"line {n}", n, False)
                           for n in range(1, 5)]))
    ledger.append([TaskOutput.encoded(RUN, KEYS[0], TS, "stdout", "after", 5, False)])
    return ledger


def test_an_edited_line_inside_a_chunk_breaks_its_link(chunk_at_seq_5: Ledger) -> None:
    ledger = chunk_at_seq_5
    text = ledger.db.execute("SELECT evalledger_unpack(payload) FROM events WHERE seq = 5"
                             ).fetchone()[0]
    forged = zstandard.ZstdCompressor().compress(text.replace("line 3", "line X").encode())
    tamper(ledger, "UPDATE events SET payload = ? WHERE seq = 5", forged)
    with Ledger(ledger.path, read_only=True) as reader:
        report = verify(reader)
    assert report.broken_links == [5] and report.gaps == []


def test_a_deleted_chunk_is_a_gap_of_its_lines(chunk_at_seq_5: Ledger) -> None:
    tamper(chunk_at_seq_5, "DELETE FROM events WHERE seq = 5")
    with Ledger(chunk_at_seq_5.path, read_only=True) as reader:
        report = verify(reader)
    assert report.gaps == [(1, 6)]


@pytest.mark.parametrize("forged, said", [
    (b"\x28\xb5\x2f\xfd not a frame", "does not decompress"),
    # A frame that claims 1 TB: never allocated.
    (b"\x28\xb5\x2f\xfd\xe4\x00\x00\x00\x00\x00\x01\x00\x00\x00", "plausible size"),
])
def test_a_chunk_that_does_not_decompress_is_named(chunk_at_seq_5: Ledger, forged: bytes,
                                                  said: str) -> None:
    tamper(chunk_at_seq_5, "UPDATE events SET payload = ? WHERE seq = 5", forged)
    with Ledger(chunk_at_seq_5.path, read_only=True) as reader:
        report = verify(reader)
        assert [seq for seq, _ in report.invalid_payloads] == [5]  # said once
        assert said in report.invalid_payloads[0][1]
        # Every reader names it, a filtered one too (its lines are not left out unsaid),
        # and nothing carries it.
        for read in (lambda: list(reader.events(RUN)),
                     lambda: list(reader.rows(RUN, types=["task.output"])),
                     lambda: transcript_rows(reader, RUN, KEYS[0], through=3),
                     lambda: transcript_tail(reader, RUN, KEYS[0], 0, 10),
                     lambda: list(export_lines(reader, [RUN]))):
            with pytest.raises(InvalidEvent, match="seq 5"):
                read()


def test_a_chunk_of_too_many_lines_is_refused_by_its_model() -> None:
    with pytest.raises(ValueError, match="1024"):
        TaskLines(run_id=RUN, task_key=KEYS[0],
                  lines=[(TS, {"line": "x", "n": n}) for n in range(1, MAX_LINES + 2)])
    # Nor more text than a reader takes back (it refuses a frame that claims more).
    with pytest.raises(ValueError, match="bytes of lines"):
        TaskLines(run_id=RUN, task_key=KEYS[0],
                  lines=[(TS, {"line": "x" * 20_000, "n": n}) for n in range(1, 200)])


def test_a_chunk_rewritten_to_hold_more_lines_than_its_seqs_is_named(
    chunk_at_seq_5: Ledger,
) -> None:
    ledger = chunk_at_seq_5
    text = ledger.db.execute("SELECT evalledger_unpack(payload) FROM events WHERE seq = 5"
                             ).fetchone()[0]
    grown = json.loads(text)
    grown["lines"] += grown["lines"][:2]
    tamper(ledger, "UPDATE events SET payload = ? WHERE seq = 5",
           json.dumps(grown, separators=(",", ":"), ensure_ascii=False))
    with Ledger(ledger.path, read_only=True) as reader:
        report = verify(reader)
    assert report.broken_links == [5] and report.gaps == []
    assert [(seq, what) for seq, what in report.invalid_payloads] == [
        (5, "it holds 6 lines but takes seqs after 1 only (4)")]
    assert report.events == 6


def test_export_carries_the_chunk_as_stored(chunk_at_seq_5: Ledger) -> None:
    lines = [json.loads(line) for line in export_lines(chunk_at_seq_5, [RUN])][:-1]
    assert [(line["seq"], line["type"]) for line in lines] == [
        (1, "run.started"), (5, "task.lines"), (6, "task.output")]
    assert len(lines[1]["payload"]["lines"]) == 4


def test_a_schema_16_ledger_reads_its_rows_and_takes_chunks_after_migrating(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    before = [RunStarted(run_id=RUN), *(TaskOutput(run_id=RUN, task_key=KEYS[0], line=f"l{n}",
                                                   n=n) for n in (1, 2, 3))]
    assert old_ledger(path, before, "0017_chunked_lines") == "16"
    with Ledger(path) as ledger:
        ledger.append(chunked([TaskOutput.encoded(RUN, KEYS[0], TS, "stdout", f"l{n}", n, False)
                               for n in range(4, 10)]))
        assert [json.loads(r.payload)["line"] for r in ledger.rows(RUN, types=["task.output"])
                ] == [f"l{n}" for n in range(1, 10)]
        (index,) = ledger.db.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'events_lifecycle'").fetchone()
        assert "'task.lines'" in index
        report = verify(ledger)
        # (The helper stores the old rows' ids and hashes as text, as schema 13 did.)
        assert (report.broken_links, report.gaps, report.invalid_payloads, report.schema
                ) == ([], [], [], []), report.lines()
        assert report.events == 9 + 1


def test_a_transfer_run_again_meets_its_chunks_as_held(tmp_path: Path) -> None:
    """A chunk is stored compressed and carried as its text: merging or importing the
    same events again adds nothing and finds nothing different (they were compared with
    the stored frame, and every chunk read as another payload)."""
    from evalledger.app import export, import_events, merge
    from evalledger.ledger import RunFinished

    source = tmp_path / "source.db"
    with Ledger(source) as ledger:
        ledger.append([RunStarted(run_id=RUN)])
        for size in (40, 1, 30):  # compressed, a single line, compressed
            ledger.append(chunked([TaskOutput.encoded(RUN, KEYS[0], TS, "stdout",
                                                      f"line {n} of {size}", n, False)
                                   for n in range(1, size + 1)]))
        ledger.append([RunFinished(run_id=RUN, status="completed")])
        blobs = ledger.db.execute(
            "SELECT count(*) FROM events WHERE typeof(payload) = 'blob'").fetchone()[0]
    assert blobs == 2
    events = tmp_path / "run.ndjson"
    export([RUN], events, ledger=source)
    imported, merged = tmp_path / "imported.db", tmp_path / "merged.db"
    # Counted as lines, as verify counts them: 71 lines, the run's start and end.
    assert [import_events(events, ledger=imported).added for _ in range(2)] == [73, 0]
    assert [merge([source], ledger=merged)[0].added for _ in range(2)] == [73, 0]
    for path in (imported, merged):
        with Ledger(path, read_only=True) as ledger:
            assert len(list(ledger.rows(RUN, types=["task.output"]))) == 71
            assert verify(ledger).ok
            (account,) = ledger.events(RUN, types={"run.merged"})
            assert (account.events, account.source_seqs) == (73, [1, 73])  # type: ignore[union-attr]
