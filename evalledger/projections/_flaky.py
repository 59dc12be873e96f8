"""Flaky history: tasks whose verdict flips across runs while nothing they are measured
by changed (docs/results.md, "Flaky tasks").

A task is the same measurement in two runs when its variant, task id, ``definition_hash``
(the command, criteria, workdir, environment: what it evaluates) and model are the
same. Each graded replicate of it in each run is one verdict; a task with both a
success and a failure (or error) among them is flaky: a flip there is noise, not a
regression or a fix. Infrastructure failures are no verdict and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict

from evalledger.statuses import GRADED, Category, left_out

from ._results import RunSummary


class FlakyTask(BaseModel):
    model_config = ConfigDict(frozen=True)

    variant_id: str
    task_id: str
    definition_hash: str
    model: str | None
    passed: dict[str, int]
    """Run id -> its replicates that succeeded (runs in the order given)."""
    failed: dict[str, int]
    """Run id -> its replicates that failed or errored."""

    @property
    def pass_share(self) -> float:
        ok, bad = sum(self.passed.values()), sum(self.failed.values())
        return ok / (ok + bad)


def flaky_history(runs: Iterable[tuple[RunSummary, Mapping[str, tuple[str, str | None]]]]
                  ) -> list[FlakyTask]:
    """The flaky tasks over ``runs``: each a summary with its task keys' definitions
    (``definition_hash``, model), as ``ledger.task_definitions`` reads them. Sorted by
    variant and task id."""
    seen: dict[tuple[str, str, str, str | None], tuple[dict[str, int], dict[str, int]]] = {}
    for summary, definitions in runs:
        for row in summary.tasks:
            if (row.category not in GRADED or row.task_key not in definitions
                    or left_out(row.category, row.failure_class)):
                continue  # an infrastructure failure is no verdict of the agent's
            digest, model = definitions[row.task_key]
            passed, failed = seen.setdefault((row.variant_id, row.task_id, digest, model),
                                             ({}, {}))
            side = passed if row.category == Category.SUCCEEDED else failed
            side[summary.run_id] = side.get(summary.run_id, 0) + 1
    return [FlakyTask(variant_id=v, task_id=t, definition_hash=d, model=m, passed=p, failed=f)
            for (v, t, d, m), (p, f) in sorted(seen.items(), key=lambda i: i[0][:2])
            if p and f]
