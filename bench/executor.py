"""Executor overhead per task, and writer throughput against raw SQLite.

1. Tasks of 0 ms (``true``), 10 ms and 100 ms (``sleep``) at max_parallel=8, through
   ``run_batch`` with a real ledger, and through a bare trio loop that spawns the same
   argv with the same limit (pipes and a new session, as the runner does), in the same
   run, alternating which goes first, best of --rounds. For each length: the ratio of
   throughputs, and what the executor adds per task in wall time and in CPU time of
   this process (its threads included; the commands' own CPU is the same on both sides
   and not counted).
2. 8 tasks that each print --lines short lines as fast as they can, through
   ``run_batch``: events/s the writer sustained (every line checked to be in the
   ledger; events counted as lines, as a chunk of them is one row); then the same
   events one row each (ids and payloads as read back) inserted into a fresh ledger
   with one raw ``executemany`` in one transaction: what SQLite alone does with them
   in the layout before chunks (what this ratio compared with before schema 17).

Targets: extra CPU per task at 0 ms <= 300 us, ratio >= 0.75 at 0 ms and >= 0.95 at
10 ms; writer >= 0.8 of raw with no line lost. Lines scripts read:
``ratio executor/bare at 0 ms: 0.78``, ``extra CPU per task at 0 ms: 280 us``,
``ratio writer/raw: 0.83``.

Run: python bench/executor.py [--tasks N] [--lines N] [--rounds N]. Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, run_batch
from evalledger.ledger import Ledger
from evalledger.ledger._rows import stored_id
from evalledger.options import RunOptions
from evalledger.suite import ExitCode, ResolvedTask

PARALLEL = 8
# Task length -> the argv both sides run, and the share of --tasks to run at it.
LENGTHS = {0: (["true"], 1.0), 10: (["sleep", "0.01"], 0.5), 100: (["sleep", "0.1"], 0.2)}


def _task(i: int, command: list[str], timeout: float = 600) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/t{i:05d}/00", task_id=f"t{i:05d}", variant_id="default",
        replicate_index=0, source="bench", command=command, timeout=timeout,
        success_criteria=[ExitCode(type="exit_code")],
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def bare(argv: list[str], n: int) -> None:
    limiter = trio.CapacityLimiter(PARALLEL)

    async def one() -> None:
        async with limiter:
            await trio.run_process(argv, stdin=b"", capture_stdout=True, capture_stderr=True,
                                   start_new_session=True)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)


def run_executor(tmp: Path, name: str, tasks: list[ResolvedTask]) -> Ledger:
    ledger = Ledger(tmp / f"{name}.db")
    options = RunOptions(max_parallel=PARALLEL, out=str(tmp / "out"), preservation_mode="none")
    result = trio.run(run_batch, ledger, tasks, BatchConfig(run_id=name, options=options))
    assert len(result.completed) == len(tasks), "a task went missing"
    return ledger


def measure(side: str, tmp: Path, argv: list[str], n: int, label: str) -> tuple[float, float]:
    """(wall, CPU of this process) of one side."""
    cpu, start = _cpu(), time.perf_counter()
    if side == "bare":
        trio.run(bare, argv, n)
    else:
        run_executor(tmp, label, [_task(i, argv) for i in range(n)]).close()
    return time.perf_counter() - start, _cpu() - cpu


def overhead(tmp: Path, tasks: int, rounds: int) -> None:
    for ms, (argv, share) in LENGTHS.items():
        n = max(PARALLEL, int(tasks * share))
        best: dict[str, tuple[float, float]] = {}
        for r in range(rounds):
            for side in (("bare", "exec") if r % 2 == 0 else ("exec", "bare")):
                wall, cpu = measure(side, tmp, argv, n, f"t{ms}-{r}")
                if side not in best or wall < best[side][0]:
                    best[side] = (wall, cpu)
        (bare_wall, bare_cpu), (exec_wall, exec_cpu) = best["bare"], best["exec"]
        print(f"{ms:3d} ms tasks: {n} at max_parallel={PARALLEL} (best of {rounds}): bare "
              f"{n / bare_wall:7,.0f}/s, executor {n / exec_wall:7,.0f}/s; CPU bare "
              f"{bare_cpu / n * 1e6:5.0f} us/task, executor {exec_cpu / n * 1e6:5.0f} us/task")
        print(f"ratio executor/bare at {ms} ms: {bare_wall / exec_wall:.2f}")
        print(f"extra wall per task at {ms} ms: {(exec_wall - bare_wall) / n * 1e6:.0f} us")
        print(f"extra CPU per task at {ms} ms: {(exec_cpu - bare_cpu) / n * 1e6:.0f} us")


def writer(tmp: Path, lines: int) -> None:
    script = ("import sys\nw = sys.stdout.write\n"
              f"for i in range({lines}): w(f'line {{i}}\\n')\n")
    chatty = [_task(i, [sys.executable, "-c", script]) for i in range(PARALLEL)]
    start = time.perf_counter()
    ledger = run_executor(tmp, "chatty", chatty)
    elapsed = time.perf_counter() - start
    # Counted as lines: a chunk (task.lines) holds many; its seqs count them.
    recorded = sum(1 for _ in ledger.rows("chatty", types=["task.output"]))
    events = ledger.last_seq()
    # What SQLite alone does with the same events one row each (the layout before chunks:
    # what this ratio measured then), ids and hashes as stored.
    rows = [(r.seq, stored_id(r.event_id), r.run_id, r.task_key, r.type, r.ts, r.payload,
             bytes(32)) for r in ledger.rows()]
    ledger.close()
    expected = PARALLEL * lines
    print(f"chatty tasks: {PARALLEL} x {lines:,} lines")
    print(f"lines recorded: {recorded:,} of {expected:,} "
          f"({'none lost' if recorded == expected else 'LOST LINES'})")
    # The same rows into a fresh ledger (same schema, same pages), one executemany.
    Ledger(tmp / "raw.db").close()
    raw = sqlite3.connect(tmp / "raw.db", isolation_level=None)
    raw.execute("PRAGMA synchronous = NORMAL")
    start_raw = time.perf_counter()
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany("INSERT INTO events (seq, event_id, run_id, task_key, type, ts, payload, "
                    "hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    raw.execute("COMMIT")
    raw_elapsed = time.perf_counter() - start_raw
    raw.close()
    ours, theirs = events / elapsed, len(rows) / raw_elapsed
    print(f"writer (run_batch, commands included): {ours:9,.0f} events/s "
          f"({events:,} events in {elapsed:.2f}s)")
    print(f"raw executemany of the same rows:      {theirs:9,.0f} events/s")
    print(f"ratio writer/raw: {ours / theirs:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=["overhead", "writer"])
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw_tmp:
        tmp = Path(raw_tmp)
        if args.only != "writer":
            overhead(tmp, args.tasks, args.rounds)
        if args.only != "overhead":
            writer(tmp, args.lines)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
