"""Resume: the partition of a run's keys, fingerprint drift, and the plan of a resume.

The rules are in docs/results.md ("Resume and drift"). In short: a run's planned
keys split in two, those whose latest attempt reached a final status (kept) and
the rest (to run: never started, interrupted, or cut off by a crash); with
``retry_errors``, keys whose latest status is in the ``error`` category run
again too. Every planned key lands on exactly one side.

Drift compares the fingerprint stored with the run (the latest ``run.started``
or ``run.resumed``) with the one computed now from the same options: the options
that are not ``Operational``, and per task key the hash of what its resolved
definition evaluates (its annotations, description, tags and expect, left out).
A key whose hash changed is then compared field by field with the definition
recorded with that hash (any ``task.started`` holding it, handed in by the
caller), so each changed field is named with its value before and now; a key
whose earlier definition was never recorded (no attempt with it started) can only
say "definition changed". A run recorded before annotations left the hash stored
hashes of the whole definition: a key matching either hash has not drifted.

``plan_resume`` puts those rules together with the budget and liveness checks.
It is pure: the tasks resolved now and whether the run's process still lives
are handed in by the caller.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import msgspec
from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from evalledger._text import visible
from evalledger.errors import EvalledgerError
from evalledger.ledger import (
    Fingerprint,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
)
from evalledger.options import ExecutorKind, RunOptions
from evalledger.statuses import Category

from ._fold import Fold, on
from ._versions import RESUME_VERSION

if TYPE_CHECKING:
    from evalledger.suite import ResolvedTask, TaskSet


_CATEGORIES = {c.value: c for c in Category}


class Partition(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    kept: list[str]
    to_run: list[str]
    attempts: dict[str, int]


class _ResumeState(msgspec.Struct, gc=False):
    """``ResumeFold.state()``: what a ``resume_fold`` snapshot stores, a field per
    attribute of the fold (in sorted order: a payload is canonical JSON)."""

    attempts: list[int]
    """Per planned key, in planned order: its latest attempt (0: never started)."""
    boundary_seq: int
    config: dict[str, Any]
    finished: bool
    fingerprint: dict[str, Any]
    found: bool
    host: dict[str, Any]
    imported: dict[str, Any] | None
    latest: list[str | None]
    """Per planned key, in planned order: how its latest attempt ended (a category;
    "" unfinished; null never started)."""
    planned: list[str]
    resumed_at: str | None


class ResumeFold(Fold):
    """Folds one run's lifecycle events into the resume partition."""

    VERSION = RESUME_VERSION
    STATE = _ResumeState

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.found = False
        self.config = RunOptions()
        self.fingerprint = Fingerprint()
        # The host of the latest run.started / run.resumed, and whether a
        # run.finished came after it: who may still be running the run
        # (evalledger.hosts.running_pid asks the operating system).
        self.host: dict[str, Any] = {}
        self.finished = False
        # The seq of the latest run.started / run.resumed: a resume appends only if
        # it is still the latest (Ledger.append(if_run_at=...)).
        self.boundary_seq = 0
        # When the latest run.resumed was recorded (None: the fingerprint is the
        # start's): what drift is measured since.
        self.resumed_at: str | None = None
        # run.started.imported: the run came from the old harness (docs/import.md).
        self.imported: dict[str, Any] | None = None
        # Invariant: _planned keeps first-planned order; a dict used as an ordered set.
        self._planned: dict[str, None] = {}
        self._attempts: dict[str, int] = {}
        # The latest attempt's final category per key; None while unfinished.
        self._latest: dict[str, Category | None] = {}

    def state(self) -> dict[str, Any]:
        latest = self._latest
        state = _ResumeState(
            attempts=[self._attempts.get(k, 0) for k in self._planned],
            boundary_seq=self.boundary_seq, config=self.config.model_dump(mode="json"),
            finished=self.finished, fingerprint=self.fingerprint.model_dump(mode="json"),
            found=self.found, host=self.host, imported=self.imported,
            latest=[(c.value if c else "") if k in latest else None
                    for k in self._planned for c in (latest.get(k),)],
            planned=list(self._planned), resumed_at=self.resumed_at)
        return msgspec.to_builtins(state)  # type: ignore[no-any-return]

    @classmethod
    def _restored(cls, run_id: str, s: _ResumeState) -> ResumeFold:
        fold = cls(run_id)
        fold.boundary_seq, fold.finished, fold.found = s.boundary_seq, s.finished, s.found
        fold.config = RunOptions.model_validate(s.config)
        fold.fingerprint = Fingerprint.model_validate(s.fingerprint)
        fold.host, fold.imported, fold.resumed_at = s.host, s.imported, s.resumed_at
        fold._planned = dict.fromkeys(s.planned)
        fold._attempts = {k: n for k, n in zip(s.planned, s.attempts, strict=True) if n}
        # By value from a table, not Category(c): 100,000 enum lookups are 0.1 s.
        fold._latest = {k: _CATEGORIES[c] if c else None
                        for k, c in zip(s.planned, s.latest, strict=True) if c is not None}
        return fold

    @on(RunStarted)
    def _run_started(self, event: RunStarted) -> None:
        self.found = True
        self.config = event.config
        self.imported = event.imported
        self._boundary(event.fingerprint, event.host, event.seq)
        self.resumed_at = None
        self._planned.update(dict.fromkeys(event.planned))

    @on(RunResumed)
    def _run_resumed(self, event: RunResumed) -> None:
        self._boundary(event.fingerprint, event.host, event.seq)
        self.resumed_at = event.ts
        self._planned.update(dict.fromkeys(event.to_run))

    def _boundary(self, fingerprint: Fingerprint, host: dict[str, Any], seq: int | None) -> None:
        self.fingerprint = fingerprint
        self.host, self.finished = host, False
        self.boundary_seq = seq or 0

    @on(RunFinished)
    def _run_finished(self, event: RunFinished) -> None:
        self.finished = True

    @on(TaskStarted)
    def _task_started(self, event: TaskStarted) -> None:
        self._planned.setdefault(event.task_key, None)
        self._attempts[event.task_key] = max(self._attempts.get(event.task_key, 0), event.attempt)
        self._latest[event.task_key] = None

    @on(TaskCompleted)
    def _task_completed(self, event: TaskCompleted) -> None:
        # Only a started attempt counts, as in the summary and the SQL views.
        started = event.task_key in self._latest
        if started and event.attempt >= self._attempts.get(event.task_key, 0):
            self._latest[event.task_key] = event.category

    @on(TaskInterrupted)
    def _task_interrupted(self, event: TaskInterrupted) -> None:
        self._latest[event.task_key] = None

    @property
    def planned(self) -> list[str]:
        """Every key the run planned (or started), in first-planned order."""
        return list(self._planned)

    @property
    def options(self) -> RunOptions:
        """The run's options as its latest start or resume ran them (a raised budget, a
        relocated suite hold); ``run.started``'s config when nothing later says."""
        if self.fingerprint.options:
            try:
                return RunOptions.model_validate(self.fingerprint.options)
            except ValueError:  # written by a version whose options differ: the config
                pass
        return self.config

    def partition(self, *, retry_errors: bool = False, rerun_failed: bool = False,
                  rerun: Sequence[str] = ()) -> Partition:
        """Kept and to-run keys. Unfinished keys run; with ``retry_errors`` keys in the
        error category too, with ``rerun_failed`` those in the failed category, and keys
        matching a ``rerun`` pattern (a key or an ``fnmatch`` glob) whatever they ended."""
        again = {Category.ERROR} if retry_errors else set()
        again |= {Category.FAILED} if rerun_failed else set()
        kept: list[str] = []
        to_run: list[str] = []
        for key in self._planned:
            category = self._latest.get(key)
            finished = (category is not None and category not in again
                        and not any(fnmatchcase(key, p) for p in rerun))
            (kept if finished else to_run).append(key)
        return Partition(
            run_id=self.run_id, kept=kept, to_run=to_run, attempts=dict(self._attempts)
        )


class Drift(BaseModel):
    """What changed between the stored fingerprint and now."""

    model_config = ConfigDict(frozen=True)

    options: dict[str, tuple[Any, Any]] = {}
    changed: list[str] = []
    fields: dict[str, list[tuple[str, Any, Any]]] = {}
    """Per changed key whose earlier definition was recorded: each changed field (a
    dotted path such as ``env.MODE``), its value then and now. A changed key without
    an entry could not be compared field by field."""
    added: list[str] = []
    removed: list[str] = []

    @property
    def any(self) -> bool:
        return bool(self.options or self.changed or self.added or self.removed)

    def lines(self) -> list[str]:
        """Drift as a person reads it, one line per difference."""
        out = [f"option {k}: {shown(before)} → {shown(now)}"
               for k, (before, now) in self.options.items()]
        for k in self.changed:
            changes = self.fields.get(k)
            if not changes:
                out.append(f"task {k}: definition changed")
            out += [f"task {k}: {name}: {shown(before)} → {shown(now)}"
                    for name, before, now in changes or ()]
        out += [f"task {k}: new" for k in self.added]
        out += [f"task {k}: no longer defined" for k in self.removed]
        return out


# Longer values (a prompt, a list of criteria) are cut in a drift line: it names the
# field; the ledger holds both whole (task.started.definition).
_SHOWN = 60


def shown(value: Any) -> str:
    """A value in a drift line: as JSON (a whole number without ``.0``), one line, cut
    at ``_SHOWN`` characters, control characters spelled out."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = visible(json.dumps(value, ensure_ascii=False, sort_keys=True), tabs=False)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


def fingerprint(options: RunOptions, tasks: Sequence[ResolvedTask]) -> Fingerprint:
    """What drift is measured against: the run's options, one definition hash per key."""
    return Fingerprint(
        options=options.model_dump(mode="json"),
        tasks={t.task_key: t.definition_hash for t in tasks},
    )


@functools.cache
def _defaults() -> dict[str, Any]:
    """A field the recorded definition lacks (recorded before the field existed) had its
    default: only a value other than the default is a change. Read when drift is: the
    task models cost `verify`, which folds runs, a tenth of its start-up."""
    from evalledger.suite import ResolvedTask

    return {name: to_jsonable_python(field.get_default(call_default_factory=True))
            for name, field in ResolvedTask.model_fields.items()
            if not field.is_required() and name != "ray"}  # ray: not in the definition

Recorded = Callable[[Collection[str]], Mapping[str, Mapping[str, Any]]]
"""Given definition hashes, the definitions ``task.started`` recorded with them (each
hash found; any attempt's, of any key): the caller's read of the ledger."""


def compute_drift(stored: Fingerprint, now: Fingerprint, *, tasks: Sequence[ResolvedTask] = (),
                  recorded: Recorded | None = None) -> Drift:
    """Differences from ``stored`` to ``now``, ignoring ``Operational`` options.

    Args:
        tasks: the tasks ``now`` fingerprints: their definitions, compared field by
            field with the recorded ones, and the hashes older versions computed.
        recorded: reads the definitions recorded with the stored hashes of the keys
            whose hash changed (none given: changed keys are not compared by field).
    """
    from evalledger.suite import evaluated

    keys = (set(stored.options) | set(now.options)) - RunOptions.operational()
    options = {
        k: (stored.options.get(k), now.options.get(k))
        for k in sorted(keys)
        if stored.options.get(k) != now.options.get(k)
    }
    by_key = {t.task_key: t for t in tasks}
    candidates = sorted(
        k for k in stored.tasks.keys() & now.tasks.keys()
        if stored.tasks[k] != now.tasks[k]
        and not (k in by_key and stored.tasks[k] == by_key[k].legacy_hash)
    )
    before = dict(recorded({str(stored.tasks[k]) for k in candidates})
                  if recorded is not None and candidates else {})
    changed: list[str] = []
    fields: dict[str, list[tuple[str, Any, Any]]] = {}
    for k in candidates:
        then = before.get(str(stored.tasks[k]))
        if then is None or k not in by_key:
            changed.append(k)  # nothing recorded to compare with: the hash says it
            continue
        differences = _differences(evaluated({**_defaults(), **then}),
                                   evaluated({**_defaults(), **by_key[k].definition()}))
        if differences:  # none: only annotations (or how they were recorded) differ
            changed.append(k)
            fields[k] = differences
    return Drift(
        options=options,
        changed=changed,
        fields=fields,
        added=sorted(now.tasks.keys() - stored.tasks.keys()),
        removed=sorted(stored.tasks.keys() - now.tasks.keys()),
    )


def _differences(then: Any, now: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two definitions differ, as (dotted path, then, now): into mappings key by
    key and into lists of one length item by item, whole values otherwise."""
    if then == now:
        return []
    if isinstance(then, dict) and isinstance(now, dict):
        return [d for name in sorted(then.keys() | now.keys())
                for d in _differences(then.get(name), now.get(name),
                                      f"{path}.{name}" if path else str(name))]
    if isinstance(then, list) and isinstance(now, list) and len(then) == len(now) and path:
        return [d for i, (a, b) in enumerate(zip(then, now, strict=True))
                for d in _differences(a, b, f"{path}[{i}]")]
    return [(path, then, now)]


class ResumeRefused(EvalledgerError):
    """The run cannot be resumed as asked; the message says why and what to do.

    ``drift`` is what was found before refusing (empty when refused earlier).
    """

    def __init__(self, message: str, drift: Drift | None = None) -> None:
        super().__init__(message)
        self.drift = drift or Drift()


@dataclass(frozen=True)
class ResumeRequest:
    """What a resume is asked beyond running what the run left unfinished
    (docs/cli.md, "resume"). A field left at its default keeps the run as it was."""

    strict: bool = False
    """Refuse when the run drifted since it last started or resumed."""
    retry_errors: bool = False
    """Also run keys whose latest status is in the error category."""
    rerun_failed: bool = False
    """Also run keys whose latest status is in the failed category."""
    rerun: Sequence[str] = ()
    """Also run the keys matching these (task keys or ``fnmatch`` globs), whatever they
    ended."""
    model: str | None = None
    """The model every task uses from now on (its definitions change: drift)."""
    max_parallel: int | None = None
    """Tasks at once (None: as the run had it)."""
    max_cost_usd: float | None = None
    """A new run-level budget in USD (None: the latest one recorded)."""
    kill_grace: float | None = None
    """Seconds between SIGTERM and SIGKILL (None: as the run had it)."""
    relocate: tuple[str, str] | None = None
    """``(old, new)``: the suite moved; recorded paths under folder ``old`` are read
    under ``new`` (not drift; later resumes keep the new place)."""
    executor: ExecutorKind | None = None
    """Where attempts run from now on, with ``ray_address`` (None: as the run had it)."""
    ray_address: str | None = None
    """With ``executor``: the Ray cluster to join (None: a local Ray)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rerun", tuple(self.rerun))  # frozen: set once, here


@dataclass(frozen=True)
class ResumePlan:
    """What a resume will do, decided before anything runs. The executor runs it as it
    is (``executor.Resume`` is the part of it a batch reads)."""

    run_id: str
    options: RunOptions
    """The run's options as this resume runs them (parallelism and budget applied)."""
    tasks: TaskSet
    """Every task resolved now (``run.resumed`` fingerprints them all)."""
    drift: Drift
    partition: Partition
    to_run: list[str]
    """Keys that will run: unfinished (or rerun) and still defined, and the added ones."""
    added: list[str]
    """Keys defined since the run began (new tasks): they join the run now."""
    undefined: list[str]
    """Keys that should run but are no longer defined: they cannot."""
    spent_usd: float
    """What the run spent before this resume; a run-level budget covers the whole run."""
    boundary_seq: int
    """The seq of the run.started / run.resumed the plan was made from: the resume is
    refused (``RunConflict``) if another process resumed the run since."""
    finished: bool
    """Whether the run's latest batch recorded ``run.finished``."""
    request: ResumeRequest
    """What was asked (recorded in ``run.resumed``)."""

    @property
    def has_work(self) -> bool:
        """Whether this resume runs a batch: keys to run, or a run cut off after its last
        task, which an empty batch ends (``run.resumed``, then ``run.finished``)."""
        return bool(self.to_run) or not self.finished

    @property
    def skip(self) -> frozenset[str]:
        """Keys defined now that this resume does not run."""
        return frozenset(t.task_key for t in self.tasks.tasks) - set(self.to_run)

    @property
    def attempts(self) -> dict[str, int]:
        """Per key, its latest attempt number so far (the next one is one more)."""
        return self.partition.attempts

    @property
    def drift_record(self) -> dict[str, Any]:
        """The drift as ``run.resumed`` records it: its lines, or nothing."""
        return {"lines": self.drift.lines()} if self.drift.any else {}

    @property
    def rerun(self) -> Sequence[str]:
        return self.request.rerun

    @property
    def rerun_failed(self) -> bool:
        return self.request.rerun_failed

    @property
    def retry_errors(self) -> bool:
        return self.request.retry_errors


def plan_resume(
    state: ResumeFold,
    request: ResumeRequest | None = None,
    *,
    load: Callable[[RunOptions], TaskSet],
    spent_usd: float,
    running_pid: int | None = None,
    recorded: Recorded | None = None,
) -> ResumePlan:
    """Decide what resuming a run does, by the rules of docs/results.md.

    Args:
        state: the run's lifecycle events, folded.
        request: what the resume is asked (default: the unfinished keys, as recorded).
        load: resolves the run's tasks now from its recorded options (reads the
            task files: the caller's I/O). Called only once the run may resume.
        spent_usd: what the run spent so far (every usage of every attempt).
        running_pid: the process still running the run, if any
            (``evalledger.hosts.running_pid``).
        recorded: reads the definitions ``task.started`` recorded with given hashes
            (the ledger: the caller's I/O), so drift names the fields that changed.

    Raises:
        ResumeRefused: no such run, an imported run, still running, a relocation that
            moves nothing, a ``rerun`` pattern that matches no key, drifted under
            ``strict`` (new tasks included), or its budget is spent while there is
            work left.
    """
    request = request or ResumeRequest()
    _refuse_unresumable(state, running_pid)
    latest, stored = _relocated(state, request.relocate)
    if request.model is not None:
        latest = latest.model_copy(update={"model": request.model})
    task_set = load(latest)
    options = _options_now(latest, request)
    drift = compute_drift(stored, fingerprint(options, task_set.tasks), tasks=task_set.tasks,
                          recorded=recorded)
    _refuse_drift(state, drift, request)
    partition = state.partition(retry_errors=request.retry_errors,
                                rerun_failed=request.rerun_failed, rerun=request.rerun)
    defined = {t.task_key for t in task_set.tasks}
    # Tasks defined since the run began join it: planned by this resume, run now.
    planned = set(state.planned)
    added = [k for k in drift.added if k in defined and k not in planned]
    to_run = [k for k in partition.to_run if k in defined] + added
    if to_run:
        _refuse_spent(state.run_id, options, spent_usd, drift)
    return ResumePlan(
        run_id=state.run_id,
        options=options,
        tasks=task_set,
        drift=drift,
        partition=partition,
        to_run=to_run,
        added=added,
        undefined=[k for k in partition.to_run if k not in defined],
        spent_usd=spent_usd,
        boundary_seq=state.boundary_seq,
        finished=state.finished,
        request=request,
    )


def _refuse_unresumable(state: ResumeFold, running_pid: int | None) -> None:
    """Refuse a run that is not there, was imported, or is still running."""
    run_id = state.run_id
    if not state.found:
        raise ResumeRefused(f"run {run_id} has no run.started event; it cannot be resumed")
    if state.imported is not None:
        source = visible(str(state.imported.get("source") or "an old harness's folder"))
        raise ResumeRefused(
            f"run {run_id} was imported (from {source}): its tasks were defined by the "
            "old harness, so it cannot be resumed; run them with `evalledger run`")
    if running_pid is not None:
        raise ResumeRefused(
            f"run {run_id} is still running (pid {running_pid} on this host); wait for it, or "
            "stop it first"
        )


def _relocated(state: ResumeFold,
               relocate: tuple[str, str] | None) -> tuple[RunOptions, Fingerprint]:
    """The run's latest options and stored fingerprint, moved with the suite: moving it
    is not drift, so the stored fingerprint moves too."""
    latest, stored = state.options, state.fingerprint
    if relocate is None:
        return latest, stored
    moved = relocated(latest, *relocate)
    if moved == latest:
        raise ResumeRefused(f"--relocate {relocate[0]}={relocate[1]}: no recorded path "
                            f"of run {state.run_id} is under {relocate[0]}")
    if stored.options:
        stored = stored.model_copy(update={"options": relocated(
            RunOptions.model_validate(stored.options), *relocate).model_dump(mode="json")})
    return moved, stored


def _options_now(latest: RunOptions, request: ResumeRequest) -> RunOptions:
    """The options the resume runs with: the latest ones, with what the request
    changes of how the run executes (never drift)."""
    update: dict[str, Any] = {
        "max_parallel": request.max_parallel or latest.max_parallel,
        "max_cost_usd": (request.max_cost_usd if request.max_cost_usd is not None
                         else latest.max_cost_usd),
        "kill_grace": request.kill_grace or latest.kill_grace,
    }
    if request.executor is not None:  # else as the run had it
        update |= {"executor": request.executor, "ray_address": request.ray_address}
    return latest.model_copy(update=update)


def _refuse_drift(state: ResumeFold, drift: Drift, request: ResumeRequest) -> None:
    """Refuse drift under ``strict``, and a ``rerun`` pattern that matches no key."""
    run_id = state.run_id
    if drift.any and request.strict:
        # Measured from the latest start or resume: drift an earlier resume went on
        # with is in its run.resumed, and is not refused again.
        since = ("it started" if state.resumed_at is None
                 else f"its last resume, at {state.resumed_at}")
        raise ResumeRefused(
            f"run {run_id} drifted since {since}: {len(drift.lines())} difference(s), "
            "printed above; resume without --strict to go on anyway",
            drift,
        )
    planned = state.planned
    if unmatched := [p for p in request.rerun if not any(fnmatchcase(k, p) for k in planned)]:
        raise ResumeRefused(f"--rerun {unmatched[0]!r} matches no task key of run {run_id} "
                            "(see `evalledger show`)", drift)


def _refuse_spent(run_id: str, options: RunOptions, spent_usd: float, drift: Drift) -> None:
    """Refuse work left for a run whose budget is spent."""
    if options.max_cost_usd is not None and spent_usd > options.max_cost_usd:
        raise ResumeRefused(
            f"run {run_id} already spent ${spent_usd:.4f} of its ${options.max_cost_usd:.4f} "
            "budget; resume with a higher --max-cost",
            drift,
        )


def relocated(options: RunOptions, old: str, new: str) -> RunOptions:
    """``options`` with every recorded path under the folder ``old`` moved under ``new``."""
    old, new = old.rstrip("/") or "/", new.rstrip("/") or "/"

    def move(path: str | None) -> str | None:
        if path is None or not (path == old or path.startswith(old.rstrip("/") + "/")):
            return path
        return new + path[len(old):] if old != "/" else new.rstrip("/") + path

    return options.model_copy(update={
        "paths": [move(p) for p in options.paths],
        "experiment": move(options.experiment),
        "pricing": move(options.pricing),
        "out": move(options.out),
        "cwd": move(options.cwd),
    })
