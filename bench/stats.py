"""What `compare` concludes on outcomes whose truth is known: false alarms, power and
interval coverage, through the real comparison code (``compare_runs`` on summaries made
of generated outcomes), beside the rule it replaced, measured in the same run.

1. False alarms: two identical agents (each task's true pass rate the same on both
   sides), replicate counts 1v1, 1v2, 3v4 and 5v5, tasks all at p = 0.3, 0.5, 0.8, or
   heterogeneous (each task's p drawn from 0.05 to 0.95): the share of comparisons
   whose verdict is significant either way. Target: <= alpha (0.05) within its noise.
   Beside it, the old rule (a task passes when most of its replicates did; McNemar's
   exact test on the tasks that passed on one side only).
2. Power: every task at 0.8 in A and 0.5 in B, 100 tasks, 1 and 3 replicates: the share
   found a significant regression.
3. Coverage: heterogeneous tasks drawn from a population of mean 0.5, 3 replicates: the
   share of each side's 95% pass-rate intervals holding 0.5 (target 93-97%), beside the
   interval that counts every replicate as an independent trial (Wilson over all).

Run: python bench/stats.py [--tasks N] [--comparisons N] [--seed S]. Not part of the
tests. Lines scripts read: ``false alarms 1v2 p=0.5: 0.045 (old rule 0.635)``,
``power 0.8->0.5 100 tasks x1: 1.000``, ``coverage 3 replicates: 0.948 (independent
trials 0.715)``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from evalledger.ledger import NO_TOKENS
from evalledger.projections import RunSummary, SummaryFold, TaskRow, compare_runs
from evalledger.projections._intervals import wilson
from evalledger.statuses import FinalStatus

ALPHA = 0.05


def summary(run_id: str, outcomes: list[list[bool]]) -> RunSummary:
    """A summary whose rows are these outcomes: task i's replicates, graded."""
    rows = []
    for task, replicates in enumerate(outcomes):
        for i, ok in enumerate(replicates):
            status = FinalStatus.SUCCESS if ok else FinalStatus.FAILURE
            rows.append(TaskRow(
                task_key=f"default/t{task:03d}/{i:02d}", task_id=f"t{task:03d}",
                variant_id="default", replicate_index=i, tags=[], attempts=1,
                final_status=status, category=status.category,
                weighted_score=1.0 if ok else 0.0, duration_seconds=1.0, tokens=NO_TOKENS,
                cost_usd=0.0, cost_complete=True, error_message=None))
    return SummaryFold(run_id).summary().model_copy(update={"tasks": rows})


def draw(rng: random.Random, rates: list[float], replicates: int) -> list[list[bool]]:
    return [[rng.random() < p for _ in range(replicates)] for p in rates]


def old_rule_alarm(a: list[list[bool]], b: list[list[bool]]) -> bool:
    """The replaced verdict: majority-passing tasks, McNemar's exact test at 5%."""
    from scipy.stats import binomtest

    only_a = sum(2 * sum(x) > len(x) and not 2 * sum(y) > len(y) for x, y in zip(a, b, strict=True))
    only_b = sum(2 * sum(y) > len(y) and not 2 * sum(x) > len(x) for x, y in zip(a, b, strict=True))
    if not only_a + only_b:
        return False
    return binomtest(only_b, only_a + only_b, 0.5).pvalue < ALPHA


def rates_of(kind: str, rng: random.Random, tasks: int) -> list[float]:
    if kind == "heterogeneous":
        return [rng.uniform(0.05, 0.95) for _ in range(tasks)]
    return [float(kind)] * tasks


def share(n: int, trial: Callable[[int], bool]) -> float:
    return sum(trial(i) for i in range(n)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--comparisons", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n, tasks = args.comparisons, args.tasks
    began = time.monotonic()
    print(f"{n} comparisons of {tasks} tasks per row, alpha {ALPHA}; "
          f"the noise of a share near 0.05: +/- {1.96 * (0.05 * 0.95 / n) ** 0.5:.3f}")
    print("\nfalse alarms (identical agents): compare, and the old majority rule")
    for reps_a, reps_b in ((1, 1), (1, 2), (3, 4), (5, 5)):
        for kind in ("0.3", "0.5", "0.8", "heterogeneous"):
            rng = random.Random(f"{args.seed}/{reps_a}v{reps_b}/{kind}")
            new = old = 0
            for i in range(n):
                rates = rates_of(kind, rng, tasks)
                a, b = draw(rng, rates, reps_a), draw(rng, rates, reps_b)
                verdict = compare_runs(summary("a", a), summary("b", b), seed=i).verdict
                new += verdict.startswith("significant")
                old += old_rule_alarm(a, b)
            label = f"p={kind}" if kind != "heterogeneous" else kind
            print(f"false alarms {reps_a}v{reps_b} {label}: {new / n:.3f} "
                  f"(old rule {old / n:.3f})", flush=True)
    print("\npower: every task 0.8 in A, 0.5 in B")
    for replicates in (1, 3):
        rng = random.Random(f"{args.seed}/power/{replicates}")

        def found(i: int, replicates: int = replicates, rng: random.Random = rng) -> bool:
            a = draw(rng, [0.8] * tasks, replicates)
            b = draw(rng, [0.5] * tasks, replicates)
            return compare_runs(summary("a", a), summary("b", b),
                                seed=i).verdict == "significant regression"

        print(f"power 0.8->0.5 {tasks} tasks x{replicates}: {share(n, found):.3f}", flush=True)
    print("\ncoverage of a side's 95% pass-rate interval (population mean 0.5)")
    rng = random.Random(f"{args.seed}/coverage")
    held = naive = 0
    for i in range(n):
        outcomes = draw(rng, rates_of("heterogeneous", rng, tasks), 3)
        side = compare_runs(summary("a", outcomes), summary("a", outcomes), seed=i).a
        held += side.pass_rate_interval.low <= 0.5 <= side.pass_rate_interval.high
        every = wilson(sum(map(sum, outcomes)), 3 * tasks)
        naive += every.low <= 0.5 <= every.high
    print(f"coverage 3 replicates: {held / n:.3f} (independent trials {naive / n:.3f})")
    print(f"\ntook {time.monotonic() - began:.0f}s")


if __name__ == "__main__":
    main()
