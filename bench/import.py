"""Importing old-harness run folders: 10,000 task.json files into a ledger, against the
old harness's own way of reading the same files.

Builds one run folder of N attempts (default 10,000) in the old layout, each
``task.json`` with the fields the old harness wrote (criteria, environment, three
turns with their token usage, an error on failures). Then, alternating order, best
of --rounds:
(a) ``evalledger import``'s work: read and hash every file, map it to events, append
    them to a fresh ledger in one transaction, and snapshot the run;
(b) the old harness reading its results: scan for task.json, parse each, validate
    it with a pydantic model of the fields its summary reads (what its ``report
    --rebuild`` did).

Prints both and ``ratio import/scan: 2.1`` (the import does more: it also hashes,
encodes, chains and writes every event). Run: python bench/import.py [--tasks N].
Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from evalledger.importers.legacy import read_run
from evalledger.ledger import Ledger
from evalledger.projections import load_summary, write_snapshot

STATUSES = ["SUCCESS"] * 6 + ["FAILURE", "TIMEOUT", "ERROR", "NOT_GRADED"]


class OldResult(BaseModel):
    """What the old harness's summary read from each task.json."""

    task_id: str
    variant_id: str = "default"
    final_status: str
    weighted_score: float | None = None
    duration_seconds: float = 0.0
    started_at: str
    completed_at: str | None = None
    environment_info: dict[str, object] = {}
    total_token_usage: dict[str, object] = {}


def build(root: Path, tasks: int) -> Path:
    rng = random.Random(3)
    run = root / "runs" / "2026-03-01_10-00-00"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "max_parallel": 8,
                                              "start_time": "2026-03-01T10:00:00"}))
    for i in range(tasks):
        status = rng.choice(STATUSES)
        turns = [{"iteration": n, "model_used": "claude-sonnet-4-5",
                  "token_usage": {"uncached_input_tokens": 1000 + n, "output_tokens": 200,
                                  "cache_read_input_tokens": 500, "total_cost_usd": 0.004}}
                 for n in range(1, 4)]
        data = {
            "task_id": f"t{i:05d}", "variant_id": "default", "agent_type": "claude-code",
            "model_used": "claude-sonnet-4-5", "task_description": "Write the thing. " * 5,
            "started_at": "2026-03-01T10:00:05", "completed_at": "2026-03-01T10:01:05",
            "duration_seconds": 60.0, "final_status": status,
            "weighted_score": 1.0 if status == "SUCCESS" else 0.0,
            "success_criteria_results": [{"criterion_type": "file_exists", "score": 1.0,
                                          "details": "out.py", "pass_threshold": 0.9}],
            "environment_info": {"cli_version": "1.2.3", "coder_eval": "0.9.1"},
            "iterations": turns, "total_token_usage": turns[0]["token_usage"],
            "error_message": None if status == "SUCCESS" else "criterion failed",
        }
        folder = run / "default" / f"t{i:05d}" / "00"
        folder.mkdir(parents=True)
        (folder / "task.json").write_text(json.dumps(data, indent=2))
    return run


def import_run(run: Path, db: Path) -> int:
    if db.exists():
        db.unlink()
    with Ledger(db) as ledger:
        legacy = read_run(run)
        ledger.append(legacy.events)
        write_snapshot(ledger, legacy.run_id)
        return load_summary(ledger, legacy.run_id).tasks_run


def old_scan(run: Path) -> int:
    results = [OldResult.model_validate_json(p.read_bytes()) for p in run.rglob("task.json")]
    return len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw:
        root = Path(raw)
        run = build(root, args.tasks)
        times: dict[str, list[float]] = {"import": [], "scan": []}
        for r in range(args.rounds):
            for name in (("import", "scan") if r % 2 == 0 else ("scan", "import")):
                start = time.perf_counter()
                count = import_run(run, root / "l.db") if name == "import" else old_scan(run)
                times[name].append(time.perf_counter() - start)
                assert count == args.tasks, f"{name} saw {count} of {args.tasks}"
        ours, theirs = min(times["import"]), min(times["scan"])
        with Ledger(root / "l.db", read_only=True) as ledger:
            events = ledger.count()
        print(f"{args.tasks:,} task.json files, best of {args.rounds}:")
        print(f"evalledger import (read, map, append {events:,} events, snapshot): "
              f"{ours:6.2f} s ({args.tasks / ours:,.0f} files/s)")
        print(f"old harness scan (rglob, parse, validate):                    "
              f"{theirs:6.2f} s ({args.tasks / theirs:,.0f} files/s)")
        print(f"ratio import/scan: {ours / theirs:.1f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
