"""Several real OS processes appending to one ledger file at the same time.

Each writer is a fresh interpreter (``subprocess``, not a fork of pytest), so every
one has its own SQLite connection, its own event-id generator and its own GIL: the
only thing they share is the file and its write lock.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from evalledger.ledger import Ledger, verify
from tests.waiting import wait_until

PROCESSES = 4
BATCHES = 50
BATCH_SIZE = 100
PER_PROCESS = BATCHES * BATCH_SIZE
TOTAL = PROCESSES * PER_PROCESS

# argv: ledger path, start-barrier path, ready-marker path, output path, writer index,
# batches, batch size, writer count. The writer opens the ledger, says it is ready,
# waits for the barrier file, then appends; after its first batch it waits until
# every writer has appended one (so their batches interleave, however the machine
# schedules them); it writes the ids and seqs it saw to the output file.
WRITER = r"""
import json, os, sys, time
from pathlib import Path

from evalledger.ledger import Ledger, TaskOutput

path, barrier, ready, out = (Path(a) for a in sys.argv[1:5])
index, batches, size, writers = (int(a) for a in sys.argv[5:9])
run_id = f"proc-{index}"
deadline = time.monotonic() + 60

def wait_for(what, done):
    while not done():
        if time.monotonic() > deadline:
            sys.exit(f"{what} never appeared")
        time.sleep(0.001)

with Ledger(path) as ledger:
    ready.touch()
    wait_for("start barrier", barrier.exists)
    ids, seqs = [], []
    for b in range(batches):
        if b == 1:
            (barrier.parent / f"first-{index}").touch()
            wait_for("every writer's first batch", lambda: all(
                (barrier.parent / f"first-{i}").exists() for i in range(writers)))
        batch = [
            TaskOutput(
                run_id=run_id, task_key=f"task-{b}", line=f"{index}:{b}:{j}", n=b * size + j
            )
            for j in range(size)
        ]
        got = ledger.append(batch)
        ids.append([e.event_id for e in batch])
        seqs.append(got)
out.write_text(json.dumps({"ids": ids, "seqs": seqs}))
"""


def _ready(paths: list[Path], procs: list[subprocess.Popen[bytes]]) -> bool:
    """Whether every writer said it is ready; fails if one exited first."""
    dead = [p for p in procs if p.poll() is not None]
    assert not dead, f"a writer exited before it was ready: {dead[0].communicate()}"
    return all(p.exists() for p in paths)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_four_processes_append_concurrently(db_path: Path, tmp_path: Path) -> None:
    # Create (and migrate) the file first: this test is about concurrent appends.
    Ledger(db_path).close()
    barrier = tmp_path / "go"
    readies = [tmp_path / f"ready-{i}" for i in range(PROCESSES)]
    outs = [tmp_path / f"out-{i}.json" for i in range(PROCESSES)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(db_path),
                str(barrier),
                str(readies[i]),
                str(outs[i]),
                str(i),
                str(BATCHES),
                str(BATCH_SIZE),
                str(PROCESSES),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(PROCESSES)
    ]
    try:
        wait_until(lambda: _ready(readies, procs), "every writer to get ready", every=0.01)
        barrier.touch()
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    for i, (p, (_, err)) in enumerate(zip(procs, results, strict=True)):
        stderr = err.decode(errors="replace")
        assert p.returncode == 0, f"writer {i} exited {p.returncode}:\n{stderr}"
        assert "locked" not in stderr.lower(), f"writer {i}:\n{stderr}"

    reported = [json.loads(o.read_text()) for o in outs]

    with Ledger(db_path, read_only=True) as ledger:
        assert ledger.count() == TOTAL
        assert ledger.last_seq() == TOTAL
        rows = list(ledger.rows())
        report = verify(ledger)
        assert report.ok, report.lines()
        assert report.events == TOTAL
        per_run = {
            f"proc-{i}": [e.line for e in ledger.events(f"proc-{i}", types={"task.output"})]
            for i in range(PROCESSES)
        }

    # Seqs are exactly 1..N, and every event id is stored exactly once.
    assert [r.seq for r in rows] == list(range(1, TOTAL + 1))
    stored_ids = Counter(r.event_id for r in rows)
    assert all(n == 1 for n in stored_ids.values())
    appended_ids = [eid for rep in reported for batch in rep["ids"] for eid in batch]
    assert len(appended_ids) == TOTAL
    assert Counter(appended_ids) == stored_ids

    seq_of = {r.event_id: r.seq for r in rows}
    row_at = {r.seq: r for r in rows}
    spans = []
    for i, rep in enumerate(reported):
        run_id = f"proc-{i}"
        # Each process's events replay in the order it appended them.
        assert per_run[run_id] == [
            f"{i}:{b}:{j}" for b in range(BATCHES) for j in range(BATCH_SIZE)
        ]
        flat = [seq_of[eid] for batch in rep["ids"] for eid in batch]
        assert flat == sorted(flat)
        for b, (ids, seqs) in enumerate(zip(rep["ids"], rep["seqs"], strict=True)):
            # append() returned the seqs the rows really got...
            assert seqs == [seq_of[eid] for eid in ids]
            # ...and a batch is one contiguous block: interleaving is per batch.
            assert seqs == list(range(seqs[0], seqs[0] + BATCH_SIZE)), (i, b)
            assert {row_at[s].run_id for s in seqs} == {run_id}
        spans.append((flat[0], flat[-1]))

    # The writers really ran at the same time: every two of them interleaved batches (each
    # appended its first batch before any appended its second).
    assert all(a[0] < b[1] and b[0] < a[1] for k, a in enumerate(spans) for b in spans[k + 1 :]), (
        spans
    )


def test_first_open_waits_for_a_writer_on_a_fresh_file(db_path: Path) -> None:
    # Another connection is mid-write on a file that is not yet a WAL ledger (say, the
    # first of several `evalledger run`s creating it); it commits 0.3 s later. The busy
    # timeout is generous: the open waits for the commit, however late it comes.
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        t0 = time.monotonic()
        releaser = threading.Timer(0.3, other.execute, ["COMMIT"])
        releaser.start()
        try:
            with Ledger(db_path, busy_timeout=30) as ledger:
                assert ledger.count() == 0
        finally:
            waited = time.monotonic() - t0
            releaser.join()
        assert waited >= 0.3  # it did wait: the commit came no earlier
    finally:
        other.close()
