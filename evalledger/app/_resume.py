"""``resume_run`` (``evalledger.resume``): run what a run left unfinished, after checking
for drift.

The rules live in ``projections.plan_resume``; this command reads the ledger, hands the
plan what it needs from the outside world (the task files, whether the run's process
still lives, the definitions recorded), says what the plan says and runs it: the
executor takes the plan itself.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from evalledger.executor import BatchConfig, owed
from evalledger.hosts import run_ended, running_pid
from evalledger.ledger import (
    EventType,
    Ledger,
    TaskEmitted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
    utc_now,
)
from evalledger.options import RunOptions
from evalledger.pricing import DEFAULT_RATES, PricingError
from evalledger.projections import (
    Drift,
    ResumeFold,
    ResumePlan,
    ResumeRefused,
    ResumeRequest,
    SummaryFold,
    plan_resume,
)
from evalledger.suite import TaskSet

from ._batch import RunOutcome, Verdict, ending, execute, recorded_expectations
from ._callbacks import Callbacks
from ._prepare import check_executor, load_task_set, rate_card, unpriced
from ._repository import load_folds
from ._settings import RunSettings, open_ledger


def resume_run(run: str, request: ResumeRequest | None = None,
               settings: RunSettings | None = None, *,
               callbacks: Callbacks | None = None) -> RunOutcome:
    """Resume a run: run its unfinished tasks (and what ``request`` adds) again.

    Tasks with a final status are kept; interrupted and never-started ones run, as a
    new attempt. Tasks defined since the run began join it. Drift since the run last
    started or resumed is said (``callbacks.notice``) and, with ``request.strict``,
    refused. ``settings.junit_xml`` is written as for a run.

    Args:
        run: a run id, a unique prefix of one, or ``latest``.
        request: what to run again and what changes (default: the unfinished keys,
            as the run had everything).
        settings: the ledger, durability, signals.
        callbacks: told what happens as it goes.

    Returns:
        The outcome, for the whole run; ``ran`` is False when nothing was left to run
        (then no report is written).

    Raises:
        EvalledgerError: no such run, the resume is refused (``ResumeRefused``: an
            imported run, still running, drift under ``strict``, a spent budget...),
            Ray not installed, or the ledger fails.
    """
    request = request or ResumeRequest()
    settings = settings or RunSettings()
    callbacks = callbacks or Callbacks()
    check_executor(request.executor)
    # Named first through a read-only handle: resuming a run that is not there must not
    # create a ledger file on the way.
    with open_ledger(settings.ledger, read_only=True) as ledger:
        run_id = ledger.resolve_run(run)
    with open_ledger(settings.ledger, durable=settings.durable) as ledger:
        # Both folds from one pass over the run (through its snapshot).
        (state, live), _ = load_folds(ledger, run_id, ResumeFold, SummaryFold)
        assert isinstance(state, ResumeFold) and isinstance(live, SummaryFold)
        # First, so the plan (its budget) counts what the lost attempts spent.
        if _close_lost_attempts(ledger, state, live, callbacks):
            (state, live), _ = load_folds(ledger, run_id, ResumeFold, SummaryFold)
            assert isinstance(state, ResumeFold) and isinstance(live, SummaryFold)
        plan = _plan(ledger, state, live, request, callbacks)
        callbacks.run_named(run_id)
        if not plan.has_work:
            summary = live.summary()
            verdict = Verdict.of(summary, recorded_expectations(ledger, run_id))
            return RunOutcome(
                run_id=run_id, summary=summary, verdict=verdict, ledger=ledger.path,
                ending=ending(summary, verdict, allow_skipped=settings.allow_skipped),
                ran=False, plan=plan)
        callbacks.notice(f"resuming {len(plan.to_run)} task(s), keeping "
                         f"{len(plan.partition.kept)}")
        rates = rate_card(plan.options.pricing)
        config = BatchConfig(
            run_id=run_id, options=plan.options, experiment_id=plan.tasks.experiment_id,
            rates=rates, unpriced_models=unpriced(plan.tasks.tasks, rates, callbacks),
        )
        # All tasks go in, so run.resumed fingerprints the whole run; the plan skips.
        outcome = execute(ledger, plan.tasks.tasks, [], config, settings, callbacks,
                          resume=plan, live=live)
    return replace(outcome, plan=plan)


def _close_lost_attempts(ledger: Ledger, state: ResumeFold, live: SummaryFold,
                         callbacks: Callbacks) -> bool:
    """Close the attempts the run's dead process left started without an end: each gets
    what its recorded lines show it spent beyond what was booked (its agent's running
    estimate, a floor: docs/tasks.md, "Usage and cost"), unless the runner booked it
    before it died, and a ``task.interrupted``, as if it had been interrupted.

    Only once no process can add to the run: a run whose process lives (here) is refused
    by the plan; one recorded on another host cannot be checked from here, and is left
    as it is. The events' ids are the attempt's (its ``task.started``'s, suffixed): two
    resumes racing append them once. True when something was appended."""
    if not live.running:
        return False
    if not run_ended(state.host, state.finished):
        if running_pid(state.host, state.finished) is None:  # another host's
            callbacks.notice(f"{len(live.running)} attempt(s) left started by host "
                             f"{state.host.get('hostname')!r} are not closed: whether its "
                             "process still runs cannot be told from here")
        return False
    try:
        rates = rate_card(state.config.pricing)
    except PricingError:  # the file is gone: the built-in card prices what it can
        rates = DEFAULT_RATES
    closing: list[TaskUsage | TaskInterrupted] = []
    for task_key in sorted(live.running):
        started: TaskStarted | None = None
        lines: list[dict[str, Any]] = []
        booked = False  # the runner booked its estimate before it died (while grading)
        for event in ledger.events(state.run_id, task_key=task_key, types={
                EventType.TASK_STARTED, EventType.TASK_EVENT, EventType.TASK_USAGE}):
            if isinstance(event, TaskStarted):
                started, lines, booked = event, [], False
            elif isinstance(event, TaskEmitted) and isinstance(event.data, dict):
                lines.append(event.data)
            elif isinstance(event, TaskUsage) and event.estimate:
                booked = True
        if started is None:
            continue
        owing = () if booked else owed(started.definition, lines, rates)
        ts = utc_now()
        closing += [usage.event(state.run_id, task_key, ts,
                                event_id=f"{started.event_id}-lost-{n}")
                    for n, usage in enumerate(owing)]
        closing.append(TaskInterrupted(
            event_id=f"{started.event_id}-lost", run_id=state.run_id, task_key=task_key,
            ts=ts, reason="runner lost: the process that ran it ended without recording "
                          "its end"))
        callbacks.notice(f"{task_key}: attempt {started.attempt} was lost with the run's "
                         "process; what its lines show it spent is booked as an estimate")
    if closing:
        ledger.append(closing, if_run_at=(state.run_id, state.boundary_seq))
    return bool(closing)


def _plan(ledger: Ledger, state: ResumeFold, live: SummaryFold, request: ResumeRequest,
          callbacks: Callbacks) -> ResumePlan:
    """The plan, with what it found said: drift (before a refusal too), keys that can
    no longer run, keys that join the run."""

    def load(options: RunOptions) -> TaskSet:
        # A deleted file's tasks are drift ("no longer defined"), not an error.
        return load_task_set(options, callbacks, missing_ok=True)

    try:
        plan = plan_resume(
            state, request, load=load, spent_usd=live.spend.cost,
            running_pid=running_pid(state.host, state.finished),
            recorded=lambda hashes: recorded_definitions(ledger, state.run_id, hashes),
        )
    except ResumeRefused as e:
        _say_drift(e.drift, callbacks)
        raise
    _say_drift(plan.drift, callbacks)
    for key in plan.undefined:
        callbacks.notice(f"warning: {key} is no longer defined; it cannot run")
    if plan.added:
        callbacks.notice(f"adding {len(plan.added)} new task(s) to the run: "
                         + ", ".join(plan.added[:10])
                         + (" ..." if len(plan.added) > 10 else ""))
    return plan


def _say_drift(drift: Drift, callbacks: Callbacks) -> None:
    for line in drift.lines():
        callbacks.notice(f"drift: {line}")


def recorded_definitions(ledger: Ledger, run_id: str,
                         hashes: Collection[str]) -> dict[str, dict[str, Any]]:
    """The definitions the run's ``task.started`` events recorded with these hashes (the
    first found of each): what drift compares today's definitions with, field by field."""
    wanted, found = set(hashes), {}
    # Of a signed run, only what its own processes sealed (as every read of it).
    ignored = ledger.seal_report(run_id, until_seq=ledger.last_seq()).ignored
    for row in ledger.rows(run_id, types=[EventType.TASK_STARTED]):
        if row.seq in ignored:
            continue
        payload = json.loads(row.payload)
        digest = payload.get("definition_hash")
        if digest in wanted and digest not in found and isinstance(
                payload.get("definition"), dict):
            found[digest] = payload["definition"]
            if len(found) == len(wanted):
                break
    return found
