"""Start-up of the read commands against sqlite-utils, and `runs` as history grows.

1. Pairs, in one run, alternating which goes first (the machine is shared and noisy;
   only ratios measured side by side mean anything), median of --rounds (>= 7):
   - ``evalledger --version`` vs ``sqlite-utils --version``;
   - ``evalledger runs``, ``show latest`` and ``report latest --format json`` on a
     10-run ledger (made by real ``evalledger run`` batches) vs ``sqlite-utils
     tables`` on the same file.
   Targets: --version <= 1.0x, each read command <= 1.5x.
2. ``evalledger runs`` (its first page) on ledgers of 10, 100 and 1,000 finished runs
   of 10 tasks each, snapshotted as the executor snapshots them: the time should be
   flat, since the listing reads the newest runs' snapshots, not the ledger.

Lines scripts read: ``ratio --version evalledger/sqlite-utils: 0.41`` and
``ratio runs 1000/10 runs: 1.02``.

Run: python bench/startup.py [--rounds N]. Not part of the tests. Needs sqlite-utils
on PATH (a dependency of evalledger, so it is in the same environment).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalledger.app._repository import write_snapshot
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    TaskUsage,
    utc_now,
)
from evalledger.statuses import FinalStatus, RunStatus

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        sys.exit(f"{name} is not installed in this environment")
    return str(found)


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed


def pair(a: list[str], b: list[str], cwd: Path, rounds: int) -> tuple[float, float]:
    """Medians of ``a`` and ``b``, run in alternating order, one warm-up each."""
    timed(a, cwd), timed(b, cwd)
    times_a, times_b = [], []
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            if which == 0:
                times_a.append(timed(a, cwd))
            else:
                times_b.append(timed(b, cwd))
    return statistics.median(times_a), statistics.median(times_b)


def ten_real_runs(root: Path) -> Path:
    """A ledger of 10 runs made by `evalledger run` on a 3-task suite."""
    suite = root / "suite"
    suite.mkdir()
    for name, code in (("a", 0), ("b", 0), ("c", 1)):
        (suite / f"{name}.yaml").write_text(
            f"command: [python3, -c, 'print(\"{name}\"); raise SystemExit({code})']\n"
            "success_criteria: [{type: exit_code}]\n", encoding="utf-8")
    db = root / "ten.db"
    for i in range(10):
        subprocess.run([tool("evalledger"), "--ledger", str(db), "run", str(suite), "--run-id",
                        f"run-{i:02d}", "--out", str(root / "out")], cwd=root,
                       capture_output=True, check=False)
    return db


def synthetic_runs(path: Path, count: int, tasks: int = 10, lines: int = 20) -> None:
    """``count`` finished runs written with the event models, each snapshotted."""
    with Ledger(path) as ledger:
        for r in range(count):
            run_id = f"run-{r:05d}"
            keys = [f"default/t{i:02d}/00" for i in range(tasks)]
            events: list = [RunStarted(run_id=run_id, planned=keys, max_parallel=4)]
            ts = utc_now()
            for i, key in enumerate(keys):
                status = FinalStatus.SUCCESS if i % 4 else FinalStatus.FAILURE
                events.append(TaskStarted(run_id=run_id, task_key=key, task_id=f"t{i:02d}"))
                events += [TaskOutput.encoded(run_id, key, ts, "stdout", f"line {n}", n, False)
                           for n in range(1, lines + 1)]
                events += [
                    TaskUsage(run_id=run_id, task_key=key, model="m", input_tokens=100,
                              cost_usd=0.01),
                    TaskCompleted(run_id=run_id, task_key=key, final_status=status,
                                  category=status.category, cost_usd=0.01),
                ]
            events.append(RunFinished(run_id=run_id, status=RunStatus.COMPLETED))
            ledger.append(events)
            write_snapshot(ledger, run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rounds = max(7, args.rounds)
    evalledger, sqlite_utils = tool("evalledger"), tool("sqlite-utils")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="evalledger-startup-") as raw:
        root = Path(raw)
        db = ten_real_runs(root)
        print(f"10-run ledger: {db.stat().st_size / 1024:.0f} KiB; median of {rounds} pairs")
        tables = [sqlite_utils, "tables", str(db)]
        cases = [
            ("--version", [evalledger, "--version"], [sqlite_utils, "--version"]),
            ("runs", [evalledger, "--ledger", str(db), "runs"], tables),
            ("show latest", [evalledger, "--ledger", str(db), "show", "latest"], tables),
            ("report latest --format json",
             [evalledger, "--ledger", str(db), "report", "latest", "--format", "json"], tables),
        ]
        for name, ours, theirs in cases:
            a, b = pair(ours, theirs, root, rounds)
            target = 1.0 if name == "--version" else 1.5
            print(f"{name:30} evalledger {a * 1000:6.1f} ms  sqlite-utils {b * 1000:6.1f} ms")
            print(f"ratio {name} evalledger/sqlite-utils: {a / b:.2f}  (target <= {target})")

        print("evalledger runs, first page, by the number of runs in the ledger:")
        times = {}
        for count in (10, 100, 1000):
            path = root / f"runs-{count}.db"
            synthetic_runs(path, count)
            command = [evalledger, "--ledger", str(path), "runs"]
            timed(command, root)
            times[count] = statistics.median(timed(command, root) for _ in range(rounds))
            print(f"  {count:5d} runs: {times[count] * 1000:6.1f} ms")
        print(f"ratio runs 1000/10 runs: {times[1000] / times[10]:.2f}  (flat: about 1)")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
