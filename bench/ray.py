"""The Ray executor against the local one on this machine, in one run.

1. --tasks no-op tasks (``true``) at max_parallel=8: tasks/s and events/s, through the
   local executor and through Ray (a one-node Ray cluster started here once, 8 CPUs
   offered; each batch joins it, as ``--ray-address`` does, and the join is counted).
2. 8 chatty tasks that each print --lines short lines as fast as they can: events/s
   each way, every line checked to be in the ledger.

For each Ray batch it also prints the driver's own CPU per task and per event (this
process: the ledger writer and the stream consumers; the workers are other
processes): what bounds one writer, whatever the number of nodes.

Run: python bench/ray.py [--tasks N] [--lines N]. Needs the ``ray`` extra. Not part of
the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, run_batch
from evalledger.ledger import Ledger
from evalledger.options import RunOptions
from evalledger.suite import ExitCode, ResolvedTask

PARALLEL = 8


def _task(i: int, command: list[str]) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/t{i:05d}/00", task_id=f"t{i:05d}", variant_id="default",
        replicate_index=0, source="bench", command=command, timeout=600,
        success_criteria=[ExitCode(type="exit_code")],
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def batch(tmp: Path, name: str, tasks: list[ResolvedTask], address: str | None
          ) -> tuple[float, float, int, int]:
    """(wall, driver CPU, events, output lines) of one batch; every task must complete."""
    executor = "ray" if address else "local"
    options = RunOptions(max_parallel=PARALLEL, out=str(tmp / "out"), preservation_mode="none",
                         executor=executor, ray_address=address)
    with Ledger(tmp / f"{name}.db") as ledger:
        cpu, start = _cpu(), time.perf_counter()
        result = trio.run(run_batch, ledger, tasks, BatchConfig(run_id=name, options=options))
        wall, used = time.perf_counter() - start, _cpu() - cpu
        assert len(result.completed) == len(tasks), "a task went missing"
        assert all(c.final_status == "SUCCESS" for c in result.completed)
        events = ledger.db.execute("SELECT count(*) FROM events WHERE run_id = ? AND "
                                   "type != 'run.snapshot'", (name,)).fetchone()[0]
        lines = ledger.db.execute("SELECT count(*) FROM events WHERE run_id = ? AND "
                                  "type = 'task.output'", (name,)).fetchone()[0]
    return wall, used, events, lines


def report(label: str, side: str, n: int, measured: tuple[float, float, int, int],
           expected_lines: int | None = None) -> None:
    wall, cpu, events, lines = measured
    print(f"{label} {side:5s}: {n / wall:8,.1f} tasks/s  {events / wall:9,.0f} events/s  "
          f"({events:,} events in {wall:.2f}s; driver CPU {cpu / n * 1e3:.2f} ms/task, "
          f"{cpu / events * 1e6:.1f} us/event)")
    if expected_lines is not None:
        print(f"{label} {side:5s}: lines recorded {lines:,} of {expected_lines:,} "
              f"({'none lost' if lines == expected_lines else 'LOST LINES'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=50_000)
    args = parser.parse_args()
    # This file is ray.py: its folder first on the path would shadow the ray package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_temp = Path(tempfile.mkdtemp(prefix="evl-bench-ray-", dir="/tmp"))
    os.environ["RAY_TMPDIR"] = str(ray_temp)
    from ray.cluster_utils import Cluster

    print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": PARALLEL, "object_store_memory": 256 * 1024 * 1024,
        "include_dashboard": False})
    cluster.wait_for_nodes()
    print(f"one-node Ray cluster up in {time.perf_counter() - started:.1f}s")
    try:
        with tempfile.TemporaryDirectory() as raw_tmp:
            tmp = Path(raw_tmp)
            noop = [_task(i, ["true"]) for i in range(args.tasks)]
            for side, address in (("local", None), ("ray", cluster.address)):
                report(f"{args.tasks} no-op tasks", side, args.tasks,
                       batch(tmp, f"noop-{side}", noop, address))
            script = ("import sys\nw = sys.stdout.write\n"
                      f"for i in range({args.lines}): w(f'line {{i}}\\n')\n")
            chatty = [_task(i, [sys.executable, "-c", script]) for i in range(PARALLEL)]
            for side, address in (("local", None), ("ray", cluster.address)):
                report(f"{PARALLEL} chatty tasks", side, PARALLEL,
                       batch(tmp, f"chatty-{side}", chatty, address),
                       expected_lines=PARALLEL * args.lines)
    finally:
        cluster.shutdown()
        shutil.rmtree(ray_temp, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
