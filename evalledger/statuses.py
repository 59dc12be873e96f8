"""Final statuses of a task and the category each one counts in (docs/results.md).

A task that was interrupted has no final status at all: it is unfinished, and a
resume runs it again. That is why there is no INTERRUPTED member here.
"""

from __future__ import annotations

from enum import StrEnum


class FinalStatus(StrEnum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    TIMEOUT = "TIMEOUT"
    MAX_TURNS_EXHAUSTED = "MAX_TURNS_EXHAUSTED"
    TOKEN_BUDGET_EXCEEDED = "TOKEN_BUDGET_EXCEEDED"
    COST_BUDGET_EXCEEDED = "COST_BUDGET_EXCEEDED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    ERROR = "ERROR"
    BUILD_FAILED = "BUILD_FAILED"
    STALLED = "STALLED"
    NOT_GRADED = "NOT_GRADED"

    @property
    def category(self) -> Category:
        return _CATEGORY[self]


class Category(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ERROR = "error"
    UNGRADED = "ungraded"


_CATEGORY: dict[FinalStatus, Category] = {
    FinalStatus.SUCCESS: Category.SUCCEEDED,
    FinalStatus.FAILURE: Category.FAILED,
    FinalStatus.TIMEOUT: Category.FAILED,
    # The old harness's agent ran out of turns: never written by a run, only imported.
    FinalStatus.MAX_TURNS_EXHAUSTED: Category.FAILED,
    FinalStatus.TOKEN_BUDGET_EXCEEDED: Category.FAILED,
    FinalStatus.COST_BUDGET_EXCEEDED: Category.FAILED,
    # Its processes hit a resource limit (docs/isolation.md, "Limits"): the agent's.
    FinalStatus.LIMIT_EXCEEDED: Category.FAILED,
    FinalStatus.ERROR: Category.ERROR,
    FinalStatus.BUILD_FAILED: Category.ERROR,
    # Silent for its stall_timeout and ended for it (docs/tasks.md, "Stalls and retries").
    FinalStatus.STALLED: Category.ERROR,
    # A task with no success criteria whose command finished: it ran, nothing judged it.
    FinalStatus.NOT_GRADED: Category.UNGRADED,
}
class FailureClass(StrEnum):
    """Who failed an attempt that did not succeed (docs/results.md, "Failure classes")."""

    AGENT = "agent"
    """It ran and failed its criteria, timed out while working, passed its budget."""
    INFRA = "infra"
    """What runs it failed: the sandbox, the process start, a stall, a judge's API."""
    GRADER = "grader"
    """A criterion could not be checked for a reason of its own."""


def default_class(status: FinalStatus) -> FailureClass | None:
    """The class of a status when the attempt did not say (recorded before classes, or
    imported): ERROR, BUILD_FAILED and STALLED are infrastructure's; the other failures
    the agent's; a success or an ungraded attempt has none."""
    if status in (FinalStatus.SUCCESS, FinalStatus.NOT_GRADED):
        return None
    if status in (FinalStatus.ERROR, FinalStatus.BUILD_FAILED, FinalStatus.STALLED):
        return FailureClass.INFRA
    return FailureClass.AGENT


def left_out(category: Category | None, failure_class: FailureClass | None) -> bool:
    """Whether a verdict is left out of the rates (docs/results.md, "Failure classes"):
    an infrastructure failure the runner saw itself, in the error category (a sandbox,
    a process that could not start, a stall, a judge's API). A failure the agent's own
    stream blames on its model API is classed infra and retried, but stays in the rates:
    a printed line is the agent's word, not evidence."""
    return failure_class == FailureClass.INFRA and category == Category.ERROR


# The categories a pass rate is taken over: what was judged.
GRADED = frozenset({Category.SUCCEEDED, Category.FAILED, Category.ERROR})


class RunStatus(StrEnum):
    """How a batch ended, as recorded by ``run.finished``."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    BUDGET_STOPPED = "budget_stopped"
    # Too many infrastructure failures in a row (--max-infra-failures): stopped dispatching.
    INFRA_STOPPED = "infra_stopped"


class ShownStatus(StrEnum):
    """A run's status as every reader shows it (``runs``, ``show``, ``report``,
    ``run.md``, the viewer): the recorded ``RunStatus`` of its latest ``run.finished``,
    ``running`` while none came after its latest start or resume, and ``cut off`` for a
    run whose process on this host is gone without recording one (a crash: ``resume``
    finishes it). ``projections.shown_status`` decides which."""

    RUNNING = "running"
    COMPLETED = RunStatus.COMPLETED.value
    INTERRUPTED = RunStatus.INTERRUPTED.value
    BUDGET_STOPPED = RunStatus.BUDGET_STOPPED.value
    INFRA_STOPPED = RunStatus.INFRA_STOPPED.value
    CUT_OFF = "cut off"

    @property
    def in_sql(self) -> str:
        """What the ``runs`` SQL view says of a run shown so. The view reads the ledger
        alone and cannot ask whether a process lives: a run cut off is ``running`` there."""
        return "running" if self is ShownStatus.CUT_OFF else self.value
