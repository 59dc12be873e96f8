"""The run page's task table: which rows a query keeps and in what order, where a task
sits among them (its neighbours), and the task ids crossed with the variants (the matrix).

Pure functions of a ``RunSummary``'s rows. ``TableQuery`` is the table's URL query:
its links are spelled here (``params``, ``as_list``); reading one from a request, and
refusing a value out of range, is the viewer's (``viewer/_params.table_query``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from evalledger.projections import RunSummary, TaskRow, failure_kinds
from evalledger.statuses import Category, FinalStatus

from ._memo import per_summary, recent_per_summary

OUTCOMES = ("succeeded", "failed", "error", "ungraded", "unfinished")
SORTS = ("failures", "key", "status", "score", "duration", "tokens", "cost", "attempts")
# The task table's order when it is not asked for one: errors and failures first (a
# person opens a run to read them), then the rest; by key within each.
DEFAULT_SORT = "failures"
# The task table's status filter: a bucket, or a final status (as its menu lists them).
# "flagged": the rows a scan flagged (docs/results.md, "Flags"), whatever their status.
FLAGGED = "flagged"
# "claimed": the agent said it ended well, and the grader did not pass it.
CLAIMED = "claimed"
TABLE_OUTCOMES = (*OUTCOMES, *(s.value for s in FinalStatus), FLAGGED, CLAIMED)


def outcome(row: TaskRow) -> str:
    return row.category.value if row.category is not None else "unfinished"


def status_of(row: TaskRow, running: Collection[str] = ()) -> str:
    """A task's status as a person reads it: its final status, else RUNNING (an attempt
    is running now), NOT STARTED (no attempt yet) or UNFINISHED (its attempt ended
    without one: interrupted, or its run's process is gone)."""
    if row.final_status is not None:
        return row.final_status.value
    if row.task_key in running:
        return "RUNNING"
    return "NOT STARTED" if row.attempts == 0 else "UNFINISHED"


def _has_outcome(row: TaskRow, wanted: str, claimed: Collection[str]) -> bool:
    """Whether ``row`` is of the status ``wanted`` (a table's status filter)."""
    if wanted == FLAGGED:
        return bool(row.flags)
    if wanted == CLAIMED:  # the agent said it ended well, and the grader did not pass it
        return row.category in (Category.FAILED, Category.ERROR) and row.task_key in claimed
    return wanted in (outcome(row), status_of(row))


def kinds_of(row: TaskRow) -> tuple[str, ...]:
    """``failure_kinds`` of a row."""
    status = row.final_status.value if row.final_status is not None else None
    return failure_kinds(status, row.error_message, failure_class=row.failure_class,
                         flags=row.flags)


@dataclass(frozen=True)
class TableQuery:
    """How the run page's task table is filtered, sorted and paged (its URL query)."""

    outcomes: tuple[str, ...] = ()
    """The statuses kept (any of them); none: every status."""
    kind: str = ""
    """A failure kind (``failure_kinds``): a failed criterion's type, a status, or
    ``model API``."""
    tag: str = ""
    variant: str = ""
    text: str = ""
    sort: str = DEFAULT_SORT
    descending: bool = False
    page: int = 1

    @property
    def outcome(self) -> str:
        """The statuses as one parameter's value (``failed,error``)."""
        return ",".join(self.outcomes)

    @property
    def filtered(self) -> bool:
        return bool(self.outcomes or self.kind or self.tag or self.variant or self.text)

    def params(self, **changes: Any) -> dict[str, Any]:
        """This query as URL parameters, with ``changes`` applied (and defaults left out)."""
        values: dict[str, Any] = {
            "outcome": self.outcome, "kind": self.kind, "tag": self.tag,
            "variant": self.variant, "q": self.text,
            "sort": "" if self.sort == DEFAULT_SORT else self.sort,
            "dir": "desc" if self.descending else "", "page": self.page}
        values.update(changes)
        if values.get("page") == 1:
            values["page"] = None
        return values

    def rows_of(self, summary: RunSummary,
                claimed: Collection[str] = frozenset()) -> list[TaskRow]:
        """The summary's rows this query keeps, in its order: selected once per summary
        and query while it is among the recent ones (every page of a table reads the
        same selection). ``claimed``: the keys whose agent said it ended well (read
        from the transcripts, once per summary)."""
        key = (self.outcomes, self.kind, self.tag, self.variant, self.text, self.sort,
               self.descending)
        return recent_per_summary(summary, "rows", key,
                                  lambda: self.select(summary.tasks, claimed))

    def select(self, rows: Sequence[TaskRow],
               claimed: Collection[str] = frozenset()) -> list[TaskRow]:
        """The rows this query keeps, in its order."""
        chosen = [r for r in rows if self.keeps(r, claimed)] if self.filtered else rows
        key = _SORT_KEYS[self.sort]
        # Each row's key once (a 10,000-task run's first page: 60 -> 20 ms). Unknown values
        # (an unfinished task's score) sort last either way.
        keyed = [(key(r), r.task_key, r) for r in chosen]
        known = [k for k in keyed if k[0] is not None]
        known.sort(key=lambda k: (k[0], k[1]), reverse=self.descending)
        return [k[2] for k in known] + [k[2] for k in keyed if k[0] is None]

    def keeps(self, row: TaskRow, claimed: Collection[str] = frozenset()) -> bool:
        """Whether ``row`` passes every filter of this query: any of its statuses, and
        each other filter."""
        if self.outcomes and not any(_has_outcome(row, o, claimed) for o in self.outcomes):
            return False
        if self.kind and self.kind not in kinds_of(row):
            return False
        if (self.tag and self.tag not in row.tags) or (
                self.variant and row.variant_id != self.variant):
            return False
        text = self.text.lower()
        return not text or text in row.task_key.lower() or text in (
            row.error_message or "").lower()

    def as_list(self) -> str:
        """This query (its filters and order, not its page) as one URL parameter's value:
        how a task page knows the list it was opened from (its neighbours, the way back)."""
        return urlencode({k: v for k, v in self.params(page=1).items()
                          if v not in (None, "", 0, False)})


@dataclass(frozen=True)
class Neighbours:
    """Where a task sits in the list it was opened from: the keys before and after it,
    and the nearest failures (failed or error) each way."""

    index: int
    total: int
    previous: str | None = None
    next: str | None = None
    previous_failure: str | None = None
    next_failure: str | None = None


def neighbours(rows: Sequence[TaskRow], task_key: str) -> Neighbours | None:
    """``task_key``'s neighbours in ``rows`` (None when it is not among them)."""
    keys = [r.task_key for r in rows]
    try:
        at = keys.index(task_key)
    except ValueError:
        return None
    failed = [outcome(r) in ("failed", "error") for r in rows]
    before = [i for i in range(at) if failed[i]]
    after = [i for i in range(at + 1, len(rows)) if failed[i]]
    return Neighbours(
        index=at, total=len(rows), previous=keys[at - 1] if at else None,
        next=keys[at + 1] if at + 1 < len(keys) else None,
        previous_failure=keys[before[-1]] if before else None,
        next_failure=keys[after[0]] if after else None)


@dataclass(frozen=True)
class MatrixRow:
    """One task id across the variants: each variant's replicates, in order (None where
    a variant has no such task), and how much they disagree."""

    task_id: str
    cells: tuple[tuple[TaskRow, ...] | None, ...]
    disagreement: float


@dataclass(frozen=True)
class Matrix:
    variants: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    total: int
    """Task ids in the run (``rows`` may hold fewer: the most disagreeing first)."""


def task_matrix(summary: RunSummary, most: int = 200) -> Matrix | None:
    """The run's task ids by variant, the ones whose outcomes disagree most first (then
    by id); None when there is nothing to cross (one variant, one replicate each).
    Made once per summary (``per_summary``): a 100,000-task run's took 0.45 s a page."""
    return per_summary(summary, ("task_matrix", most), lambda: _task_matrix(summary, most))


def _task_matrix(summary: RunSummary, most: int) -> Matrix | None:
    variants = tuple(sorted({r.variant_id for r in summary.tasks}))
    if len(variants) < 2 and len({r.task_id for r in summary.tasks}) == len(summary.tasks):
        return None  # one variant, one row per task id: told before grouping them
    by_id: dict[str, dict[str, list[TaskRow]]] = {}
    for row in summary.tasks:
        by_id.setdefault(row.task_id, {}).setdefault(row.variant_id, []).append(row)
    rows = []
    for task_id, cells in by_id.items():
        outcomes = [outcome(r) for rs in cells.values() for r in rs]
        passed = sum(o == "succeeded" for o in outcomes)
        # 0 when every outcome is one (all passed, or none did); 1 at an even split.
        disagreement = 2 * min(passed, len(outcomes) - passed) / len(outcomes)
        rows.append(MatrixRow(task_id, tuple(
            tuple(sorted(cells[v], key=lambda r: r.replicate_index)) if v in cells else None
            for v in variants), round(disagreement, 6)))
    rows.sort(key=lambda r: (-r.disagreement, r.task_id))
    return Matrix(variants, tuple(rows[:most]), len(rows))


_FAILURES_FIRST = {"error": 0, "failed": 1, "unfinished": 2, "ungraded": 3, "succeeded": 4}
_SORT_KEYS: dict[str, Any] = {
    "failures": lambda r: _FAILURES_FIRST[outcome(r)],
    "key": lambda r: r.task_key,
    "status": status_of,
    "score": lambda r: r.weighted_score,
    "duration": lambda r: r.duration_seconds,
    "tokens": lambda r: r.tokens.total,
    "cost": lambda r: r.cost_usd,
    "attempts": lambda r: r.attempts,
}
