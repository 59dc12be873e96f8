"""Transfer throughput: ``merge``, ``export`` and ``import-events`` of a large ledger.

Builds a source ledger of --events events (default 300,000) in --runs runs recorded at
the same time (their events interleave, as runs sharing a ledger do): per task a
task.started, output lines, a task.usage and a task.completed. Then, each as the real
command in a new process (start-up included, about 0.3 s), best of --rounds:
merge into a fresh ledger, merge again (every event already held), export every run
to a file, import-events of that file into a fresh ledger.

Prints, for each, the wall time and the CPU time of the process (user + system: what
a machine shared with other work still measures), events/s of each, and how many
run.merged rows each transfer wrote.
Run: python bench/transfer.py [--events N] [--runs N] [--rounds N]. Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    TaskUsage,
)
from evalledger.ledger._events import utc_now
from evalledger.statuses import FinalStatus

LINES = 40  # output lines per task: what most rows of a real ledger are


def build(path: Path, events: int, runs: int) -> int:
    per_task = LINES + 3
    tasks = max(1, events // (per_task * runs))
    run_ids = [f"bench-{r}" for r in range(runs)]
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=r, ledger_id=ledger.ledger_id,
                                  planned=[f"default/t{t:05d}/00" for t in range(tasks)])
                       for r in run_ids])
        for t in range(tasks):
            key = f"default/t{t:05d}/00"
            batch: list = []
            for r in run_ids:
                ts = utc_now()
                batch.append(TaskStarted(run_id=r, task_key=key, task_id=f"t{t:05d}"))
                batch += [TaskOutput.encoded(r, key, ts, "stdout", f"line {i} of {key}", i,
                                             False) for i in range(LINES)]
                batch.append(TaskUsage(run_id=r, task_key=key, model="m", input_tokens=t,
                                       output_tokens=t, cost_usd=0.001))
                batch.append(TaskCompleted(run_id=r, task_key=key,
                                           category=FinalStatus.SUCCESS.category,
                                           final_status=FinalStatus.SUCCESS))
            ledger.append(batch)
        ledger.append([RunFinished(run_id=r, status="completed") for r in run_ids])
        return ledger.count()


def cli(db: Path, *args: str) -> tuple[float, float]:
    """The command's wall time and CPU time (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db), *args],
                   check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def merged_rows(db: Path) -> int:
    with Ledger(db, read_only=True) as ledger:
        return int(ledger.query("SELECT count(*) FROM events WHERE type = 'run.merged'")[1][0][0])


def fresh(db: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return db


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw:
        root = Path(raw)
        source = root / "source.db"
        count = build(source, args.events, args.runs)
        with Ledger(source, read_only=True) as ledger:
            run_ids = ledger.run_ids()
        export = root / "export.ndjson"
        times: dict[str, list[tuple[float, float]]] = {
            k: [] for k in ("merge", "merge again", "export", "import-events")}
        rows: dict[str, int] = {}
        for _ in range(args.rounds):
            times["merge"].append(cli(fresh(root / "merged.db"), "merge", str(source)))
            rows["merge"] = merged_rows(root / "merged.db")
            times["merge again"].append(cli(root / "merged.db", "merge", str(source)))
            export.unlink(missing_ok=True)
            times["export"].append(cli(source, "export", *run_ids, "-o", str(export)))
            times["import-events"].append(cli(fresh(root / "imported.db"), "import-events",
                                              str(export)))
            rows["import-events"] = merged_rows(root / "imported.db")
        print(f"{count:,} events in {args.runs} runs, best of {args.rounds} "
              "(each a new process):")
        for name, spent in times.items():
            wall, cpu = min(w for w, _ in spent), min(c for _, c in spent)
            extra = f", {rows[name]} run.merged rows" if name in rows else ""
            print(f"{name:14} wall {wall:6.2f} s {count / wall:>8,.0f}/s   "
                  f"cpu {cpu:6.2f} s {count / cpu:>8,.0f}/s{extra}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
