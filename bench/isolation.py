"""What isolation costs per attempt: ``bwrap`` and ``docker`` against ``none``, measured
in one run.

1. --tasks no-op tasks (``true``, one criterion) through ``run_batch`` with a real
   ledger, one at a time (what an attempt waits for) and at max_parallel=8 (what a
   batch sustains), each mode in turn, alternating which goes first, best of --rounds:
   wall time per attempt, the ratio none/mode, and what the mode adds per attempt.
   Isolated, each attempt also runs its probes and hashes its workspace. docker runs
   --docker-tasks of them (a container costs hundreds of ms), in the busybox test image.
2. The example suite (examples/smoke/tasks, 4 tasks with real criteria; one stalls
   until its 2 s timeout) through the CLI, once per mode per round: wall time (docker
   in the test image with this machine's Python).

Target (issue #23): bwrap adds at most 15 ms per attempt. Lines scripts read:
``bwrap adds per attempt (one at a time): 9.1 ms``, ``ratio none/bwrap at 8: 0.41``.

Run: python bench/isolation.py [--tasks N] [--docker-tasks N] [--rounds N]. Not part
of the tests; needs bubblewrap (docker is measured when a daemon answers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, run_batch
from evalledger.executor.isolation import IsolationUnavailable, bwrap, docker
from evalledger.ledger import Ledger
from evalledger.options import RunOptions
from evalledger.suite import ExitCode, ResolvedTask

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "smoke" / "tasks"
# The image each mode runs no-op tasks in (docker: set in main once built).
IMAGES: dict[str, str | None] = {"none": None, "bwrap": None}


def _task(i: int, isolation: str) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/t{i:05d}/00", task_id=f"t{i:05d}", variant_id="default",
        replicate_index=0, source="bench", command=["true"], isolation=isolation,
        image=IMAGES[isolation], success_criteria=[ExitCode(type="exit_code")],
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


def no_ops(tmp: Path, counts: dict[str, int], rounds: int) -> None:
    modes = list(counts)
    for parallel in (1, 8):
        per: dict[str, float] = {}
        for mode in modes:  # each against none at its own count, in the same rounds
            n = counts[mode]
            best = {"none": float("inf"), mode: float("inf")}
            for r in range(rounds):
                for side in ("none", mode) if r % 2 == 0 else (mode, "none"):
                    best[side] = min(best[side], batch(tmp, f"{side}-{mode}-{parallel}-{r}",
                                                       side, n, parallel))
            per[mode] = best[mode] / n * 1000
            base = best["none"] / n * 1000
            label = "one at a time" if parallel == 1 else f"at {parallel}"
            print(f"{n} no-op tasks at max_parallel={parallel} (best of {rounds}): none "
                  f"{base:.1f} ms/attempt, {mode} {per[mode]:.1f} ms/attempt")
            print(f"ratio none/{mode} at {parallel}: {best['none'] / best[mode]:.2f}")
            print(f"{mode} adds per attempt ({label}): {per[mode] - base:.1f} ms")


def example(tmp: Path, rounds: int, modes: list[str]) -> None:
    best = dict.fromkeys(["none", *modes], float("inf"))
    layer = tmp / "docker.yaml"  # the example suite in the test image with a Python
    layer.write_text(json.dumps({"experiment_id": "in-docker", "tasks": [str(EXAMPLE)],
                                 "defaults": {"isolation": "docker",
                                              "image": IMAGES.get("python")}}))
    for r in range(rounds):
        for mode in best if r % 2 == 0 else reversed(list(best)):
            how = (["-e", str(layer)] if mode == "docker"
                   else [str(EXAMPLE), "--isolation", mode])
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "evalledger.cli", "--ledger", str(tmp / "example.db"),
                 "run", *how, "--require-isolation", "--out", str(tmp / "runs")],
                capture_output=True, text=True, check=False)
            wall = time.perf_counter() - start
            assert done.returncode == 0, done.stdout + done.stderr
            best[mode] = min(best[mode], wall)
    print(f"example suite (4 tasks, best of {rounds}): "
          + ", ".join(f"{mode} {best[mode]:.2f} s" for mode in best)
          + "; " + ", ".join(f"ratio none/{m}: {best['none'] / best[m]:.2f}" for m in modes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--docker-tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        print(f"{bwrap().version}")
    except IsolationUnavailable as e:
        sys.exit(f"bench/isolation.py needs bubblewrap: {e}")
    counts = {"bwrap": args.tasks}
    try:
        print(docker().version)
        sys.path.insert(0, str(ROOT))
        from tests.docker_images import build  # the same images the tests use

        IMAGES["docker"], IMAGES["python"] = build("busybox"), build("python")
        counts["docker"] = args.docker_tasks
    except IsolationUnavailable as e:
        print(f"docker not measured: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        no_ops(Path(tmp), counts, args.rounds)
        example(Path(tmp), args.rounds, list(counts))


if __name__ == "__main__":
    main()
