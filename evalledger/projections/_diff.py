"""Run-to-run diff (docs/results.md): per task key, how its result moved between two runs.

Both sides are ``RunSummary`` rows, so a diff is a function of two replays. A key
that has no final status on one side (never started, or interrupted) was not run
there: that is its own state, never a fix or a regression. A regression is a key
that succeeded in A and failed or errored in B; a fix, the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from evalledger.statuses import Category

from ._digest import error_digest
from ._results import RunSummary, TaskRow

Change = Literal["regression", "fix", "changed", "not_run", "added", "removed", "unchanged"]
# What `diff --fail-on` may fail on (exit 1).
FailOn = Literal["regression", "significant-regression", "any-change", "flagged", "never"]
NOT_RUN = "NOT RUN"
_JUDGED_BAD = frozenset({Category.FAILED, Category.ERROR})


class TaskDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_key: str
    change: Change
    before: str | None
    after: str | None
    score_delta: float | None
    duration_delta: float | None
    cost_delta: float | None
    isolation: str | None = None
    """``A → B`` when the two latest attempts ran under different isolation
    (docs/isolation.md): not the same measurement; None when it is the same."""
    flags: list[str] = []
    """The rules a scan flagged B's attempt with (``evalledger scan``)."""
    why: str = ""
    """Why B's attempt did not succeed, in one line (A's when the key is only in A):
    ``error_digest`` of its ``error_message``; "" when it succeeded."""


class RunDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_a: str
    run_b: str
    counts: dict[str, int]
    tasks: list[TaskDiff]
    variants: dict[str, str] = {}
    """A's variants paired with B's of another name (A's → B's): their keys are compared
    as one (``paired_variants``). Empty: each key with the key of its own name."""

    def fails(self, on: FailOn) -> bool:
        """Whether a CI gate set to ``on`` fails on this diff (``significant-regression``
        is a paired test of the two summaries: ``compare_runs``, not this diff)."""
        if on == "regression":
            return self.counts["regression"] > 0
        if on == "any-change":
            return any(n for change, n in self.counts.items() if change != "unchanged")
        if on == "flagged":
            return any(t.flags for t in self.tasks)
        return False


def _status(row: TaskRow | None) -> str | None:
    if row is None:
        return None
    return row.final_status.value if row.final_status else NOT_RUN


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
    if a.category is None or b.category is None:
        return "not_run"
    if a.category == Category.SUCCEEDED and b.category in _JUDGED_BAD:
        return "regression"
    if a.category in _JUDGED_BAD and b.category == Category.SUCCEEDED:
        return "fix"
    return "unchanged" if a.final_status == b.final_status else "changed"


def paired_variants(a: RunSummary, b: RunSummary,
                    given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Which variant of B each of A's pairs with, where their names differ: ``given``
    (A's name → B's); without it, where each run has one variant and their names
    differ, those two (an agent's run named by its model, say, against the next one's);
    else none (a key pairs with the key of its own name)."""
    if given is not None:
        return {x: y for x, y in given.items() if x != y}
    names_a = {v.variant_id for v in a.variants}
    names_b = {v.variant_id for v in b.variants}
    if len(names_a) == 1 and len(names_b) == 1 and names_a != names_b:
        return {next(iter(names_a)): next(iter(names_b))}
    return {}


def _in_b(key: str, variants: Mapping[str, str]) -> str:
    """A's task key as B's, its variant paired (``variant/task/replicate``)."""
    variant, slash, rest = key.partition("/")
    return f"{variants.get(variant, variant)}{slash}{rest}"


def diff_runs(a: RunSummary, b: RunSummary,
              variants: Mapping[str, str] | None = None) -> RunDiff:
    """Compare every task key present in either run, in key order (B's keys: A's with
    their variants paired, ``paired_variants``)."""
    paired = paired_variants(a, b, variants)
    rows_a = {_in_b(r.task_key, paired): r for r in a.tasks}
    rows_b = {r.task_key: r for r in b.tasks}
    tasks = []
    for key in sorted(rows_a.keys() | rows_b.keys()):
        ra, rb = rows_a.get(key), rows_b.get(key)
        reported = rb or ra
        tasks.append(TaskDiff(
            task_key=key,
            change=_change(ra, rb),
            before=_status(ra),
            after=_status(rb),
            score_delta=_delta(_field(ra, "weighted_score"), _field(rb, "weighted_score")),
            duration_delta=_delta(_field(ra, "duration_seconds"), _field(rb, "duration_seconds")),
            cost_delta=_delta(_field(ra, "cost_usd"), _field(rb, "cost_usd")),
            isolation=(f"{ra.isolation} → {rb.isolation}" if ra and rb and ra.attempts
                       and rb.attempts and ra.isolation != rb.isolation else None),
            flags=list(rb.flags) if rb else [],
            why=error_digest(reported.error_message if reported else None,
                             failure_class=reported.failure_class if reported else None),
        ))
    counts = dict.fromkeys(get_args(Change), 0)
    for t in tasks:
        counts[t.change] += 1
    return RunDiff(run_a=a.run_id, run_b=b.run_id, counts=counts, tasks=tasks,
                   variants=paired)
