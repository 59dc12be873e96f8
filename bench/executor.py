"""Executor overhead and writer throughput.

1. 2,000 no-op tasks (``true``) at max_parallel=8, through ``run_batch`` with a real
   ledger, and through a bare trio loop that spawns the same argv with the same
   limit (pipes and a new session, as the runner does), in the same run. Prints
   tasks/s for each and executor/bare (target: >= 0.8).
2. 8 tasks that each print 50,000 short lines as fast as they can: events/s the
   writer sustained, and a check that every line is in the ledger.

Run: python bench/executor.py [--tasks N] [--lines N]. Not part of the tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, run_batch
from evalledger.ledger import Ledger
from evalledger.options import RunOptions
from evalledger.tasks import ExitCode, ResolvedTask

PARALLEL = 8


def _task(i: int, command: list[str], timeout: float = 600) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/t{i:05d}/00", task_id=f"t{i:05d}", variant_id="default",
        replicate_index=0, source="bench", command=command, timeout=timeout,
        success_criteria=[ExitCode(type="exit_code")],
    )


async def bare(n: int) -> None:
    limiter = trio.CapacityLimiter(PARALLEL)

    async def one() -> None:
        async with limiter:
            await trio.run_process(
                ["true"], stdin=b"", capture_stdout=True, capture_stderr=True,
                start_new_session=True,
            )

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)


def run_executor(tmp: Path, name: str, tasks: list[ResolvedTask]) -> tuple[float, Ledger]:
    ledger = Ledger(tmp / f"{name}.db")
    options = RunOptions(max_parallel=PARALLEL, out=str(tmp / "out"), preservation_mode="none")
    config = BatchConfig(run_id=name, options=options)
    start = time.perf_counter()
    result = trio.run(run_batch, ledger, tasks, config)
    elapsed = time.perf_counter() - start
    assert len(result.completed) == len(tasks), "a task went missing"
    return elapsed, ledger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--lines", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as raw_tmp:
        tmp = Path(raw_tmp)
        tasks = [_task(i, ["true"]) for i in range(args.tasks)]
        # Alternate order across two rounds; keep the best of each (least disturbed).
        bare_times, exec_times = [], []
        for r in range(2):
            for side in (("bare", "exec") if r == 0 else ("exec", "bare")):
                if side == "bare":
                    start = time.perf_counter()
                    trio.run(bare, args.tasks)
                    bare_times.append(time.perf_counter() - start)
                else:
                    elapsed, ledger = run_executor(tmp, f"noop-{r}", tasks)
                    ledger.close()
                    exec_times.append(elapsed)
        bare_rate, exec_rate = args.tasks / min(bare_times), args.tasks / min(exec_times)
        print(f"no-op tasks: {args.tasks} at max_parallel={PARALLEL} (best of 2)")
        print(f"bare trio:          {bare_rate:10,.0f} tasks/s")
        print(f"executor + ledger:  {exec_rate:10,.0f} tasks/s")
        print(f"ratio executor/bare:{exec_rate / bare_rate:10.2f}  (target >= 0.8)")

        script = (
            "import sys\nw = sys.stdout.write\n"
            f"for i in range({args.lines}): w(f'line {{i}}\\n')\n"
        )
        chatty = [_task(i, [sys.executable, "-c", script]) for i in range(PARALLEL)]
        elapsed, ledger = run_executor(tmp, "chatty", chatty)
        lines = ledger.db.execute(
            "SELECT count(*) FROM events WHERE run_id = 'chatty' AND type = 'task.output'"
        ).fetchone()[0]
        expected = PARALLEL * args.lines
        ledger.close()
        print(f"chatty tasks: {PARALLEL} x {args.lines} lines")
        print(f"lines recorded:     {lines:10,} of {expected:,} "
              f"({'none lost' if lines == expected else 'LOST LINES'})")
        print(f"writer sustained:   {lines / elapsed:10,.0f} events/s over {elapsed:.2f}s "
              f"(target >= 100,000)")


if __name__ == "__main__":
    main()
