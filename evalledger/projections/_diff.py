"""Run-to-run diff (docs/results.md): per task key, how its result moved between two runs.

Both sides are ``RunSummary`` rows, so a diff is a function of two replays.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from evalledger.statuses import Category

from ._summary import RunSummary, TaskRow

Change = Literal["regression", "fix", "changed", "unchanged", "added", "removed"]


class TaskDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_key: str
    change: Change
    before: str | None
    after: str | None
    score_delta: float | None
    duration_delta: float | None
    cost_delta: float | None


class RunDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_a: str
    run_b: str
    counts: dict[str, int]
    tasks: list[TaskDiff]


def _status(row: TaskRow | None) -> str | None:
    if row is None:
        return None
    return row.final_status.value if row.final_status else "UNFINISHED"


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 6)


def _field(row: TaskRow | None, name: str) -> float | None:
    value = None if row is None else getattr(row, name)
    return None if value is None else float(value)


def _change(a: TaskRow | None, b: TaskRow | None) -> Change:
    if a is None:
        return "added"
    if b is None:
        return "removed"
    a_ok, b_ok = a.category == Category.SUCCEEDED, b.category == Category.SUCCEEDED
    if a_ok and not b_ok:
        return "regression"
    if b_ok and not a_ok:
        return "fix"
    return "unchanged" if a.final_status == b.final_status else "changed"


def diff_runs(a: RunSummary, b: RunSummary) -> RunDiff:
    """Compare every task key present in either run, in key order."""
    rows_a = {r.task_key: r for r in a.tasks}
    rows_b = {r.task_key: r for r in b.tasks}
    tasks = []
    for key in sorted(rows_a.keys() | rows_b.keys()):
        ra, rb = rows_a.get(key), rows_b.get(key)
        tasks.append(TaskDiff(
            task_key=key,
            change=_change(ra, rb),
            before=_status(ra),
            after=_status(rb),
            score_delta=_delta(_field(ra, "weighted_score"), _field(rb, "weighted_score")),
            duration_delta=_delta(_field(ra, "duration_seconds"), _field(rb, "duration_seconds")),
            cost_delta=_delta(_field(ra, "cost_usd"), _field(rb, "cost_usd")),
        ))
    counts = dict.fromkeys(get_args(Change), 0)
    for t in tasks:
        counts[t.change] += 1
    return RunDiff(run_a=a.run_id, run_b=b.run_id, counts=counts, tasks=tasks)
