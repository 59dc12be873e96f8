"""Runs carried between ledgers: export / import-events, merge, and shards of one run
run on "two machines" (two ledger files) merged into one."""

from __future__ import annotations

import gzip
import json
import os
import resource
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import (
    EventRow,
    Ledger,
    RunMerged,
    RunStarted,
    TaskCompleted,
    TaskStarted,
    verify,
    verify_events,
)
from evalledger.ledger._chain import link_hash
from evalledger.ledger._events import encode_payload
from evalledger.ledger._rows import text_hash
from evalledger.ledger._transfer import append_all
from evalledger.statuses import Category, FinalStatus

from .helpers import COMMAND, _env, assert_one_line_error, evalledger, write_task

RUN = "sharded"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    for i in range(8):
        code = "import sys; sys.exit(0)" if i % 3 else "import sys; sys.exit(1)"
        write_task(tmp_path / "tasks" / f"t{i}.yaml", [sys.executable, "-c", code])
    return tmp_path


def facts(db: Path, run_id: str) -> list[tuple[str, str, str | None, str, str, str]]:
    """Every event of the run but derived ones, as stored: id, envelope, payload text."""
    with Ledger(db, read_only=True) as ledger:
        return [(r.event_id, r.run_id, r.task_key, r.type, r.ts, r.payload)
                for r in ledger.rows(run_id) if r.type not in ("run.snapshot", "run.merged")]


def statuses(db: Path, run_id: str) -> dict[str, object]:
    shown = evalledger(db.parent, db, "show", run_id, "--json")
    assert shown.returncode == 0, shown
    data = json.loads(shown.stdout)
    return {"counts": [data[k] for k in ("tasks_planned", "tasks_run", "tasks_succeeded",
                                         "tasks_failed", "tasks_error", "tasks_unfinished")],
            "status": data["status"],
            "tasks": {t["task_key"]: t["final_status"] for t in data["tasks"]}}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_two_shards_merge_into_the_run_one_machine_would_have_made(suite: Path) -> None:
    a, b, single, merged = (suite / n for n in ("a.db", "b.db", "single.db", "merged.db"))
    for db, shard in ((a, "1/2"), (b, "2/2")):
        result = evalledger(suite, db, "run", "tasks", "--run-id", RUN, "--shard", shard)
        assert result.returncode == 1, result  # some tasks fail on purpose
    evalledger(suite, single, "run", "tasks", "--run-id", RUN)
    shard_keys = [{t for t in statuses(db, RUN)["tasks"]} for db in (a, b)]  # type: ignore[union-attr]
    assert shard_keys[0] and shard_keys[1] and not shard_keys[0] & shard_keys[1]

    result = evalledger(suite, merged, "merge", str(a), str(b))
    assert result.returncode == 0, result
    assert statuses(merged, RUN) == statuses(single, RUN)
    with Ledger(merged, read_only=True) as ledger:
        assert verify(ledger).ok
        provenance = [e for e in ledger.events(RUN) if isinstance(e, RunMerged)]
        count = ledger.count()
    with Ledger(a, read_only=True) as source:
        assert provenance[0].source_ledger == source.ledger_id
        assert provenance[0].source_seqs[0] == 1
    # Listed once, in the CLI and in the SQL view.
    runs = evalledger(suite, merged, "runs", "--json")
    assert [json.loads(line)["run_id"] for line in runs.stdout.splitlines()] == [RUN]
    view = evalledger(suite, merged, "sql", "SELECT run_id, tasks_planned FROM runs",
                      "--format", "json")
    assert [json.loads(line) for line in view.stdout.splitlines()] == [
        {"run_id": RUN, "tasks_planned": 8}]
    assert evalledger(suite, merged, "verify", "--deep").returncode == 0

    again = evalledger(suite, merged, "merge", str(a), str(b))
    assert "0 of" in again.stdout
    with Ledger(merged, read_only=True) as ledger:
        assert ledger.count() == count


def test_export_and_import_events_carry_a_run_byte_for_byte(suite: Path) -> None:
    source, target = suite / "source.db", suite / "target.db"
    evalledger(suite, source, "run", "tasks", "--run-id", RUN)
    exported = suite / "run.ndjson.gz"
    result = evalledger(suite, source, "export", RUN, "-o", str(exported))
    assert result.returncode == 0, result
    with gzip.open(exported, "rt", encoding="utf-8") as f:
        *lines, last = f.read().splitlines()
    assert all(json.loads(line)["type"] != "run.snapshot" for line in lines)
    # The export ends with its trailer: how many events, their digest, where from.
    trailer = json.loads(last)["trailer"]
    assert trailer["events"] == len(lines)
    with Ledger(source, read_only=True) as ledger:
        assert trailer["ledger_id"] == ledger.ledger_id

    assert evalledger(suite, target, "import-events", str(exported)).returncode == 0
    assert facts(target, RUN) == facts(source, RUN)
    assert statuses(target, RUN) == statuses(source, RUN)
    again = evalledger(suite, target, "import-events", str(exported))
    assert f"0 of {len(lines)} events added" in again.stdout
    assert evalledger(suite, target, "verify", "--deep").returncode == 0


def test_a_bad_line_stops_the_import_before_anything_is_appended(suite: Path) -> None:
    source, target = suite / "source.db", suite / "target.db"
    evalledger(suite, source, "run", "tasks", "--run-id", RUN)
    plain = suite / "events.ndjson"
    evalledger(suite, source, "export", RUN, "-o", str(plain))
    lines = plain.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[3])
    broken["payload"] = {"nonsense": True}
    plain.write_text("\n".join([*lines[:3], json.dumps(broken), *lines[4:]]) + "\n")
    error = assert_one_line_error(evalledger(suite, target, "import-events", str(plain)))
    assert "line 4:" in error and "nothing was imported" in error
    if target.exists():
        with Ledger(target, read_only=True) as ledger:
            assert ledger.count() == 0


def test_merge_refuses_a_newer_ledger_and_itself(suite: Path) -> None:
    newer, mine = suite / "newer.db", suite / "mine.db"
    Ledger(newer).close()
    with closing(sqlite3.connect(newer)) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        conn.commit()
    error = assert_one_line_error(evalledger(suite, mine, "merge", str(newer)))
    assert "schema version 99" in error
    Ledger(mine).close()
    assert "the ledger itself" in assert_one_line_error(evalledger(suite, mine, "merge",
                                                                   str(mine)))


@pytest.mark.parametrize("shard", ["0/2", "3/2", "x/2", "1/0"])
def test_a_bad_shard_is_one_line(suite: Path, shard: str) -> None:
    result = evalledger(suite, suite / "l.db", "run", "tasks", "--run-id", "r", "--shard", shard)
    assert "--shard" in assert_one_line_error(result)


def test_a_shard_needs_a_run_id(suite: Path) -> None:
    result = evalledger(suite, suite / "l.db", "run", "tasks", "--shard", "1/2")
    assert "--run-id" in assert_one_line_error(result)


def _turn_a_failure_into_success(db: Path) -> None:
    """What an agent with write access to a ledger can do: drop the triggers and turn its
    FAILURE into a SUCCESS that validates (status, category, score and criteria agree):
    only the hash chain, broken there, tells."""
    with Ledger(db, read_only=True) as ledger:
        failed = next(e for e in ledger.events(RUN, types={"task.completed"})
                      if isinstance(e, TaskCompleted) and e.final_status == FinalStatus.FAILURE)
        seq = next(r.seq for r in ledger.rows(RUN) if r.event_id == failed.event_id)
    lie = failed.model_copy(update={
        "final_status": FinalStatus.SUCCESS, "category": Category.SUCCEEDED,
        "weighted_score": 1.0, "exit_code": 0,
        "criteria": [c.model_copy(update={"passed": True}) for c in failed.criteria]})
    with closing(sqlite3.connect(db)) as raw:
        raw.executescript("DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete;")
        raw.execute("UPDATE events SET payload = ? WHERE seq = ?", [encode_payload(lie), seq])
        raw.commit()
    with Ledger(db, read_only=True) as ledger:
        found = verify_events(ledger)
    assert (found.broken_links, found.invalid_payloads, found.noncanonical) == ([seq], [], [])


def _append_a_payload_no_fold_reads(db: Path) -> None:
    """A task.completed whose payload fits no event, chained correctly after the last row:
    the chain alone cannot tell it from a real one."""
    with closing(sqlite3.connect(db)) as raw:
        seq, prev = raw.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        row = EventRow("f" * 32, RUN, "t1", "task.completed", "2026-01-01T00:00:00Z",
                       '{"final_status":"SUCCESS"}', seq + 1, None)
        raw.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [row.seq, *row[:6], link_hash(text_hash(prev), row)])
        raw.commit()


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("forge", [_turn_a_failure_into_success, _append_a_payload_no_fold_reads],
                         ids=["changed-in-place", "invalid-rechained"])
def test_merge_refuses_a_ledger_that_does_not_verify_and_merges_nothing_of_it(
        suite: Path, forge: Callable[[Path], None]) -> None:
    """Chained anew here, a changed row would verify; a payload no fold reads would make
    this ledger fail verify for good."""
    source, into = suite / "a.db", suite / "into.db"
    evalledger(suite, source, "run", "tasks", "--run-id", RUN)
    evalledger(suite, into, "run", "tasks", "--run-id", "mine")
    with Ledger(into, read_only=True) as ledger:
        before = ledger.count()
    forge(source)

    error = assert_one_line_error(evalledger(suite, into, "merge", str(source)))
    assert f"{source} does not verify (" in error and "nothing of it was merged" in error
    with Ledger(into, read_only=True) as ledger:
        assert ledger.count() == before
        assert verify(ledger).ok


def test_merge_refuses_a_ledger_whose_payload_is_computed_as_it_is_read(tmp_path: Path) -> None:
    """A 28 KB file whose payload column is generated (printf, 300 MB a row) took a merge
    past a gigabyte to a MemoryError traceback. A real process, its memory bounded: the
    refusal comes before a row is read."""
    bomb = tmp_path / "bomb.db"
    with closing(sqlite3.connect(bomb)) as conn:
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('ledger_id', '11111111-1111-4111-8111-111111111111'),
                ('created_at', '2026-01-01T00:00:00.000000Z'), ('schema_version', '17');
            CREATE TABLE events (seq INTEGER PRIMARY KEY, event_id BLOB NOT NULL UNIQUE,
                run_id TEXT NOT NULL, task_key TEXT, type TEXT NOT NULL, ts TEXT NOT NULL,
                hash BLOB NOT NULL);""")
        conn.executemany("INSERT INTO events (seq, event_id, run_id, type, ts, hash) "
                         "VALUES (?, ?, 'r', 'run.started', '2026-01-01T00:00:00.000000Z', ?)",
                         [(i, os.urandom(16), os.urandom(32)) for i in range(1, 51)])
        # Added after the rows: SQLite computes it on an insert too (90 s for these).
        conn.execute("ALTER TABLE events ADD COLUMN payload TEXT "
                     "GENERATED ALWAYS AS (printf('%.*c', 300000000, 'x')) VIRTUAL")
        conn.commit()

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run([*COMMAND, "--ledger", str(tmp_path / "into.db"), "merge", str(bomb)],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          preexec_fn=bounded, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"Error: {bomb} is not an evalledger ledger (events.payload is a generated or hidden "
        "column)"], done.stderr


def test_merge_refuses_a_run_claiming_to_have_been_recorded_here(tmp_path: Path) -> None:
    """Another ledger (which verifies: the run came to it "merged") holds a back-dated
    run.started naming this ledger's id: merged, this ledger failed verify for good and
    counted the run as its own."""
    into, other = tmp_path / "into.db", tmp_path / "other.db"
    with Ledger(into) as ledger:
        here = ledger.ledger_id
    forged = RunStarted(run_id="forged", ledger_id=here, ts="2024-01-01T10:00:00.000000Z",
                        planned=["v/k/00"])
    with Ledger(other) as ledger:
        append_all(ledger, [(EventRow.of(forged), 1)], source="somewhere", source_ledger=here)
        ledger.append([TaskStarted(run_id="forged", task_key="v/k/00", task_id="k")])
        assert verify(ledger).ok

    error = assert_one_line_error(evalledger(tmp_path, into, "merge", str(other)))
    assert (f"{other}: seq 1: run forged's run.started says it was recorded in this ledger"
            in error and "nothing of it was merged" in error)
    with Ledger(into, read_only=True) as ledger:
        assert ledger.count() == 0 and verify(ledger).ok


def test_merge_refuses_a_duration_past_its_bound_as_import_events_does(tmp_path: Path) -> None:
    """Two finite durations of 1.7e308 in a ledger that verifies: merged, every read of
    the run overflowed (its mean, its sum)."""
    into, other = tmp_path / "into.db", tmp_path / "other.db"
    with Ledger(other) as ledger:
        ledger.append([RunStarted(run_id="r", ledger_id=ledger.ledger_id, planned=["v/k/00"]),
                       TaskStarted(run_id="r", task_key="v/k/00", task_id="k"),
                       TaskCompleted(run_id="r", task_key="v/k/00", category=Category.SUCCEEDED,
                                     final_status=FinalStatus.SUCCESS, duration_seconds=1.7e308)])
        assert verify(ledger).ok
    error = assert_one_line_error(evalledger(tmp_path, into, "merge", str(other)))
    assert "duration_seconds 1.7e+308 is past 1e+09" in error, error
    with Ledger(into, read_only=True) as ledger:
        assert ledger.count() == 0


def test_merge_of_a_ledger_whose_name_is_not_utf8_records_it_escaped(tmp_path: Path) -> None:
    """run.merged could not record the name (a PydanticSerializationError traceback)."""
    other = Path(os.fsdecode(bytes(tmp_path) + b"/other-\xff.db"))
    with Ledger(other) as ledger:
        ledger.append([RunStarted(run_id="r", ledger_id=ledger.ledger_id, planned=["v/k/00"])])
    into = tmp_path / "into.db"
    done = evalledger(tmp_path, into, "merge", str(other))
    assert done.returncode == 0, done
    assert "other-\\xff.db: 1 of 1 events added" in done.stdout
    with Ledger(into, read_only=True) as ledger:
        merged = [e for e in ledger.events("r") if isinstance(e, RunMerged)]
        assert verify(ledger).ok
    assert [m.source for m in merged] == [f"{tmp_path.resolve()}/other-\\xff.db"]
