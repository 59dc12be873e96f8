"""``regrade`` (``evalledger.regrade``): grade a finished run's attempts again from their
kept workspaces, as a grade set of its own; nothing recorded before is changed.

Per attempt counted (a key's latest finished one): its workspace (the run's
``artifacts/<task_key>/``) must be there and hash as its ``task.completed`` recorded
it (``kept_hash``); else it is refused, named. Each grading appends one
``task.graded`` as soon as it is done (a regrade killed midway keeps what it did), and
the regrade ends with one ``run.graded`` saying whether the set is complete; then the
run's snapshot is made again, so readers read the new default without a replay.

The criteria are those of the run's task files as they are now (resolved with the
options the run recorded, as a resume resolves them: what a user edits when the grading
was wrong), a file's (``--criteria``), the tasks' at another path (``--from-tasks``), or
each attempt's own as its ``task.started`` recorded them (``--recorded``). A regrade runs
commands (``run_command`` criteria): those a ledger names are believed only for a run
this ledger recorded itself; a run that arrived by ``merge`` or ``import-events`` is
regraded only with criteria given here.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalledger.errors import InvalidRequest
from evalledger.ledger import (
    EventRow,
    EventType,
    Ledger,
    RefusedGrade,
    RunGraded,
    Signer,
    TaskCompleted,
    TaskGraded,
    TaskIsolation,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.projections import ORIGINAL, SummaryFold
from evalledger.statuses import FinalStatus

from ._repository import load_fold, load_summary, run_is_over, write_snapshot
from ._settings import open_ledger

_LIFECYCLE = (EventType.TASK_STARTED, EventType.TASK_COMPLETED, EventType.TASK_ISOLATION)


@dataclass(frozen=True)
class RegradeRequest:
    """What to grade again, and by which criteria."""

    name: str | None = None
    """The grade set's name (default: ``regrade-N``, N one more than the sets so far)."""
    criteria: Path | None = None
    """A YAML file of criteria (a list, or ``success_criteria:``) for every attempt."""
    from_tasks: Path | None = None
    """Task files or a folder of them: each attempt graded by its task's criteria there."""
    only: tuple[str, ...] = ()
    """Task keys or ids (globs): grade only these (the set is then not complete)."""
    recorded: bool = False
    """Grade by the criteria each attempt's ``task.started`` recorded, not by the run's
    task files as they are now (the default)."""
    max_parallel: int = 4


@dataclass
class RegradeOutcome:
    run_id: str
    grades: str
    graded: list[tuple[TaskGraded, FinalStatus]] = field(default_factory=list)
    """Each grading and the status the attempt had before it (in the default set)."""
    refused: list[RefusedGrade] = field(default_factory=list)
    complete: bool = False
    reports: dict[str, Path] = field(default_factory=dict)
    """The run's report files written again (those it wrote: none when it wrote none)."""
    reports_error: str | None = None
    """Why they could not be written again (the grades are recorded all the same)."""


@dataclass(frozen=True)
class _Attempt:
    task_key: str
    started: TaskStarted
    completed: TaskCompleted
    isolation: str
    was: FinalStatus


def grade_again(ledger_path: Path | str, run: str, request: RegradeRequest,
            on_graded: Callable[[TaskGraded, FinalStatus], None] | None = None,
            ) -> RegradeOutcome:
    """Grade the run's counted attempts again (see the module's docstring).

    Raises:
        EvalledgerError: no such run, a run still going, a name that cannot be one,
            criteria that cannot be read, a transferred run without criteria given
            here, a ledger error. Nothing is appended then.
    """
    from evalledger.executor._regrade import Grader

    with open_ledger(ledger_path) as ledger:
        run_id = ledger.resolve_run(run)
        if not run_is_over(ledger, run_id):
            raise InvalidRequest(f"run {run_id} is still running: regrade it once it ended")
        summary = load_fold(ledger, SummaryFold, run_id)
        name = _name(request.name, summary)
        transferred = _transferred(ledger, run_id)
        criteria_for, criteria_from = _criteria_source(ledger, run_id, request, transferred)
        attempts = _attempts(ledger, run_id, summary, request.only)
        root = _artifacts_root(ledger, run_id)
        outcome = RegradeOutcome(run_id, name)
        grader = Grader(run_id)
        # The regrade's own key: its gradings sealed as a batch's verdicts are (reads of
        # a signed run believe no unsealed one), and it may seal nothing but gradings.
        signer = Signer(run_id)
        try:
            import trio

            trio.run(_grade_all, ledger, grader, _rates(ledger, run_id), attempts, root,
                     criteria_for, criteria_from, transferred, name, request.max_parallel,
                     outcome, on_graded, signer)
        finally:
            grader.close()
        outcome.refused.sort(key=lambda r: r.task_key)
        outcome.complete = not request.only and not outcome.refused
        ledger.append(signer.sealed([EventRow.of(RunGraded(
            run_id=run_id, grades=name, complete=outcome.complete, criteria_from=criteria_from,
            graded=len(outcome.graded), only=list(request.only), refused=outcome.refused))]))
        write_snapshot(ledger, run_id)
        _rewrite_reports(ledger, run_id, root.parent, outcome)
    return outcome


def _rewrite_reports(ledger: Ledger, run_id: str, folder: Path, outcome: RegradeOutcome
                     ) -> None:
    """The run's report files (run.json, run.md, report.html), where it wrote them, made
    again: they show what a read shows now (the default grade set), as ``report`` does;
    left as they were they said the old grades."""
    if not (folder / "run.json").is_file():
        return
    from evalledger.errors import EvalledgerError

    from ._reports import write_reports

    try:
        summary = load_summary(ledger, run_id).anchored(ledger.anchor(run_id))
        outcome.reports = write_reports(ledger, summary, folder)
    except (OSError, EvalledgerError) as e:
        outcome.reports_error = f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)


async def _grade_all(ledger: Ledger, grader: Any, rates: Any, attempts: list[_Attempt],
                     root: Path,
                     criteria_for: Callable[[TaskStarted], _Chosen | str],
                     criteria_from: str, transferred: bool, name: str, max_parallel: int,
                     outcome: RegradeOutcome,
                     on_graded: Callable[[TaskGraded, FinalStatus], None] | None,
                     signer: Signer) -> None:
    import trio

    from evalledger._workspace_diff import WorkspaceUnfit
    from evalledger.executor import open_writer
    from evalledger.executor._judges import Judging
    from evalledger.executor._regrade import Recorded, gradable, verdict
    from evalledger.executor.isolation import IsolationUnavailable, hash_tree

    limiter = trio.CapacityLimiter(max(1, max_parallel))

    def refuse(task_key: str, reason: str) -> None:
        outcome.refused.append(RefusedGrade(task_key=task_key, reason=reason))

    async def one(attempt: _Attempt) -> None:
        key, done = attempt.task_key, attempt.completed
        chosen = criteria_for(attempt.started)
        if isinstance(chosen, str):
            return refuse(key, chosen)
        criteria, criteria_hash = chosen.criteria, chosen.criteria_hash
        workspace = kept_workspace(root, key)
        if workspace is None:
            return refuse(key, "its task key is no folder name under the run's artifacts")
        task = (chosen.task.model_copy(update={"task_key": key}) if chosen.task is not None
                else _recorded_task(attempt))
        if isinstance(task, str):
            return refuse(key, task)
        # Confined as its command was; a run from elsewhere, as its task here says.
        isolation = task.isolation if transferred else attempt.isolation
        if done.kept_hash is None:
            return refuse(key, "its workspace was not kept (--preservation-mode none)")
        if not workspace.is_dir() or workspace.is_symlink():
            return refuse(key, f"its workspace is gone ({workspace})")
        async with limiter:
            try:
                found = await trio.to_thread.run_sync(hash_tree, workspace)
            except WorkspaceUnfit as e:
                return refuse(key, f"its workspace cannot be graded: {e} ({workspace})")
            if found != done.kept_hash:
                return refuse(key, f"its workspace changed since it was kept ({workspace})")
            stdout, stderr = _streams(ledger, attempt)
            recorded = Recorded(done.final_status, done.error_message, done.exit_code,
                                done.criteria, stdout, stderr, isolation)

            async def record(model: str | None, tokens: TokenCounts, cost: float | None,
                             call: dict[str, object]) -> None:
                await writer.append_durable(TaskUsage(  # spent: booked at once
                    run_id=done.run_id, task_key=key, model=model, role="grader",
                    cost_usd=cost, call={**call, "grades": name}, **dict(tokens)))

            judging = Judging(record, rates, workdir=Path(task.workdir)
                              if task.workdir else None)
            try:
                results = await grader.grade(task, criteria, workspace, recorded, judging)
            except IsolationUnavailable as e:
                return refuse(key, f"its isolation ({isolation}) cannot run here: {e}")
            except OSError as e:
                return refuse(key, f"its workspace cannot be copied: {e}")
        judged = verdict(recorded, results, task.timeout)
        event = TaskGraded(
            run_id=done.run_id, task_key=key, attempt=done.attempt, grades=name,
            cost_usd=round(judging.cost_usd, 10) if judging.cost_complete else None,
            tokens=judging.tokens,
            criteria=list(results), criteria_from=criteria_from, criteria_hash=criteria_hash,
            final_status=judged.status, category=judged.status.category,
            error_message=judged.error_message, weighted_score=judged.score,
            workspace_hash=found)
        await writer.append_durable(event)  # a fact as soon as it is one
        outcome.graded.append((event, attempt.was))
        if on_graded is not None:
            on_graded(event, attempt.was)

    # The batch's writer: appends leave the loop (a commit blocks no grading), each
    # commit sealed.
    async with open_writer(ledger, signer=signer) as writer, trio.open_nursery() as nursery:
        for attempt in attempts:
            if gradable(attempt.completed.final_status, attempt.completed.criteria):
                nursery.start_soon(one, attempt)
    outcome.graded.sort(key=lambda pair: pair[0].task_key)


def _rates(ledger: Ledger, run_id: str) -> Any:
    """The rate card the run priced with (its ``--pricing`` file, if it still loads)."""
    from evalledger.ledger import RunStarted
    from evalledger.pricing import DEFAULT_RATES, PricingError

    for event in ledger.events(run_id, types={EventType.RUN_STARTED}):
        if isinstance(event, RunStarted) and event.config.pricing:
            try:
                return DEFAULT_RATES.with_file(event.config.pricing)
            except (PricingError, OSError):
                return DEFAULT_RATES
    return DEFAULT_RATES


def kept_workspace(root: Path, task_key: str) -> Path | None:
    """Where the run kept the key's workspace, ``root/<task_key>``; None for a key that
    would lead anywhere else (``..``, an absolute path: a forged or transferred event)."""
    parts = Path(task_key).parts
    if not parts or Path(task_key).is_absolute() or any(p in ("..", ".") for p in parts):
        return None
    return root / task_key


def _name(given: str | None, summary: SummaryFold) -> str:
    if given is None:  # the first regrade-N no set has
        return next(name for n in itertools.count(len(summary.grade_sets) + 1)
                    if (name := f"regrade-{n}") not in summary.grade_sets)
    if given == ORIGINAL:
        raise InvalidRequest(f"{ORIGINAL!r} is the run's own grading: name the regrade "
                             "something else")
    if not given.strip() or any(c in given for c in "\n\r") or not given.isprintable():
        raise InvalidRequest(f"a grade set's name is one line of text, not {given!r}")
    return given


def _attempts(ledger: Ledger, run_id: str, summary: SummaryFold,
              only: Sequence[str]) -> list[_Attempt]:
    """The run's counted attempts (each key's latest finished one) that ``only`` keeps,
    with the events a grading reads."""
    found = []
    for key in summary.keys.values():
        if key.completed is None:
            continue
        if only and not any(fnmatch.fnmatchcase(key.task_key, p)
                            or fnmatch.fnmatchcase(key.task_id, p) for p in only):
            continue
        started = completed = None
        isolation = "none"
        number = key.completed.attempt
        for event in ledger.events(run_id, task_key=key.task_key, types=_LIFECYCLE):
            if isinstance(event, TaskStarted) and event.attempt == number:
                started = event
            elif isinstance(event, TaskCompleted) and event.attempt == number:
                completed = event
            elif isinstance(event, TaskIsolation) and event.attempt == number:
                isolation = event.backend
        if started is None or completed is None:
            continue  # imported without a start: nothing says what it was
        was = key.judged(summary.default_grades()).completed
        assert was is not None
        found.append(_Attempt(key.task_key, started, completed, isolation, was.final_status))
    if only and not found:
        raise InvalidRequest(f"no finished attempt of run {run_id} matches "
                             f"{', '.join(only)}")
    return found


def _streams(ledger: Ledger, attempt: _Attempt) -> tuple[str, str]:
    """What the attempt's command printed, per stream, as its output lines recorded it
    (a JSON line as its recorded object)."""
    from evalledger.ledger._page_queries import attempt_lines

    kept: dict[str, list[str]] = {"stdout": [], "stderr": []}
    for _, stream, text in attempt_lines(ledger, attempt.completed.run_id, attempt.task_key,
                                         attempt.started.seq or 0, attempt.completed.seq):
        kept.setdefault(stream, []).append(text)
    return "\n".join(kept["stdout"]), "\n".join(kept["stderr"])


def _artifacts_root(ledger: Ledger, run_id: str) -> Path:
    """Where the run kept its workspaces: ``<out>/<run_id>/artifacts`` as its first
    ``run.started`` recorded ``out`` (relative to its ``cwd``)."""
    from evalledger.ledger import RunStarted

    for event in ledger.events(run_id, types={EventType.RUN_STARTED}):
        if isinstance(event, RunStarted):
            return Path(event.config.cwd or ".") / event.config.out / run_id / "artifacts"
    raise InvalidRequest(f"run {run_id} has no run.started: nothing says where it kept "
                         "its workspaces")


@dataclass(frozen=True)
class _Chosen:
    """What grades an attempt: its criteria and their hash, and the task as it is now
    (None: as the attempt's ``task.started`` recorded it)."""

    criteria: list[Any]
    criteria_hash: str
    task: Any = None


def _transferred(ledger: Ledger, run_id: str) -> bool:
    """Whether the run arrived by ``merge``/``import-events`` or an import: its events
    are another ledger's word."""
    from evalledger.ledger._page_queries import run_imported
    from evalledger.ledger._queries import has_type

    return has_type(ledger, run_id, EventType.RUN_MERGED) or bool(run_imported(ledger, run_id))


def _criteria_source(ledger: Ledger, run_id: str, request: RegradeRequest, transferred: bool
                     ) -> tuple[Callable[[TaskStarted], _Chosen | str], str]:
    """How each attempt's criteria are found (or why there are none), and how
    ``task.graded`` names where they came from."""
    if sum((request.criteria is not None, request.from_tasks is not None,
            request.recorded)) > 1:
        raise InvalidRequest("give one of --criteria, --from-tasks and --recorded")
    if transferred and request.from_tasks is None:
        # Its events name the task definitions: the commands graders run, what they see,
        # how they are confined. Only task files here say that.
        raise InvalidRequest(
            f"run {run_id} came from elsewhere (merge, import): its events name what "
            "grading runs and how; give --from-tasks PATH (task files here)")
    if request.criteria is not None:
        criteria = _read_criteria(request.criteria)
        chosen = _Chosen(criteria, _criteria_hash(criteria))
        return (lambda started: chosen), f"criteria:{_one_line(request.criteria)}"
    if request.from_tasks is not None:
        return (_from_tasks(request.from_tasks),
                f"tasks:{_one_line(request.from_tasks)}")
    if not request.recorded:
        return _run_tasks(ledger, run_id), "tasks"

    def recorded(started: TaskStarted) -> _Chosen | str:
        raw = started.definition.get("success_criteria") or []
        try:
            criteria = _validate(raw)
        except ValueError as e:
            return f"its recorded criteria do not load: {_first_line(e)}"
        if not criteria:
            return "it has no criteria to grade by"
        return _Chosen(criteria, _criteria_hash(criteria))

    return recorded, "recorded"


def _recorded_task(attempt: _Attempt) -> Any:
    """The task as the attempt's ``task.started`` recorded it, or why it does not load
    (a row this version cannot read, or one written by hand)."""
    from evalledger.suite import ResolvedTask

    number = attempt.task_key.rsplit("/", 1)[-1]
    try:
        return ResolvedTask.model_validate(
            {**attempt.started.definition, "task_key": attempt.task_key,
             "replicate_index": int(number) if number.isdigit() else 0})
    except ValueError as e:
        return f"its recorded definition does not load: {_first_line(e)}"


def _one_line(path: Path) -> str:
    text = str(path)
    if not text.isprintable():
        raise InvalidRequest(f"a path of one printable line, not {text!r}")
    return text


def _from_tasks(path: Path) -> Callable[[TaskStarted], _Chosen | str]:
    from evalledger.suite import load_tasks

    if not path.exists():
        raise InvalidRequest(f"--from-tasks: {path} does not exist")
    return _finder(load_tasks([str(path.resolve())]).tasks, str(path))


def _run_tasks(ledger: Ledger, run_id: str) -> Callable[[TaskStarted], _Chosen | str]:
    """The run's task files as they are now, resolved with the options it recorded (as a
    resume resolves them): what a user edits when the grading was wrong."""
    from evalledger.errors import EvalledgerError
    from evalledger.ledger import RunStarted

    from ._callbacks import Callbacks
    from ._prepare import load_task_set

    options = next((e.config for e in ledger.events(run_id, types={EventType.RUN_STARTED})
                    if isinstance(e, RunStarted)), None)
    if options is None:
        raise InvalidRequest(f"run {run_id} has no run.started: give --criteria, "
                             "--from-tasks or --recorded")
    try:
        task_set = load_task_set(options, Callbacks(), missing_ok=True)
    except EvalledgerError as e:
        raise InvalidRequest(f"run {run_id}'s task files do not load now ({e}); give "
                             "--criteria, --from-tasks or --recorded") from None
    return _finder(task_set.tasks, "the run's task files")


def _finder(tasks: Sequence[Any], where: str) -> Callable[[TaskStarted], _Chosen | str]:
    """Each attempt's criteria among ``tasks``: its task key's, else its task id's."""
    by_key = {t.task_key: t for t in tasks}
    by_id = {t.task_id: t for t in tasks}

    def find(started: TaskStarted) -> _Chosen | str:
        task = by_key.get(started.task_key) or by_id.get(started.task_id)
        if task is None:
            return f"no task {started.task_id} in {where}"
        if not task.success_criteria:
            return f"task {started.task_id} in {where} has no criteria"
        return _Chosen(list(task.success_criteria), _criteria_hash(task.success_criteria),
                       task)

    return find


def _read_criteria(path: Path) -> list[Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InvalidRequest(f"--criteria {path}: {_first_line(e)}") from None
    if isinstance(data, dict) and set(data) == {"success_criteria"}:
        data = data["success_criteria"]
    if not isinstance(data, list) or not data:
        raise InvalidRequest(f"--criteria {path}: expected a list of criteria (or "
                             "success_criteria: [...])")
    try:
        return _validate(data)
    except ValueError as e:
        raise InvalidRequest(f"--criteria {path}: {_first_line(e)}") from None


def _validate(raw: object) -> list[Any]:
    from pydantic import TypeAdapter

    from evalledger.suite import Criterion

    return TypeAdapter(list[Criterion]).validate_python(raw)


def _criteria_hash(criteria: Sequence[Any]) -> str:
    from evalledger.suite import content_hash

    return content_hash([c.model_dump(mode="json") for c in criteria])


def _first_line(error: BaseException) -> str:
    """What went wrong, in one line: for a validation error its first error and where."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError) and (errors := error.errors()):
        where = ".".join(str(p) for p in errors[0]["loc"] if not str(p).startswith(
            ("tagged-union", "function-")))
        return f"{where}: {errors[0]['msg']}" if where else str(errors[0]["msg"])
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


