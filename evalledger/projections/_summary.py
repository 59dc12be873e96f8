"""The run summary (``run.json``, docs/results.md) as a fold over one run's events.

The executor feeds this fold every event it commits, so the live progress
display and the summary written at the end of a run are this fold's output; a
rebuild from the ledger in another process, months later, replays the same
events through the same code. That is why they cannot disagree.

Counting rules:
- a task key counts by its latest attempt that reached a final status (the SQL
  view ``task_results`` says the same); ``tasks_run`` counts keys that have one,
  and the three category buckets add up to it (a validator enforces it). Keys
  planned but never finished are counted apart. (Resume is stricter: a key whose
  latest attempt was interrupted is run again, see ``_resume``.)
- tokens and cost are the run's real spend: every ``task.usage`` of every
  attempt, interrupted ones included, apart by role (the agent's, grading's). A
  usage with no price (``cost_usd`` null) makes ``cost_complete`` false and the
  totals floors; it is never booked as 0. So does an attempt whose ``task.completed``
  says its cost is incomplete though each usage it reported had a price (an imported
  TIMEOUT: the old harness never recorded the turn it killed).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from sys import intern
from typing import Any, TypeVar

import msgspec

from evalledger._gc import collector_paused
from evalledger.hosts import attempt_environment, session_environment
from evalledger.ledger import (
    NO_TOKENS,
    RunFinished,
    RunGraded,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskFlagged,
    TaskGraded,
    TaskInterrupted,
    TaskIsolation,
    TaskSkipped,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.statuses import (
    GRADED,
    Category,
    FailureClass,
    FinalStatus,
    default_class,
    left_out,
)

from ._canonical import spliced
from ._fold import Fold, on
from ._intervals import clustered_stderr
from ._results import (
    ModelUsage,
    RoleUsage,
    RunHeadline,
    RunSummary,
    SkippedFile,
    TaskRow,
    VariantStats,
)
from ._versions import SUMMARY_VERSION

# The run's own grading, as its task.completed events recorded it.
ORIGINAL = "original"


class UnknownGrades(KeyError):
    """A reader asked for a grade set the run does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


def isolation_label(backend: str, asked: str | None) -> str:
    """How an attempt's isolation reads in reports: what ran, and what was asked when
    that could not run (``none (asked bwrap)``)."""
    return backend if asked is None else f"{backend} (asked {asked})"


# environment_info keys that are per task by nature, not versions to agree on.
_NOT_VERSIONS = frozenset({"exit_code"})


def _grades_of(usage: TaskUsage) -> str | None:
    """The regrade's grade set a judge's usage paid for (None: the run's own grading)."""
    found = usage.call.get("grades") if usage.call else None
    return found if isinstance(found, str) else None


def unreported_turn(usage: TaskUsage) -> bool:
    """``usage`` books a turn its agent never reported (docs/tasks.md, "Usage and cost"):
    an estimate of no tokens at no known cost."""
    return (usage.estimate and usage.cost_usd is None and not usage.input_tokens
            and not usage.output_tokens and not usage.cache_read_tokens
            and not usage.cache_write_tokens)


class _Spend(msgspec.Struct, array_like=True, gc=False):
    """Token and cost accumulator; an unpriced usage turns it into a floor.

    Counts are plain ints, not a ``TokenCounts`` per usage: a rebuild adds 10,000s of them.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    complete: bool = True
    # Some of it an estimate (``task.usage.estimate``): a floor, though priced.
    estimated: bool = False

    def add(self, usage: TaskUsage) -> None:
        self.input += usage.input_tokens
        self.output += usage.output_tokens
        self.cache_read += usage.cache_read_tokens
        self.cache_write += usage.cache_write_tokens
        if usage.estimate:
            self.estimated = True
        if usage.cost_usd is None:
            self.complete = False
        else:
            self.cost += usage.cost_usd

    @property
    def tokens(self) -> TokenCounts:
        return TokenCounts.model_construct(
            cache_read_tokens=self.cache_read, cache_write_tokens=self.cache_write,
            input_tokens=self.input, output_tokens=self.output,
        )


class _Done(msgspec.Struct, array_like=True, gc=False):
    """What a key's latest finished attempt ended with: the fields the summary reads."""

    attempt: int
    final_status: FinalStatus
    weighted_score: float
    duration_seconds: float
    counts: tuple[int, int, int, int]
    """input, output, cache read, cache write: plain ints (a ``TokenCounts`` per key is
    built only for the summary's rows)."""
    cost_usd: float | None
    cost_complete: bool
    error_message: str | None
    environment_info: dict[str, Any]
    grade_pending: bool = False
    failure_class: FailureClass | None = None
    """As recorded; for an attempt recorded before classes, its status's."""
    regraded: _Spend | None = None
    """Judged by a regrade's grade set (``graded``): what that grading cost."""

    @classmethod
    def of(cls, event: TaskCompleted, session: dict[str, Any],
           shared: Callable[[dict[str, Any]], dict[str, Any]]) -> _Done:
        """``event``'s completion; its environment as ``shared`` gives it back."""
        # event.tokens: a TokenCounts, or a lite event's struct of the same fields.
        t = event.tokens
        return cls(event.attempt, event.final_status, event.weighted_score,
                   event.duration_seconds,
                   (t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens),
                   event.cost_usd, event.cost_complete, event.error_message,
                   shared(attempt_environment(event.environment_info, session,
                                              event.imported is not None)),
                   event.grade_pending,
                   event.failure_class or default_class(event.final_status))

    def graded(self, grade: _Grade) -> _Done:
        """This completion as ``grade`` judged it: its verdict, the rest as it ran."""
        blame = default_class(grade.final_status)
        if blame is FailureClass.AGENT and self.failure_class is FailureClass.INFRA:
            blame = FailureClass.INFRA  # its model API failed it: no grading changes that
        return msgspec.structs.replace(self, final_status=grade.final_status,
                                       weighted_score=grade.weighted_score,
                                       error_message=grade.error_message, grade_pending=False,
                                       failure_class=blame, regraded=grade.spend)

    @property
    def category(self) -> Category:
        return self.final_status.category

    @property
    def tokens(self) -> TokenCounts:
        i, o, r, w = self.counts
        return TokenCounts.model_construct(input_tokens=i, output_tokens=o,
                                           cache_read_tokens=r, cache_write_tokens=w)


class _Grade(msgspec.Struct, array_like=True, gc=False):
    """A key's latest verdict of one grade set (``task.graded``), for one attempt."""

    attempt: int
    final_status: FinalStatus
    weighted_score: float
    error_message: str | None
    spend: _Spend = msgspec.field(default_factory=_Spend)
    """What grading it again cost (the judges of the regrade)."""


# Most keys never get a grade, a flag or a judge: their tables are this one empty dict,
# never written to (each is replaced by a dict of its own first: ``_own``), which saves
# a run's fold 256 bytes a key (25 MB of a 100,000-task run's verify).
_T = TypeVar("_T")
_NO_TAGS: list[str] = []  # never written to: a row copies its tags
_NONE_YET: dict[str, Any] = {}


def _none_yet() -> dict[str, Any]:
    return _NONE_YET


def _own(table: dict[str, _T]) -> dict[str, _T]:
    """``table`` to write to: a new dict for the shared empty one."""
    return {} if table is _NONE_YET else table


class _Key(msgspec.Struct, array_like=True, gc=False):
    """One task key's state: its latest attempt and what it finished with."""

    task_key: str
    task_id: str
    variant_id: str
    replicate_index: int
    tags: list[str]
    attempts: int = 0
    spend: _Spend = msgspec.field(default_factory=_Spend)
    """Every attempt's, for ``tasks_cost_incomplete``."""
    completed: _Done | None = None
    cost_gap: bool = False
    """Some attempt's ``task.completed`` said ``cost_complete`` false: spend its usage
    does not cover (every attempt's, as ``spend``)."""
    isolations: dict[str, str] = msgspec.field(default_factory=_none_yet)
    """By attempt number (as text): what confined it, as its last ``task.isolation``
    says; an attempt without one ran with none."""
    grades: dict[str, _Grade] = msgspec.field(default_factory=_none_yet)
    """By grade set: its latest verdict of this key (for the attempt it names)."""
    flags: dict[str, list[str]] = msgspec.field(default_factory=_none_yet)
    """By attempt number (as text): the rules a scan flagged it with, sorted, once each."""
    grading: dict[str, _Spend] = msgspec.field(default_factory=_none_yet)
    """By attempt number (as text): what the run's own grading of it used (its judges'
    usage, role ``grader``); a regrade's is its grade's."""

    def flagged(self) -> list[str]:
        """The flags of the attempt its row reports: the one that finished, else the
        latest."""
        attempt = self.completed.attempt if self.completed else self.attempts
        return self.flags.get(str(attempt), [])

    def judged(self, grades: str) -> _Key:
        """This key as grade set ``grades`` judges it: its counted attempt's verdict of
        that set if it has one, else the run's own (``original``)."""
        grade = self.grades.get(grades)
        if self.completed is None or grade is None or grade.attempt != self.completed.attempt:
            return self
        return msgspec.structs.replace(self, completed=self.completed.graded(grade))

    def isolation(self) -> str:
        """What confined the attempt its row reports: the one that finished, else the
        latest."""
        attempt = self.completed.attempt if self.completed else self.attempts
        return self.isolations.get(str(attempt), "none")

    @property
    def cost_complete(self) -> bool:
        return self.spend.complete and not self.cost_gap


class _Shared:
    """Equal dicts as one: most completions of a run record the same environment (its
    session's versions and an exit code 0), and a dict of them per key was a fifth of
    a 100,000-task run's fold. Equal means the same JSON, keys in the same order (a
    dict's order is shown); none is written to after."""

    LIMIT = 1024  # distinct values remembered at once (then forgotten, and begun again)

    def __init__(self) -> None:
        self._seen: dict[bytes, dict[str, Any]] = {}

    def __call__(self, value: dict[str, Any]) -> dict[str, Any]:
        try:
            key = _encode(value)
        except (TypeError, msgspec.EncodeError):
            return value
        if b"null" in key:  # None, or a NaN or infinity msgspec also writes as null
            return value
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= self.LIMIT:
                self._seen.clear()
            found = self._seen[key] = value
        return found


_encode = msgspec.json.encode


class _Skipped(msgspec.Struct, array_like=True, gc=False):
    path: str
    reason: str
    deliberate: bool


class _State(msgspec.Struct, gc=False):
    """``SummaryFold.state()``: what a ``summary_fold`` snapshot stores, a field per
    attribute of the fold (in sorted order: a payload is canonical JSON). Each key,
    spend and completion is a list of its struct's fields, in their declared order."""

    by_model: list[tuple[str | None, _Spend]]
    by_role: list[tuple[str, _Spend]]
    calls: dict[str, int]
    cost_gap: bool
    drift: list[dict[str, Any]]
    experiment_id: str | None
    finished_at: str | None
    grade_sets: list[tuple[str, bool]]
    keys: list[_Key]
    latest_complete: str | None
    max_parallel: int
    models: list[str]
    planned: list[str]
    running: list[str]
    session: dict[str, Any]
    signing_keys: list[str]
    skipped: list[_Skipped]
    spend: _Spend
    started_at: str | None
    status: str
    unreported: bool


class SummaryFold(Fold):
    """Folds one run's events into a ``RunSummary``; feed it live or from the ledger."""

    VERSION = SUMMARY_VERSION
    STATE = _State

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.experiment_id: str | None = None
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.status = "running"
        self.max_parallel = 1
        self.planned: dict[str, None] = {}
        self.skipped: list[_Skipped] = []
        self.drift: list[dict[str, Any]] = []
        self.keys: dict[str, _Key] = {}
        self.spend = _Spend()
        self.models: set[str] = set()
        self.by_model: dict[str | None, _Spend] = {}
        self.by_role: dict[str, _Spend] = {}
        # The agents' model calls through the gateway, by how each was answered.
        self.calls: dict[str, int] = {}
        # A task.completed of the run said cost_complete false (of any key: the `runs`
        # view reads every completion).
        self.cost_gap = False
        # One said so though every usage of its key had a price: spend never reported,
        # the agent's (grading comes after the attempt, from what it left).
        self.unreported = False
        self.running: set[str] = set()
        # Grade set -> whether some regrade of it was complete; in the order of their
        # latest run.graded (the run's own grading, ``original``, is not listed).
        self.grade_sets: dict[str, bool] = {}
        # The grade set of the latest run.graded that was complete: the default.
        self.latest_complete: str | None = None
        # What the latest run.started / run.resumed recorded that its completions leave
        # out (hosts.SESSION_KEYS).
        self.session: dict[str, Any] = {}
        # Each batch's public key, in order (run.started, run.resumed).
        self.signing_keys: list[str] = []
        self._environments = _Shared()

    def state(self) -> dict[str, Any]:
        return msgspec.to_builtins(self._state(list(self.keys.values())))  # type: ignore[no-any-return]

    def state_json(self) -> Iterator[bytes]:
        """The canonical JSON of ``state()``, in pieces: a key at a time (``spliced``)."""
        return spliced(lambda keys: msgspec.to_builtins(self._state(keys)),
                       map(msgspec.to_builtins, self.keys.values()))

    def _state(self, keys: list[Any]) -> _State:
        return _State(
            by_model=list(self.by_model.items()), by_role=list(self.by_role.items()),
            calls=self.calls, cost_gap=self.cost_gap, drift=self.drift,
            experiment_id=self.experiment_id,
            finished_at=self.finished_at, grade_sets=list(self.grade_sets.items()),
            keys=keys, latest_complete=self.latest_complete,
            max_parallel=self.max_parallel, models=sorted(self.models),
            planned=list(self.planned), running=sorted(self.running), session=self.session,
            signing_keys=self.signing_keys, skipped=self.skipped,
            spend=self.spend, started_at=self.started_at, status=self.status,
            unreported=self.unreported)

    @classmethod
    def _restored(cls, run_id: str, s: _State) -> SummaryFold:
        fold = cls(run_id)
        fold.by_model, fold.by_role = dict(s.by_model), dict(s.by_role)
        fold.calls = dict(s.calls)
        fold.cost_gap, fold.drift, fold.experiment_id = s.cost_gap, s.drift, s.experiment_id
        fold.finished_at, fold.max_parallel = s.finished_at, s.max_parallel
        fold.grade_sets, fold.latest_complete = dict(s.grade_sets), s.latest_complete
        fold.keys = {key.task_key: key for key in s.keys}
        fold.models, fold.planned = set(s.models), dict.fromkeys(s.planned)
        fold.running, fold.skipped, fold.spend = set(s.running), s.skipped, s.spend
        fold.session, fold.signing_keys = s.session, s.signing_keys
        fold.started_at, fold.status, fold.unreported = s.started_at, s.status, s.unreported
        return fold

    @on(TaskUsage)
    def _task_usage(self, event: TaskUsage) -> None:
        key = self.keys.get(event.task_key)
        if event.call and event.call.get("via") == "gateway":
            # One whose answer broke off mid-way failed, whatever its status began as.
            answered = "broken" if event.call.get("broken") else str(event.call.get("status"))
            self.calls[answered] = self.calls.get(answered, 0) + 1
        if unreported_turn(event):
            # Spend never reported (a turn cut off), not a model without a price: the
            # cost is a floor for want of spend, as an incomplete task.completed says.
            self.cost_gap = self.unreported = True
            if key is not None:
                key.cost_gap = True
            return
        self.spend.add(event)
        if event.estimate:
            # What the stream showed before the attempt was cut off (priced, or not):
            # the spend is a floor for want of the agent's report, as an unreported turn.
            self.cost_gap = self.unreported = True
            if key is not None:
                key.cost_gap = True
        if key is not None:
            key.spend.add(event)
            if event.role != "agent" and _grades_of(event) is None:
                # The run's own grading, while the attempt it grades is the key's latest.
                key.grading = _own(key.grading)
                key.grading.setdefault(str(key.attempts), _Spend()).add(event)
        if event.model:
            self.models.add(event.model)
        model = self.by_model.get(event.model)
        if model is None:
            model = self.by_model[event.model] = _Spend()
        model.add(event)
        role = self.by_role.get(event.role)
        if role is None:
            role = self.by_role[event.role] = _Spend()
        role.add(event)

    @on(TaskStarted)
    def _task_started(self, event: TaskStarted) -> None:
        key = self.keys.get(event.task_key)
        if key is None:
            # A run's keys share a few variants' names, and most have no tags.
            key = self.keys[event.task_key] = _Key(
                event.task_key, event.task_id, intern(event.variant_id),
                event.replicate_index, list(event.tags) if event.tags else _NO_TAGS)
        key.attempts = max(key.attempts, event.attempt)
        self.planned.setdefault(event.task_key, None)
        self.running.add(event.task_key)

    @on(TaskCompleted)
    def _task_completed(self, event: TaskCompleted) -> None:
        key = self.keys.get(event.task_key)
        if key is not None and (not key.completed or event.attempt >= key.completed.attempt):
            key.completed = _Done.of(event, self.session, self._environments)
        if not event.cost_complete:
            self.cost_gap = True
            if key is not None:
                self.unreported = self.unreported or key.spend.complete
                key.cost_gap = True
        self.running.discard(event.task_key)

    @on(TaskGraded)
    def _task_graded(self, event: TaskGraded) -> None:
        key = self.keys.get(event.task_key)
        if key is not None:
            spend = _Spend(event.tokens.input_tokens, event.tokens.output_tokens,
                           event.tokens.cache_read_tokens, event.tokens.cache_write_tokens,
                           event.cost_usd or 0.0, event.cost_usd is not None)
            key.grades = _own(key.grades)
            key.grades[event.grades] = _Grade(event.attempt, event.final_status,
                                              event.weighted_score, event.error_message,
                                              spend)

    @on(TaskFlagged)
    def _task_flagged(self, event: TaskFlagged) -> None:
        key = self.keys.get(event.task_key)
        if key is not None:
            key.flags = _own(key.flags)
            rules = key.flags.setdefault(str(event.attempt), [])
            if event.rule not in rules:
                rules.append(event.rule)
                rules.sort()

    @on(RunGraded)
    def _run_graded(self, event: RunGraded) -> None:
        complete = self.grade_sets.pop(event.grades, False) or event.complete
        self.grade_sets[event.grades] = complete  # now the latest
        if event.complete:
            self.latest_complete = event.grades

    @on(TaskInterrupted)
    def _task_interrupted(self, event: TaskInterrupted) -> None:
        self.running.discard(event.task_key)

    @on(TaskIsolation)
    def _task_isolation(self, event: TaskIsolation) -> None:
        key = self.keys.get(event.task_key)
        if key is not None:
            key.isolations = _own(key.isolations)
            key.isolations[str(event.attempt)] = isolation_label(event.backend, event.asked)

    @on(RunStarted)
    def _run_started(self, event: RunStarted) -> None:
        # A run merged from shards has a run.started per shard: it began with the first.
        if self.started_at is None:
            self.experiment_id = event.experiment_id
            self.started_at = event.ts
        self.max_parallel = event.max_parallel
        self.planned.update(dict.fromkeys(event.planned))
        self.session = session_environment(event.host)
        if event.public_key is not None:
            self.signing_keys.append(event.public_key)

    @on(RunResumed)
    def _run_resumed(self, event: RunResumed) -> None:
        self.max_parallel = event.max_parallel
        self.session = session_environment(event.host)
        if event.public_key is not None:
            self.signing_keys.append(event.public_key)
        self.status = "running"
        self.finished_at = None
        self.planned.update(dict.fromkeys(event.to_run))
        if event.drift:  # keys sorted, as in any payload: it goes into snapshots
            self.drift.append(dict(sorted({"at": event.ts, **event.drift}.items())))

    @on(RunFinished)
    def _run_finished(self, event: RunFinished) -> None:
        self.finished_at = event.ts
        self.status = event.status.value
        self.running.clear()

    @on(TaskSkipped)
    def _task_skipped(self, event: TaskSkipped) -> None:
        self.skipped.append(_Skipped(event.path, event.reason, event.deliberate))

    # -- the live view reads these directly ----------------------------------------------------

    def default_grades(self) -> str:
        """The grade set readers show unless asked: that of the latest complete
        ``run.graded``, else the run's own grading (``original``)."""
        return self.latest_complete or ORIGINAL

    def _grades(self, grades: str | None) -> str:
        """``grades``, checked (None: the default)."""
        if grades is None:
            return self.default_grades()
        if grades != ORIGINAL and grades not in self.grade_sets:
            known = ", ".join([ORIGINAL, *self.grade_sets])
            raise UnknownGrades(f"run {self.run_id} has no grade set {grades!r} (it has: "
                                f"{known})")
        return grades

    def _judged(self, grades: str) -> list[_Key]:
        """Every key as grade set ``grades`` judges it."""
        if grades == ORIGINAL:
            return list(self.keys.values())
        return [key.judged(grades) for key in self.keys.values()]

    def counts(self, grades: str | None = None) -> dict[Category, int]:
        return _tally(k.completed for k in self._judged(self._grades(grades))
                      if k.completed is not None)

    def headline(self, grades: str | None = None, *, count_infra: bool = False) -> RunHeadline:
        """The run in one line, without building a row per task (the runs list), as
        grade set ``grades`` judges it (default: ``default_grades``); its rates leave
        infrastructure failures out unless ``count_infra``.

        Raises:
            UnknownGrades: the run has no grade set of that name.
        """
        grades = self._grades(grades)
        judged = self._judged(grades)
        counts = _tally(k.completed for k in judged if k.completed is not None)
        infra = _infra(judged)
        run = sum(counts.values())
        return RunHeadline(
            run_id=self.run_id,
            grades=grades,
            experiment_id=self.experiment_id,
            status=self.status,
            started_at=self.started_at,
            finished_at=self.finished_at,
            duration_seconds=_seconds_between(self.started_at, self.finished_at),
            max_parallel=self.max_parallel,
            tasks_planned=len(self.planned),
            tasks_run=run,
            tasks_succeeded=counts[Category.SUCCEEDED],
            tasks_failed=counts[Category.FAILED],
            tasks_error=counts[Category.ERROR],
            tasks_ungraded=counts[Category.UNGRADED],
            tasks_unfinished=len(self.planned) - run,
            pass_rate=_rate(counts, 0 if count_infra else infra),
            pass_rate_stderr=_rate_stderr(judged, count_infra),
            tasks_infra=infra,
            infra_counted=count_infra,
            tokens=self.spend.tokens,
            total_cost_usd=round(self.spend.cost, 10),
            cost_complete=self.spend.complete and not self.cost_gap,
            models=sorted(self.models),
            usage_by_role=self._roles(),
        )

    def _roles(self) -> list[RoleUsage]:
        """Per role, the agent's first; spend never reported makes the agent's a floor."""
        roles = dict(self.by_role)
        if self.unreported and "agent" not in roles:
            roles["agent"] = _Spend()
        return [
            RoleUsage(role=name, tokens=spend.tokens, cost_usd=round(spend.cost, 10),
                      cost_complete=spend.complete and not (name == "agent" and self.unreported))
            for name, spend in sorted(roles.items(), key=lambda i: (i[0] != "agent", i[0]))
        ]

    def summary(self, grades: str | None = None, *, count_infra: bool = False) -> RunSummary:
        """The run's summary as grade set ``grades`` judges it (default:
        ``default_grades``).

        Raises:
            UnknownGrades: the run has no grade set of that name.
        """
        with collector_paused():  # a row per key: see evalledger._gc
            return self._summary(grades, count_infra)

    def _summary(self, grades: str | None, count_infra: bool) -> RunSummary:
        summary, rows = self._summary_parts(grades, count_infra)
        return summary.model_copy(update={"tasks": list(rows)})

    def summary_json(self, grades: str | None = None, *, count_infra: bool = False,
                     exclude: frozenset[str] = frozenset()) -> Iterator[bytes]:
        """The canonical JSON (keys sorted, no spaces) of ``summary(...)``'s JSON dump
        without the fields ``exclude``, in pieces: a row per key made, written and let
        go in turn (a 100,000-task run's summary is 44 MB of JSON and its models
        several times that: ``verify`` checks a stored one in flat memory).

        Raises:
            UnknownGrades: the run has no grade set of that name.
        """
        summary, rows = self._summary_parts(grades, count_infra)
        fields = summary.model_dump(mode="json", exclude={"tasks", *exclude})
        return spliced(lambda tasks: {**fields, "tasks": tasks},
                       (row.model_dump(mode="json") for row in rows))

    def _summary_parts(self, grades: str | None, count_infra: bool
                       ) -> tuple[RunSummary, Iterator[TaskRow]]:
        """The summary without its rows, and its rows (made as they are read)."""
        head = self.headline(grades, count_infra=count_infra)
        # The run's own verdicts are its keys as they stand: no table of them made again.
        judged = self.keys if head.grades == ORIGINAL else {
            key.task_key: key for key in self._judged(head.grades)}
        # Every planned key has a row: one that never started has no attempts. (Sorted
        # apart and merged: no set of a 100,000-task run's keys.)
        order = list(heapq.merge(sorted(self.planned),
                                 sorted(k for k in judged if k not in self.planned)))
        statuses = Counter(k.completed.final_status for k in judged.values()
                           if k.completed is not None)
        consensus, drift = self._versions()
        summary = RunSummary(
            **dict(head),
            tasks_token_budget_exceeded=statuses[FinalStatus.TOKEN_BUDGET_EXCEEDED],
            tasks_cost_budget_exceeded=statuses[FinalStatus.COST_BUDGET_EXCEEDED],
            skipped_tasks=[SkippedFile(path=s.path, reason=s.reason, deliberate=s.deliberate)
                           for s in self.skipped],
            tasks_cost_incomplete=sum(1 for k in self.keys.values() if not k.cost_complete),
            spend_unread=self._unread(),
            model_calls=dict(sorted(self.calls.items())),
            tasks_by_isolation=dict(sorted(Counter(
                k.isolation() for k in judged.values() if k.attempts).items())),
            usage_by_model=[
                ModelUsage(model=name, tokens=spend.tokens, cost_usd=round(spend.cost, 10),
                           cost_complete=spend.complete, estimated=spend.estimated)
                for name, spend in sorted(self.by_model.items(), key=lambda i: i[0] or "")
            ],
            grade_sets=[ORIGINAL, *self.grade_sets],
            # A key that never started has no flags.
            tasks_flagged=sum(1 for k in judged.values() if k.flagged()),
            variants=self._variants(list(judged.values()), count_infra),
            version_consensus=consensus,
            version_drift=drift,
            fingerprint_drift=list(self.drift),
            tasks=[],
            signing_keys=list(self.signing_keys),
        )
        rows = (self._row(judged[k]) if k in judged else _unstarted(k) for k in order)
        return summary, rows

    def _unread(self) -> dict[str, int]:
        """Per agent format, the keys whose latest attempt's spend went unread (its task
        said ``native``: ``environment_info.unread_format``)."""
        found: Counter[str] = Counter()
        for key in self.keys.values():
            done = key.completed
            if done is not None and isinstance(
                    unread := done.environment_info.get("unread_format"), str):
                found[unread] += 1
        return dict(sorted(found.items()))

    def row(self, task_key: str, grades: str | None = None) -> TaskRow | None:
        """One key's row of the summary, without building the others."""
        key = self.keys.get(task_key)
        return None if key is None else self._row(key.judged(self._grades(grades)))

    def _row(self, key: _Key) -> TaskRow:
        done = key.completed
        return TaskRow(
            task_key=key.task_key,
            task_id=key.task_id,
            variant_id=key.variant_id,
            replicate_index=key.replicate_index,
            tags=key.tags,
            attempts=key.attempts,
            final_status=done.final_status if done else None,
            category=done.category if done else None,
            weighted_score=done.weighted_score if done and done.category in GRADED else None,
            duration_seconds=done.duration_seconds if done else None,
            tokens=done.tokens if done else NO_TOKENS,
            cost_usd=done.cost_usd if done else None,
            cost_complete=done.cost_complete if done else True,
            error_message=done.error_message if done else None,
            failure_class=done.failure_class if done else None,
            grade_pending=done.grade_pending if done else False,
            flags=key.flagged(),
            isolation=key.isolation(),
            **_grader_fields(key, done),
        )

    def _variants(self, keys: list[_Key], count_infra: bool) -> list[VariantStats]:
        by_variant: dict[str, list[_Key]] = {}
        for key in keys:
            by_variant.setdefault(key.variant_id, []).append(key)
        # Planned, not started yet (a live run): counted in its variant's tasks, by
        # what its key says of it, as its row is (``_unstarted``).
        waiting = Counter(_unstarted(k).variant_id for k in self.planned if k not in self.keys)
        return [_variant_stats(name, by_variant.get(name, []), count_infra, waiting[name])
                for name in sorted(by_variant.keys() | waiting.keys())]

    def _versions(self) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
        # Values are compared as JSON: null and "None", 3 and "3" differ.
        # name -> (is text, text or JSON text) -> [value, count]
        seen: dict[str, dict[tuple[bool, str], list[Any]]] = {}
        for key in self.keys.values():
            if key.completed is None:
                continue
            for name, value in key.completed.environment_info.items():
                if name in _NOT_VERSIONS:
                    continue
                # Text as is (nearly every value, and cheap); the rest as JSON.
                spelled = ((True, value) if isinstance(value, str)
                           else (False, json.dumps(value, sort_keys=True)))
                entry = seen.setdefault(name, {}).setdefault(spelled, [value, 0])
                entry[1] += 1
        consensus = {n: next(iter(v.values()))[0] for n, v in sorted(seen.items()) if len(v) == 1}
        drift = {}
        for name, by_json in sorted(seen.items()):
            if len(by_json) > 1:
                # Plain text when every value is text (the common case); JSON otherwise,
                # so that "3" and 3 stay two entries.
                text = all(is_text for is_text, _ in by_json)
                drift[name] = dict(sorted(
                    (value if text else json.dumps(value, sort_keys=True), count)
                    for value, count in by_json.values()
                ))
        return consensus, drift


def _variant_stats(variant_id: str, keys: list[_Key], count_infra: bool = False,
                   waiting: int = 0) -> VariantStats:
    """A variant's results from its started keys, and ``waiting`` keys planned that
    have not started."""
    done = [k.completed for k in keys if k.completed is not None]
    counts = _tally(done)
    infra = _infra(keys)
    graded = _rated(keys, count_infra)
    scores = [k.completed.weighted_score for k in graded if k.completed is not None]
    samples = _samples(graded)
    at_k, at_k_stderr, hat_k = _by_k(samples)
    return VariantStats(
        variant_id=variant_id,
        tasks=len(keys) + waiting,
        tasks_run=len(done),
        tasks_succeeded=counts[Category.SUCCEEDED],
        tasks_failed=counts[Category.FAILED],
        tasks_error=counts[Category.ERROR],
        tasks_ungraded=counts[Category.UNGRADED],
        pass_rate=_rate(counts, 0 if count_infra else infra),
        pass_rate_stderr=_rate_stderr(keys, count_infra),
        tasks_infra=infra,
        infra_counted=count_infra,
        mean_score=_mean(scores),
        # Tasks of one graded replicate each are clusters of their own: no table of them.
        score_stderr=_round(clustered_stderr(
            scores, None if len(samples) == len(graded) else [k.task_id for k in graded])),
        pass_at_k=at_k,
        pass_at_k_stderr=at_k_stderr,
        pass_at_k_left_out=_left_out_at(at_k, samples),
        pass_hat_k=hat_k,
        flaky_tasks=sorted(t for t, (n, c) in samples.items() if 0 < c < n),
        cost_usd=round(sum(k.spend.cost for k in keys), 10),
        cost_complete=all(k.cost_complete for k in keys),
        tokens_total=sum(_tokens_of(k.spend) for k in keys),
        mean_duration_seconds=_mean([c.duration_seconds for c in done]),
    )


def _rated(keys: Iterable[_Key], count_infra: bool) -> list[_Key]:
    """The keys a variant's rates are taken over: graded, and (unless counted) not an
    infrastructure failure, which measures no agent."""
    return [k for k in keys if k.completed is not None and k.completed.category in GRADED
            and (count_infra or not left_out(k.completed.category,
                                             k.completed.failure_class))]


def _left_out_at(at_k: dict[str, float], samples: dict[str, tuple[int, int]],
                 ) -> dict[str, list[str]]:
    """Per k of pass@k, the task ids with fewer than k graded replicates (left out of
    it); only the k that leave some out."""
    return {k: sorted(t for t, (n, _) in samples.items() if n < int(k))
            for k in at_k if any(n < int(k) for n, _ in samples.values())}


def _tokens_of(spend: _Spend) -> int:
    return spend.input + spend.output + spend.cache_read + spend.cache_write


def _rate_stderr(keys: Iterable[_Key], count_infra: bool) -> float | None:
    """The pass rate's standard error clustered by task id, where some task has two
    graded replicates (they are not independent trials); None otherwise (the rate's
    interval is Wilson's then)."""
    graded = _rated(keys, count_infra)
    tasks = [k.task_id for k in graded]
    # Sorted, not a set: a 100,000-task run's set of ids is 4 MB of verify's peak.
    if not any(a == b for a, b in itertools.pairwise(sorted(tasks))):
        return None
    return _round(clustered_stderr(
        [float(k.completed is not None and k.completed.category == Category.SUCCEEDED)
         for k in graded], tasks))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _tally(done: Iterable[_Done]) -> dict[Category, int]:
    """Finished keys per category, every category present."""
    counts = dict.fromkeys(Category, 0)
    for completed in done:
        counts[completed.category] += 1
    return counts


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 6) if values else None


# (n, c) for the few replicates most tasks have, made once: a 100,000-task run's tally
# then holds no pair of its own per task (verify's memory).
_PAIRS = [[(n, c) for c in range(n + 1)] for n in range(17)]


def _samples(keys: list[_Key]) -> dict[str, tuple[int, int]]:
    """Task id -> (its graded replicates, the successful ones)."""
    samples: dict[str, tuple[int, int]] = {}
    for key in keys:
        done = key.completed
        if done is not None and done.category in GRADED:
            n, c = samples.get(key.task_id, (0, 0))
            n, c = n + 1, c + (done.category == Category.SUCCEEDED)
            samples[key.task_id] = _PAIRS[n][c] if n < len(_PAIRS) else (n, c)
    return samples


def _by_k(samples: dict[str, tuple[int, int]]
          ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """k -> pass@k, its standard error over task ids, and pass^k: each averaged over
    the task ids with at least k graded replicates."""
    most = max((n for n, _ in samples.values()), default=0)
    at_k, stderr, hat_k = {}, {}, {}
    for k in range(1, most + 1):
        eligible = [(n, c) for n, c in samples.values() if n >= k]
        reach = [pass_at(n, c, k) for n, c in eligible]
        at_k[str(k)] = round(statistics.fmean(reach), 6)
        if len(reach) >= 2:
            stderr[str(k)] = round(statistics.stdev(reach) / math.sqrt(len(reach)), 6)
        hat_k[str(k)] = round(statistics.fmean(pass_hat(n, c, k) for n, c in eligible), 6)
    return at_k, stderr, hat_k


def _rate(counts: dict[Category, int], infra: int = 0) -> float:
    """Succeeded over graded, less ``infra`` infrastructure failures: an ungraded task is
    not a failure, nor a success, and a broken sandbox measures no agent."""
    graded = sum(counts[c] for c in GRADED) - infra
    return round(counts[Category.SUCCEEDED] / graded, 6) if graded else 0.0


def _infra(keys: Iterable[_Key]) -> int:
    """The keys whose counted attempt is an infrastructure failure."""
    return sum(1 for k in keys if k.completed is not None
               and left_out(k.completed.category, k.completed.failure_class))


def pass_hat(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass^k, all of k samples passing, from ``n`` samples of
    which ``c`` passed: ``C(c, k) / C(n, k)`` (Yao et al. 2024, tau-bench)."""
    if not 0 < k <= n:
        raise ValueError(f"pass^{k} needs 1 <= k <= n = {n}")
    return math.comb(c, k) / math.comb(n, k)


def pass_at(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` passed:
    ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021), computed as a stable product."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n = {n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def _unstarted(task_key: str) -> TaskRow:
    """The row of a planned key that never started: what its key says, nothing more."""
    variant, _, rest = task_key.partition("/")
    task_id, _, replicate = rest.rpartition("/")
    return TaskRow(
        task_key=task_key, task_id=task_id or rest, variant_id=variant,
        replicate_index=int(replicate) if replicate.isdigit() else 0, tags=[], attempts=0,
        final_status=None, category=None, weighted_score=None, duration_seconds=None,
        tokens=NO_TOKENS, cost_usd=None, cost_complete=True, error_message=None,
    )


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    try:
        delta = _parse_ts(end) - _parse_ts(start)
    except ValueError:  # a hand-written ts that is not ISO 8601: no duration, no crash
        return None
    return round(delta.total_seconds(), 6)


def _parse_ts(ts: str) -> datetime:
    moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _grader_fields(key: _Key, done: _Done | None) -> dict[str, Any]:
    """What grading the attempt a row reports used: a regrade's, when its grade set
    judges the row, else the run's own grading's (nothing: no field)."""
    if done is None:
        return {}
    spend = done.regraded if done.regraded is not None else key.grading.get(str(done.attempt))
    if spend is None or not (spend.tokens.total or spend.cost or not spend.complete):
        return {}
    return {"grader_tokens": spend.tokens,
            "grader_cost_usd": round(spend.cost, 10) if spend.complete else None}
