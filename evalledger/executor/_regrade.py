"""Grading again: criteria checked against an attempt's kept workspace, long after its
command ran (``evalledger regrade``, docs/results.md "Grade sets").

The kept workspace is never graded in place: a grader may write in what it checks (a
test runner's caches, a planted ``conftest.py`` rewriting files), and the next regrade
must read what the attempt left, as this one did. Each attempt is graded in a copy,
confined as its command was (the isolation its ``task.isolation`` says ran), and the
copy is removed after.

What grading cannot change stays: an attempt the sandbox, the runner, a budget or
the timeout ended keeps that status (``verdict``), with its new criteria recorded.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from evalledger.ledger import CriterionResult
from evalledger.statuses import FinalStatus
from evalledger.suite import Criterion, ResolvedTask

from . import isolation as _isolation
from ._confinement import isolation_backend, make_jail
from ._criteria import CUT_OFF, Evidence, evaluate
from ._judges import Judging
from ._marks import MARKER_VAR
from ._process import DEFAULT_KILL_GRACE
from ._runner import command_env
from ._sandbox import copy_workspace, remove_tree
from ._status import AttemptFacts, BudgetStop, Verdict, final_status

# What grading cannot change: how the attempt ended before any criterion ran (a stalled
# command was ended halfway: what it left is not its result).
_KEPT = frozenset({FinalStatus.BUILD_FAILED, FinalStatus.ERROR, FinalStatus.STALLED})
_BUDGETS = frozenset({FinalStatus.TOKEN_BUDGET_EXCEEDED, FinalStatus.COST_BUDGET_EXCEEDED,
                      FinalStatus.LIMIT_EXCEEDED,
                      FinalStatus.MAX_TURNS_EXHAUSTED})


def gradable(status: FinalStatus, criteria: Sequence[CriterionResult] = ()) -> bool:
    """Whether a regrade can say anything of an attempt that ended so: its command ran
    and left a workspace (not a sandbox that failed, not a runner that erred), or its
    ERROR was only a criterion that could not be checked (a judge's API was down)."""
    return status not in _KEPT or (status is FinalStatus.ERROR
                                   and any(c.errored for c in criteria))


@dataclass(frozen=True)
class Recorded:
    """What the attempt's own events say, as a regrade needs it."""

    final_status: FinalStatus
    error_message: str | None
    exit_code: int | None
    criteria: Sequence[CriterionResult]
    stdout: str
    stderr: str
    isolation: str
    """The backend that confined the command: ``none``, ``bwrap`` or ``docker``."""


def verdict(recorded: Recorded, criteria: Sequence[CriterionResult], timeout: float) -> Verdict:
    """The attempt's status under new criteria: the final-status rule, with the facts
    of how its command ended taken from what was recorded."""
    budget = (BudgetStop(recorded.final_status, recorded.error_message or "")
              if recorded.final_status in _BUDGETS else None)
    # A TIMEOUT stays one unless its record proves the command ended in time: a
    # run_command that started and was cut off. (A criterion "not run" proves nothing:
    # the command itself may have used the time up.)
    command_timed_out = recorded.final_status is FinalStatus.TIMEOUT and not any(
        c.detail == CUT_OFF for c in recorded.criteria)
    return final_status(AttemptFacts(criteria, command_timed_out, timeout, budget))


class Grader:
    """Grades attempts of one run again, each in a copy of its kept workspace, under
    one private folder (removed by ``close``)."""

    def __init__(self, run_id: str, kill_grace: float = DEFAULT_KILL_GRACE) -> None:
        self.run_id = run_id
        self.kill_grace = kill_grace
        self.token = secrets.token_hex(8)
        self.root = Path(tempfile.mkdtemp(prefix=f"evalledger-regrade-{self.token}-"))
        self.base_env = dict(os.environ)
        self._canary: str | None = None
        self._count = 0

    def close(self) -> None:
        """Remove the copies, and any grader's container a cut-off grading left."""
        if (self.root / _isolation.DOCKER_MARK).exists():
            _isolation.remove_containers(self.token)
        remove_tree(self.root, ignore_errors=True)

    async def grade(self, task: ResolvedTask, criteria: Sequence[Criterion],
                    workspace: Path, recorded: Recorded,
                    judging: Judging | None = None) -> list[CriterionResult]:
        """``criteria`` checked against a copy of ``workspace``, confined as the
        attempt's command was.

        Raises:
            OSError: the workspace cannot be copied.
            IsolationUnavailable: the attempt ran confined and that isolation cannot run
                here now.
        """
        self._count += 1
        copy = self.root / str(self._count)
        await trio.to_thread.run_sync(copy_workspace, workspace, copy)
        try:
            jail = None
            if recorded.isolation in ("bwrap", "docker"):
                asked = task.model_copy(update={"isolation": recorded.isolation})
                backend, image = await isolation_backend(asked)
                if self._canary is None:
                    self._canary = await trio.to_thread.run_sync(_isolation.make_canary,
                                                                 self.root)
                jail = await make_jail(asked, backend, image, copy, self._canary, self.root,
                                       self.token, self.base_env)
            marker = f"{MARKER_VAR}={self.token}-{self._count}"
            env = command_env(task, self.base_env, self.run_id, marker, copy, jail)
            if jail is not None:  # graders see the task's folder, as the run's did
                env["EVALLEDGER_TASK_DIR"] = str(Path(task.source).parent)
            evidence = Evidence(copy, recorded.exit_code, recorded.stdout, recorded.stderr,
                                jail=jail)
            deadline = trio.current_time() + (task.timeout if task.timeout else math.inf)
            return await evaluate(criteria, evidence, env, None, deadline, self.kill_grace,
                                  judging)
        finally:
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(
                    lambda: remove_tree(copy, ignore_errors=True))
