"""Side by side with Inspect AI: the same no-op samples, the same concurrency.

Each of ``--tasks`` samples (default 500) runs a command (``true``) in a sandbox and is
scored by its exit code:

- evalledger: a folder of task files (``command: "true"``, an ``exit_code``
  criterion), ``evalledger run DIR -j J`` into a fresh ledger;
- Inspect AI: one task whose samples run in the ``local`` sandbox, a solver that
  execs ``true`` there and a scorer that checks its exit code (no model is called:
  ``--model mockllm/model``), ``inspect eval --max-samples J``.

Each whole command is timed in alternating order (``--rounds``, default 2): its wall
time and the CPU time of its process tree; and what each keeps afterwards: the ledger
file (with its reports and snapshots; WAL checkpointed) against Inspect's ``.eval``
log (its compressed log: a zip of JSON).

Inspect AI is a bench-only dependency, in an environment of its own (its pins are not
ours): ``python -m venv /tmp/inspect && /tmp/inspect/bin/pip install inspect-ai``, then
``--inspect /tmp/inspect/bin/inspect``. Without it, evalledger's own figures are
printed and the ratios are not.

Lines scripts read: ``ratio bytes per task evalledger/inspect: 0.95``, ``ratio
tasks/s evalledger/inspect: 4.1`` and ``ratio CPU per task evalledger/inspect: 0.21``.
Run: python bench/peers.py [--tasks N] [-j J] [--rounds R] [--inspect PATH]. Not
part of the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_INSPECT_TASK = '''\
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox


@solver
def run_command():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        result = await sandbox().exec(["true"])
        state.metadata["exit_code"] = result.returncode
        return state
    return solve


@scorer(metrics=[accuracy()])
def exit_code_zero():
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=1.0 if state.metadata.get("exit_code") == 0 else 0.0)
    return score


@task
def noop():
    return Task(dataset=[Sample(input="noop", id=i) for i in range({tasks})],
                solver=run_command(), scorer=exit_code_zero(), sandbox="local")
'''

_TASK = 'prompt: noop\ncommand: "true"\nsuccess_criteria:\n  - {type: exit_code, equals: 0}\n'


class Measured:
    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.bytes: list[int] = []

    def line(self, name: str, tasks: int) -> str:
        wall, cpu = statistics.median(self.wall), statistics.median(self.cpu)
        size = statistics.median(self.bytes)
        return (f"{name}: {tasks / wall:,.0f} tasks/s ({wall:.2f}s), "
                f"{cpu / tasks * 1000:.1f} ms CPU per task, {size / tasks:,.0f} bytes per task")


def timed(argv: list[str], cwd: Path, into: Measured) -> None:
    """Run ``argv`` to its end; its wall time and its tree's CPU time into ``into``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    into.wall.append(wall)
    into.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def evalledger_round(root: Path, tasks: int, jobs: int, into: Measured) -> None:
    folder = root / "evalledger"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "tasks").mkdir(parents=True)
    for i in range(tasks):
        (folder / "tasks" / f"t{i:05}.yaml").write_text(_TASK)
    ledger = folder / "ledger.db"
    timed([sys.executable, "-m", "evalledger.cli", "--ledger", str(ledger), "run", "tasks",
           "-j", str(jobs), "--out", "runs"], folder, into)
    # What stays on disk: the ledger file (WAL checkpointed into it by the last close).
    into.bytes.append(sum(p.stat().st_size for p in folder.glob("ledger.db*")))


def inspect_round(root: Path, inspect: str, tasks: int, jobs: int, into: Measured) -> None:
    folder = root / "inspect"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "noop_task.py").write_text(_INSPECT_TASK.replace("{tasks}", str(tasks)))
    timed([inspect, "eval", "noop_task.py", "--model", "mockllm/model", "--log-dir", "logs",
           "--max-samples", str(jobs), "--display", "none"], folder, into)
    into.bytes.append(sum(p.stat().st_size for p in (folder / "logs").glob("*.eval")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("-j", "--jobs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inspect", help="the `inspect` command of an environment with "
                        "inspect-ai installed")
    args = parser.parse_args()
    inspect = args.inspect or shutil.which("inspect")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    ours, theirs = Measured(), Measured()
    rounds: list[Callable[[Path], None]] = [
        lambda root: evalledger_round(root, args.tasks, args.jobs, ours)]
    if inspect:
        rounds.append(lambda root: inspect_round(root, inspect, args.tasks, args.jobs, theirs))
    else:
        print("inspect: not found (pass --inspect PATH): evalledger's figures alone")
    with tempfile.TemporaryDirectory(prefix="evalledger-peers-") as tmp:
        for i in range(args.rounds):
            for run in rounds if i % 2 == 0 else rounds[::-1]:
                run(Path(tmp))
    print(ours.line("evalledger", args.tasks))
    if not inspect:
        return
    print(theirs.line("inspect", args.tasks))
    ratio_bytes = statistics.median(ours.bytes) / statistics.median(theirs.bytes)
    ratio_rate = statistics.median(theirs.wall) / statistics.median(ours.wall)
    ratio_cpu = statistics.median(ours.cpu) / statistics.median(theirs.cpu)
    print(f"ratio bytes per task evalledger/inspect: {ratio_bytes:.2f}")
    print(f"ratio tasks/s evalledger/inspect: {ratio_rate:.2f}")
    print(f"ratio CPU per task evalledger/inspect: {ratio_cpu:.2f}")


if __name__ == "__main__":
    main()
