"""The final-status rule: how what happened in one attempt becomes its final status,
error message and score (docs/tasks.md, "The final status of an attempt").

Pure: the runner gathers the facts (``AttemptFacts``) and this module alone decides.
The first that holds wins:

1. the sandbox could not be prepared: ``BUILD_FAILED`` (the command never ran);
2. the runner itself raised: ``ERROR``;
2b. the command was silent for its ``stall_timeout`` and ended for it: ``STALLED``;
3. a live budget was passed: its ``*_BUDGET_EXCEEDED`` (the command was stopped for it,
   so what its criteria saw afterwards is not its doing);
4. the task's deadline cut something off, the command or a ``run_command`` criterion
   (cut off, or not started once it had passed): ``TIMEOUT``;
4a. what the command left cannot be graded (folders nested deeper than 256 levels, a
   path past 3,072 bytes: ``_workspace_diff.WorkspaceUnfit``): ``FAILURE``, saying so;
4b. a criterion could not be checked (a judge's API failed, or answered nothing
   readable): ``ERROR``, naming it (never a verdict either way);
5. no criteria: ``NOT_GRADED`` (it ran to its end, nothing judges it);
6. every criterion passed: ``SUCCESS``; else ``FAILURE``, naming what failed.

Invariant: the error message is None exactly for ``SUCCESS`` and ``NOT_GRADED``.

Each failure has a class (docs/results.md, "Failure classes"): 1, 2, 2b and 4b are
infrastructure's (what runs the agent failed, not the agent), 3, 4, 4a and 6 the
agent's, also when the agent's own stream blames its model API (an overloaded or 5xx
answer it gave up on, ``api_error``): that is said in the message, and is the agent's
word, not something the runner saw. A stall (2b) behind the gateway while no model call
of it waited on its API is the agent's too (``own_stall``: its own silence, seen).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from evalledger.ledger import CriterionResult
from evalledger.statuses import FailureClass, FinalStatus

from ._criteria import CUT_OFF, NOT_RUN, weighted_score


class BudgetStop(NamedTuple):
    """The live budget an attempt passed: the status it ends with and by how much."""

    status: FinalStatus
    detail: str


@dataclass(frozen=True)
class AttemptFacts:
    """What happened in one attempt, as the runner saw it."""

    criteria: Sequence[CriterionResult] = ()
    # The command ran until the task's deadline and was stopped there.
    command_timed_out: bool = False
    # The task's timeout in seconds, for the message a TIMEOUT carries.
    timeout: float = 0.0
    budget_stop: BudgetStop | None = None
    # Why the sandbox could not be prepared.
    build_failed: str | None = None
    # What the runner raised, as ``Type: message``.
    error: str | None = None
    # Why the command was ended as stalled (its stall_timeout passed in silence).
    stalled: str | None = None
    # Behind the gateway, no model call of it was waiting on its API then: its own
    # silence (a sleep, a hung tool), not a hung API.
    own_stall: bool = False
    # The model API error the agent's stream reported giving up on (overloaded, 5xx).
    api_error: str | None = None
    # Why what the command left cannot be graded (_workspace_diff.WorkspaceUnfit): its doing.
    unfit: str | None = None
    # Behind the gateway: how its last model call failed, as the gateway saw it.
    api_failure: str | None = None


@dataclass(frozen=True)
class Verdict:
    """An attempt's final status, the ``error_message`` that says why it did not
    succeed (None when it did, or when nothing judged it), and its weighted score."""

    status: FinalStatus
    error_message: str | None
    score: float
    failure_class: FailureClass | None = None


def final_status(facts: AttemptFacts) -> Verdict:
    """Decide how an attempt ended (the order is in the module's docstring)."""
    status, message, blame = _status(facts)
    if (blame is FailureClass.AGENT and facts.api_failure is not None
            and status in (FinalStatus.FAILURE, FinalStatus.TIMEOUT)):
        # Seen, not said: the gateway passed the agent's last model call on and the API
        # failed it. What the agent did after is the API's doing: infrastructure's.
        return Verdict(status, f"{message} (the model API failed: {facts.api_failure}, "
                               "as the gateway saw)", weighted_score(facts.criteria), _INFRA)
    if blame is FailureClass.AGENT and facts.api_error is not None:
        # Said, not seen: a line the agent printed is no evidence (an agent that prints a
        # fake 529 must not pass its failure off as infra, nor earn retries). It stays the
        # agent's; the message says what it claimed.
        message = f"{message} (the agent's model API failed: {facts.api_error})"
    return Verdict(status, message, weighted_score(facts.criteria), blame)


_INFRA, _AGENT = FailureClass.INFRA, FailureClass.AGENT


def _status(facts: AttemptFacts) -> tuple[FinalStatus, str | None, FailureClass | None]:
    if facts.build_failed is not None:
        return FinalStatus.BUILD_FAILED, facts.build_failed, _INFRA
    if facts.error is not None:
        return FinalStatus.ERROR, facts.error, _INFRA
    if facts.stalled is not None:
        return FinalStatus.STALLED, facts.stalled, _AGENT if facts.own_stall else _INFRA
    if facts.budget_stop is not None:
        return (*facts.budget_stop, _AGENT)
    if facts.command_timed_out or any(c.detail in (CUT_OFF, NOT_RUN) for c in facts.criteria):
        return FinalStatus.TIMEOUT, f"timed out after {facts.timeout:g}s", _AGENT
    if facts.unfit is not None:
        return FinalStatus.FAILURE, f"the workspace cannot be graded: {facts.unfit}", _AGENT
    if errored := [f"{c.type}: {c.detail}" for c in facts.criteria if c.errored]:
        return FinalStatus.ERROR, "; ".join(errored), _INFRA
    if not facts.criteria:
        return FinalStatus.NOT_GRADED, None, None
    failed = [f"{c.type}: {c.detail}" for c in facts.criteria if not c.passed]
    if not failed:
        return FinalStatus.SUCCESS, None, None
    return FinalStatus.FAILURE, "; ".join(failed), _AGENT
