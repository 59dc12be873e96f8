"""What isolation costs per attempt: ``bwrap`` against ``none``, measured in one run.

1. --tasks no-op tasks (``true``, one criterion) through ``run_batch`` with a real
   ledger, one at a time (what an attempt waits for) and at max_parallel=8 (what a
   batch sustains), each mode in turn, alternating which goes first, best of --rounds:
   wall time per attempt, the ratio none/bwrap, and what bwrap adds per attempt.
   Under bwrap each attempt also runs its probes and hashes its workspace.
2. The example suite (examples/smoke/tasks, 4 tasks with real criteria; one stalls
   until its 2 s timeout) through the CLI, once per mode per round: wall time.

Target (issue #23): bwrap adds at most 15 ms per attempt. Lines scripts read:
``bwrap adds per attempt (one at a time): 9.1 ms``, ``ratio none/bwrap at 8: 0.41``.

Run: python bench/isolation.py [--tasks N] [--rounds N]. Not part of the tests; needs
bubblewrap.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, run_batch
from evalledger.executor.isolation import IsolationUnavailable, bwrap
from evalledger.ledger import Ledger
from evalledger.options import RunOptions
from evalledger.suite import ExitCode, ResolvedTask

MODES = ("none", "bwrap")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smoke" / "tasks"


def _task(i: int, isolation: str) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/t{i:05d}/00", task_id=f"t{i:05d}", variant_id="default",
        replicate_index=0, source="bench", command=["true"], isolation=isolation,
        success_criteria=[ExitCode(type="exit_code")],
    )


def batch(tmp: Path, name: str, isolation: str, n: int, parallel: int) -> float:
    """Wall seconds of one batch of ``n`` no-op tasks."""
    with Ledger(tmp / f"{name}.db") as ledger:
        options = RunOptions(max_parallel=parallel, out=str(tmp / "out"),
                             preservation_mode="none")
        tasks = [_task(i, isolation) for i in range(n)]
        start = time.perf_counter()
        result = trio.run(run_batch, ledger, tasks, BatchConfig(run_id=name, options=options))
        wall = time.perf_counter() - start
    statuses = {c.final_status for c in result.completed}
    assert len(result.completed) == n and statuses == {"SUCCESS"}, statuses
    return wall


def no_ops(tmp: Path, n: int, rounds: int) -> None:
    for parallel in (1, 8):
        best = dict.fromkeys(MODES, float("inf"))
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else reversed(MODES):
                best[mode] = min(best[mode], batch(tmp, f"{mode}-{parallel}-{r}", mode, n,
                                                   parallel))
        per = {mode: best[mode] / n * 1000 for mode in MODES}
        print(f"{n} no-op tasks at max_parallel={parallel} (best of {rounds}): "
              + ", ".join(f"{mode} {per[mode]:.1f} ms/attempt" for mode in MODES))
        print(f"ratio none/bwrap at {parallel}: {best['none'] / best['bwrap']:.2f}")
        label = "one at a time" if parallel == 1 else f"at {parallel}"
        print(f"bwrap adds per attempt ({label}): {per['bwrap'] - per['none']:.1f} ms")


def example(tmp: Path, rounds: int) -> None:
    best = dict.fromkeys(MODES, float("inf"))
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "evalledger.cli", "--ledger", str(tmp / "example.db"),
                 "run", str(EXAMPLE), "--isolation", mode, "--require-isolation",
                 "--out", str(tmp / "runs")], capture_output=True, text=True, check=False)
            wall = time.perf_counter() - start
            assert done.returncode == 0, done.stdout + done.stderr
            best[mode] = min(best[mode], wall)
    print(f"example suite (4 tasks, best of {rounds}): "
          + ", ".join(f"{mode} {best[mode]:.2f} s" for mode in MODES)
          + f"; ratio none/bwrap: {best['none'] / best['bwrap']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        print(f"{bwrap().version}")
    except IsolationUnavailable as e:
        sys.exit(f"bench/isolation.py needs bubblewrap: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        no_ops(Path(tmp), args.tasks, args.rounds)
        example(Path(tmp), args.rounds)


if __name__ == "__main__":
    main()
