"""``verify`` reads one state of the ledger while others write it.

A merge commits a run's ``run.started`` (naming the ledger it came from) together
with the ``run.merged`` that explains it. A verify that read ``run.merged`` rows in one
query and scanned the events in another could see the ``run.started`` without its
``run.merged`` and call a fine ledger's identity changed. Every query of verify runs
in one read transaction: one WAL snapshot, whatever commits meanwhile.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from evalledger.app._snapshot_check import SnapshotCheck
from evalledger.ledger import Ledger, verify

from ..cli.helpers import COMMAND, PATIENCE, _env, wait_until
from .runs import merged_run, native_run


def test_verify_reads_one_state_while_merges_commit_between_its_queries(db_path: Path) -> None:
    with Ledger(db_path) as ledger:
        native_run(ledger, "here")
    writer = Ledger(db_path)
    numbers = itertools.count(1)

    def merge_one(statement: str) -> None:
        # SQLite calls this as each statement of the reader starts, before it reads: a
        # whole merged run commits between every two queries of verify.
        writer.append(merged_run(f"merged-{next(numbers)}"))

    reader = Ledger(db_path, read_only=True)
    try:
        before = reader.count()
        reader.db.conn.set_trace_callback(merge_one)
        report = verify(reader)
        reader.db.conn.set_trace_callback(None)
        merges = next(numbers) - 1
        assert report.ok, report.lines()
        assert merges >= 5, merges  # verify ran several queries, each after a merge
        # One state throughout: the one its first query saw, whole merged runs in it.
        size = len(merged_run("x"))
        assert reader.count() == before + merges * size
        assert (report.events - before) % size == 0, report.events
        assert report.events < reader.count()
    finally:
        reader.close()
        writer.close()


def test_a_read_transaction_keeps_one_state_until_it_ends(db_path: Path) -> None:
    with Ledger(db_path) as writer, Ledger(db_path, read_only=True) as reader:
        writer.append(merged_run("a"))
        with reader.read_transaction():
            seen = reader.count()
            writer.append(merged_run("b"))
            with reader.read_transaction():  # joins the open one
                assert reader.count() == seen
            assert reader.last_seq() == seen
        assert reader.count() == 2 * seen


# Paced: a commit every few milliseconds is a writer every verify overlaps; flat out, it
# made each verify read a ledger growing faster than it reads (16 s of a loaded machine).
WRITER = """
import sys, time
from pathlib import Path
from tests.ledger.runs import merged_run, native_run
from evalledger.ledger import Ledger

db, stop = Path(sys.argv[1]), Path(sys.argv[2])
with Ledger(db) as ledger:
    for i in range(1, 10**6):
        if stop.exists():
            break
        ledger.append(merged_run(f"merged-{i}", lines=20))
        native_run(ledger, f"here-{i}")
        print(i, flush=True)
        time.sleep(0.02)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_verify_never_fails_while_another_process_merges_and_records_runs(
    db_path: Path, tmp_path: Path,
) -> None:
    with Ledger(db_path) as ledger:
        native_run(ledger, "first")
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db_path), str(stop)],
        cwd=Path(__file__).resolve().parents[2], env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "1", writer.stderr
        counts = []
        for _ in range(4):
            done = subprocess.run([*COMMAND, "--ledger", str(db_path), "verify"],
                                  env=_env(), capture_output=True, text=True, timeout=PATIENCE * 4)
            assert done.returncode == 0, done
            counts.append(int(done.stdout.split(": ")[2].split()[0]))
        # The writer kept committing while verify read: each verify saw a later state.
        assert counts == sorted(counts) and counts[0] < counts[-1], counts
    finally:
        stop.touch()
        wait_until(lambda: writer.poll() is not None, "the writer to stop")
        _, err = writer.communicate()
    assert writer.returncode == 0, err
    with Ledger(db_path, read_only=True) as ledger:
        final = verify(ledger, checks=[SnapshotCheck()])
    assert final.ok, final.lines()
