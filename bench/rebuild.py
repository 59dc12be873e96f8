"""Rebuild speed and memory: summary + resume partition from the ledger vs task.json files.

Builds, in a temporary folder:
- a ledger holding one finished run of N tasks (default 10,000), each with
  task.started, usage, M task.output lines (default 100) and task.completed:
  ~N*(M+3) events, then the run's snapshot, written as the executor writes it;
- the replaced design's folder: N ``<variant>/<task>/<NN>/task.json`` files with
  the same results (and one nested sub-run folder that a scan must skip).

Then times, in this process and in alternating order, what both designs can tell:
the run's counts (run, succeeded, failed, error) and its resume partition:
(a) ledger: the headline and the resume fold from the run's snapshot (what `runs`,
    `show` and `resume` read for a finished run);
(b) ledger, full replay (snapshots ignored, as after an upgrade that changed a fold):
    both folds over every lifecycle event, partially decoded;
(c) files: rglob task.json, skip nested sub-runs, validate each with pydantic, sort,
    count the buckets and split finished / unfinished.
For the record, also the whole summary with its 10,000 rows (what `show` prints)
read from the snapshot and from a full replay.

And peak RSS of a fresh process replaying the big ledger in full vs one with 10x
fewer output lines: the folds never read output lines, so the two should match;
and the ledger's size in bytes per event.

Lines scripts read: ``ratio files/ledger: 63.0`` and ``ratio files/ledger, full
replay: 5.4``. Run: python bench/rebuild.py [--tasks N] [--lines M]. Not part of
the tests.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from evalledger.app._repository import (
    load_fold,
    load_folds,
    load_headline,
    load_summary,
    write_snapshot,
)
from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
    TaskUsage,
    TokenCounts,
    chunked,
    utc_now,
)
from evalledger.projections import ResumeFold, SummaryFold
from evalledger.statuses import Category, FinalStatus

RUN = "bench-run"
STATUSES = [FinalStatus.SUCCESS] * 6 + [FinalStatus.FAILURE, FinalStatus.TIMEOUT,
                                        FinalStatus.ERROR, FinalStatus.TOKEN_BUDGET_EXCEEDED]
DEFINITION = {
    "command": "python3 agent.py", "description": "a benchmark task", "env": {"MODE": "fast"},
    "model": "claude-sonnet-4-5", "prompt": "Write a program that does the thing. " * 10,
    "success_criteria": [{"type": "exit_code", "equals": 0, "weight": 1.0},
                         {"type": "file_exists", "path": "out.py", "weight": 1.0}],
    "stream_format": "native", "tags": ["bench"], "timeout": 600.0,
}


class LegacyTask(BaseModel):
    """The task.json of the design this replaces: one file per finished task."""

    task_key: str
    task_id: str
    variant_id: str
    replicate_index: int
    final_status: FinalStatus | None
    category: Category | None
    weighted_score: float
    duration_seconds: float
    tokens: TokenCounts
    cost_usd: float | None
    error_message: str | None
    environment_info: dict[str, object]
    definition: dict[str, object]


def record_run(ledger: Ledger, run_id: str, tasks: int, lines: int,
               folder: Path | None = None) -> None:
    """One finished run of ``tasks`` tasks of ``lines`` output lines each, then its
    snapshot, appended as the executor appends them; with ``folder``, the replaced
    design's task.json files too."""
    rng = random.Random(7)
    keys = [f"default/t{i:05d}/00" for i in range(tasks)]
    ledger.append([RunStarted(run_id=run_id, planned=keys, max_parallel=8)])
    for i, key in enumerate(keys):
        status = rng.choice(STATUSES)
        finished = i % 50 != 49  # 2% unfinished: the resume partition has work to do
        ts = utc_now()
        batch: list = [TaskStarted(run_id=run_id, task_key=key, task_id=f"t{i:05d}",
                                   definition=DEFINITION, definition_hash="h" * 64)]
        batch.append(TaskUsage(run_id=run_id, task_key=key, model="claude-sonnet-4-5",
                               input_tokens=1000 + i, output_tokens=200, cost_usd=0.006))
        batch += [TaskOutput.encoded(run_id, key, ts, "stdout", f"line {n} of task {i}", n, False)
                  for n in range(1, lines + 1)]
        completed = TaskCompleted(
            run_id=run_id, task_key=key, final_status=status, category=status.category,
            exit_code=0, duration_seconds=12.5, weighted_score=1.0 if status == "SUCCESS" else 0.5,
            environment_info={"python": "3.11.7", "evalledger": "0.1.0", "exit_code": 0},
            tokens=TokenCounts(input_tokens=1000 + i, output_tokens=200), cost_usd=0.006,
        )
        if finished:
            batch.append(completed)
        ledger.append(chunked(batch))  # a fast command's lines come in one read: one chunk
        if finished and folder is not None:
            legacy = LegacyTask(
                task_key=key, task_id=f"t{i:05d}", variant_id="default", replicate_index=0,
                definition=DEFINITION, **completed.model_dump(
                    include={"final_status", "category", "weighted_score", "duration_seconds",
                             "tokens", "cost_usd", "error_message", "environment_info"}),
            )
            target = folder / "default" / f"t{i:05d}" / "00" / "task.json"
            target.parent.mkdir(parents=True)
            target.write_text(legacy.model_dump_json(indent=2))
    ledger.append([RunFinished(run_id=run_id, status="completed")])
    write_snapshot(ledger, run_id)


def build(root: Path, tasks: int, lines: int, *, files: bool = True) -> tuple[Path, Path]:
    ledger_path, folder = root / f"ledger-{lines}.db", root / f"runs-{lines}"
    ledger = Ledger(ledger_path)
    record_run(ledger, RUN, tasks, lines, folder if files else None)
    ledger.close()
    if not files:
        return ledger_path, folder
    # A nested sub-run (say, a task that itself ran evalledger): the scan must skip it.
    nested = folder / "default" / "t00000" / "00" / "artifacts" / "inner"
    (nested / "x" / "00").mkdir(parents=True)
    (nested / "run.json").write_text("{}")
    (nested / "x" / "00" / "task.json").write_text("{}")
    return ledger_path, folder


def from_ledger(path: Path, *, snapshots: bool = True) -> tuple[dict[str, int], int]:
    with Ledger(path, read_only=True) as ledger:
        if snapshots:
            head = load_headline(ledger, RUN)
            partition = load_fold(ledger, ResumeFold, RUN).partition()
        else:
            (summary, resume), _ = load_folds(ledger, RUN, SummaryFold, ResumeFold,
                                              snapshots=False)
            assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
            head = summary.headline().model_dump(mode="json")
            partition = resume.partition()
    counts = {"run": head["tasks_run"], "succeeded": head["tasks_succeeded"],
              "failed": head["tasks_failed"], "error": head["tasks_error"]}
    return counts, len(partition.to_run)


def whole_summary(path: Path, *, snapshots: bool) -> int:
    with Ledger(path, read_only=True) as ledger:
        return len(load_summary(ledger, RUN, snapshots=snapshots).tasks)


def from_files(folder: Path, planned: int) -> tuple[dict[str, int], int]:
    def nested(path: Path) -> bool:
        return any((parent / "run.json").exists() for parent in path.parents
                   if parent != folder and folder in parent.parents)

    files = sorted(p for p in folder.rglob("task.json") if not nested(p))
    results = sorted((LegacyTask.model_validate_json(p.read_bytes()) for p in files),
                     key=lambda t: t.task_key)
    counts = {"run": len(results), "succeeded": 0, "failed": 0, "error": 0}
    for task in results:
        counts[task.category.value if task.category else "error"] += 1
    return counts, planned - len(results)


def peak_rss_summarising(path: Path) -> int:
    code = (
        "import resource, sys\nsys.path.insert(0, sys.argv[2])\n"
        "from rebuild import from_ledger\nfrom pathlib import Path\n"
        "from_ledger(Path(sys.argv[1]), snapshots=False)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), str(Path(__file__).parent)],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw:
        root = Path(raw)
        start = time.perf_counter()
        big_ledger, folder = build(root, args.tasks, args.lines)
        small_ledger, _ = build(root, args.tasks, max(1, args.lines // 10), files=False)
        with Ledger(big_ledger, read_only=True) as ledger:
            events = ledger.count()
        print(f"built: {args.tasks} tasks, {events:,} events in the ledger, "
              f"{args.tasks} task.json files ({time.perf_counter() - start:.1f}s)")
        times: dict[str, list[float]] = {"snapshot": [], "replay": [], "files": []}
        results = {}
        for r in range(args.rounds):
            names = list(times) if r % 2 == 0 else list(reversed(times))
            for name in names:
                t = time.perf_counter()
                if name == "files":
                    results[name] = from_files(folder, args.tasks)
                else:
                    results[name] = from_ledger(big_ledger, snapshots=name == "snapshot")
                times[name].append(time.perf_counter() - t)
        assert results["snapshot"] == results["replay"] == results["files"], (
            f"the designs disagree: {results}")
        snap, replay, fil = (statistics.median(times[n]) for n in ("snapshot", "replay", "files"))
        print(f"summary+resume from the ledger (snapshot): {snap * 1000:8.1f} ms  "
              f"(median, {args.rounds})")
        print(f"summary+resume from the ledger, full replay: {replay * 1000:8.1f} ms")
        print(f"summary+resume from task.json files:       {fil * 1000:8.1f} ms")
        print(f"ratio files/ledger: {fil / snap:.1f}  (target >= 50)")
        print(f"ratio files/ledger, full replay: {fil / replay:.1f}  (target >= 5)")
        a = results["snapshot"]
        print(f"counts (all three agree): {a[0]}, to run: {a[1]}")
        for label, snapshots in (("from the snapshot", True), ("from a full replay", False)):
            t = time.perf_counter()
            rows = whole_summary(big_ledger, snapshots=snapshots)
            print(f"whole summary, {rows} task rows, {label}: "
                  f"{(time.perf_counter() - t) * 1000:8.1f} ms")
        print(f"ledger size: {big_ledger.stat().st_size / events:.0f} bytes per event "
              f"({big_ledger.stat().st_size / 2**20:.0f} MiB)")
        big_rss, small_rss = peak_rss_summarising(big_ledger), peak_rss_summarising(small_ledger)
        print(f"peak RSS replaying, {args.lines} lines/task:  {big_rss / 1024:8.1f} MiB")
        print(f"peak RSS replaying, {max(1, args.lines // 10)} lines/task:   "
              f"{small_rss / 1024:8.1f} MiB  (flat: {big_rss / small_rss:.2f}x)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
