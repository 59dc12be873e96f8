"""Running a prepared batch for ``start_run`` and ``resume_run``: trio, signals, the live
summary, the reports, and the outcome.

Signals are the run command's, not the CLI's: a Python caller who runs a batch in a
terminal gets the same Ctrl-C. Once (SIGINT, SIGTERM or SIGHUP): stop dispatching, end
the running tasks, record the interruption; the outcome says ``interrupted`` (the run
is resumable). Twice: SIGKILL the remaining process groups at once; the ledger is still
consistent. ``RunSettings.handle_signals=False`` leaves the caller's handlers alone.

The outcome forgives what was expected: a task whose file says ``expect: failure`` (or
another way not to succeed) and ends so still counts as failed, but does not make the
outcome a failure; one that succeeds instead does (docs/cli.md, "Exit codes").
"""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import trio

from evalledger.executor import BatchConfig, BatchResult, Resume, run_batch
from evalledger.executor import Callbacks as Hooks
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    EventType,
    Ledger,
    Signer,
    TaskCompleted,
    VerifyReport,
)
from evalledger.projections import ResumePlan, RunSummary, SkippedFile, SummaryFold
from evalledger.render import render_junit
from evalledger.statuses import Category, RunStatus
from evalledger.suite import ResolvedTask, Skipped, meets

from ._callbacks import Callbacks
from ._reports import write_reports, write_text
from ._repository import snapshot_finished
from ._settings import RunSettings
from ._verified import check_after


class Ending(StrEnum):
    """How a run or resume ended, as its caller acts on it (the CLI: the exit code)."""

    AS_EXPECTED = "as_expected"
    """Every planned task ran and ended as expected (succeeded, ran ungraded, or as its
    ``expect`` says), and no task file was unusable (or that was allowed)."""
    TASKS_FAILED = "tasks_failed"
    """A task failed or errored unexpectedly, succeeded although it expected not to, or
    did not run (a budget stop)."""
    FILES_SKIPPED = "files_skipped"
    """Every task ended as expected, but a task file could not be used."""
    INTERRUPTED = "interrupted"
    """A signal ended the batch; the run is resumable."""
    INFRA_STOPPED = "infra_stopped"
    """Too many infrastructure failures in a row (``--max-infra-failures``): the batch
    stopped dispatching; resume once what broke is mended."""
    LEDGER_BROKEN = "ledger_broken"
    """The run's closing check found the ledger not intact (``RunOutcome.ledger_check``):
    its results cannot be trusted until ``evalledger verify`` says what is wrong."""


@dataclass(frozen=True)
class Verdict:
    """How a run's counted results meet what their tasks expected (``expect``)."""

    as_expected: Counter[Category] = field(default_factory=Counter)
    """Keys that did not succeed, as expected, by category."""
    unexpected: Counter[Category] = field(default_factory=Counter)
    """Keys that ended otherwise than expected, by category: a failure of a task
    expected to succeed, or a success of one expected not to."""

    @classmethod
    def of(cls, summary: RunSummary, expectations: Mapping[str, str]) -> Verdict:
        """Each counted key judged by the expectation of its key."""
        verdict = cls()
        for row in summary.tasks:
            if row.final_status is None or row.category is None:
                continue
            expect = expectations.get(row.task_key)
            if not meets(expect, row.final_status):
                verdict.unexpected[row.category] += 1
            elif expect is not None:
                verdict.as_expected[row.category] += 1
        return verdict


@dataclass(frozen=True)
class RunOutcome:
    """What ``start_run`` or ``resume_run`` did."""

    run_id: str
    summary: RunSummary
    """The run's summary as ``run.json`` holds it (the whole run, for a resume)."""
    verdict: Verdict
    """How the results met their tasks' ``expect``."""
    ending: Ending
    ledger: Path
    """The ledger the run is in (what resumes it, when it was interrupted)."""
    reports: Mapping[str, Path] = field(default_factory=dict)
    """The reports written, by format: ``md``, ``json``, ``html``, and ``junit`` when
    asked for. Empty when no batch ran (a resume with nothing left to run)."""
    ran: bool = True
    """Whether a batch ran: False for a resume that found nothing to run."""
    plan: ResumePlan | None = None
    """For a resume, its plan: what it kept, ran, added, and the drift it found."""
    ledger_check: VerifyReport | None = None
    """The closing check of the ledger (``verify`` of the rows from the last verified
    anchor, else from the run's own first row, on): None when no batch ran."""

    @property
    def interrupted(self) -> bool:
        return self.ending is Ending.INTERRUPTED

    @property
    def ok(self) -> bool:
        """Whether the run ended as expected (the CLI's exit code 0)."""
        return self.ending is Ending.AS_EXPECTED

    @property
    def skipped(self) -> list[SkippedFile]:
        """Task files the run skipped: unusable ones, and those that say ``skip: true``."""
        return self.summary.skipped_tasks


def ending(summary: RunSummary, verdict: Verdict, *, allow_skipped: bool = False,
           interrupted: bool = False) -> Ending:
    """As expected when every planned task ended as expected (succeeded or ran ungraded,
    unless its ``expect`` says otherwise) and no task file was skipped as unusable
    (unless allowed); interrupted when a signal ended the batch (docs/cli.md)."""
    if interrupted:
        return Ending.INTERRUPTED
    if summary.status == RunStatus.INFRA_STOPPED:
        return Ending.INFRA_STOPPED
    if summary.tasks_run < summary.tasks_planned or verdict.unexpected.total():
        return Ending.TASKS_FAILED
    if summary.broken_files and not allow_skipped:
        return Ending.FILES_SKIPPED
    return Ending.AS_EXPECTED


def execute(
    ledger: Ledger, tasks: list[ResolvedTask], skipped: list[Skipped], config: BatchConfig,
    settings: RunSettings, callbacks: Callbacks, *, resume: Resume | None = None,
    live: SummaryFold | None = None, announce: bool = False,
) -> RunOutcome:
    """Run the batch, write the reports from the live summary, say how it ended.

    ``live`` may arrive already holding the run's earlier events (a resume). With
    ``announce``, ``callbacks.run_named`` is called once ``run.started`` is committed:
    a run id said always names a run that is in the ledger.
    """
    live = live or SummaryFold(config.run_id)
    before = ledger.last_seq()
    total = len(set(live.planned) | {t.task_key for t in tasks})
    expected = {t.task_key: t.expect for t in tasks if t.expect is not None}
    hooks = _hooks(config.run_id, live, total, expected, callbacks, announce=announce)
    signals = settings.handle_signals and threading.current_thread() is threading.main_thread()
    signer = Signer(config.run_id)  # the batch's key: in this process's memory only
    try:
        result = trio.run(_run, ledger, tasks, skipped, config, hooks, resume, callbacks,
                          signals, signer)
    finally:
        callbacks.batch_ended()
        snapshot_finished(ledger, config.run_id, signer)
    # Nothing claims an anchor in a ledger deleted after the batch's last commit.
    ledger.check_file()
    # What this run wrote (and anything written beside it) is checked before anyone reads
    # its results: an edit behind the run's back shows now, not at the next audit.
    check = check_after(ledger, before)
    summary = live.summary().anchored(ledger.anchor(config.run_id))
    # What the ledger recorded, not what the files say now: a resume's kept keys were
    # judged by the expectation of their own attempt.
    verdict = Verdict.of(summary, recorded_expectations(ledger, config.run_id)
                         if expected or resume is not None else {})
    reports: dict[str, Path] = write_reports(ledger, summary, config.out_dir / config.run_id)
    if (junit := settings.junit_path) is not None:
        write_text(junit, render_junit(summary))
        reports["junit"] = junit
    return RunOutcome(
        run_id=config.run_id, summary=summary, verdict=verdict, ledger=ledger.path,
        ending=(ending(summary, verdict, allow_skipped=settings.allow_skipped,
                       interrupted=result is None) if check.ok else Ending.LEDGER_BROKEN),
        reports=reports, ledger_check=check,
    )


def unread_hint(task_key: str, unread: str) -> str:
    """One line for a task whose agent's lines its ``stream_format`` does not read."""
    return (f"hint: {task_key} printed {unread} JSON lines that stream_format native does "
            f"not read: its cost is unknown; set `stream_format: {unread}` (or `auto`)")


def _hooks(run_id: str, live: SummaryFold, total: int, expected: Mapping[str, str],
           callbacks: Callbacks, *, announce: bool) -> Hooks:
    """The executor's hooks: the live fold fed first, then the caller told."""

    def batch_started(_: int) -> None:
        if announce:
            callbacks.run_named(run_id)
        callbacks.batch_started(run_id, live, total)

    hinted: set[str] = set()

    def task_completed(result: TaskCompleted) -> None:
        expect = expected.get(result.task_key)
        callbacks.task_completed(result, expect, meets(expect, result.final_status))
        unread = result.environment_info.get("unread_format")
        if isinstance(unread, str) and unread not in hinted:
            hinted.add(unread)
            callbacks.notice(unread_hint(result.task_key, unread))

    def event(event: AnyEvent | EventRow) -> None:
        live.apply(event)
        callbacks.event(event)

    return Hooks(
        on_batch_start=batch_started,
        on_task_complete=task_completed,
        on_output=callbacks.task_output if callbacks.stream else None,
        on_task_start=callbacks.task_started if callbacks.stream else None,
        on_event=event,
    )


async def _run(
    ledger: Ledger, tasks: list[ResolvedTask], skipped: list[Skipped], config: BatchConfig,
    hooks: Hooks, resume: Resume | None, callbacks: Callbacks, signals: bool, signer: Signer,
) -> BatchResult | None:
    """Run the batch; return None when a signal interrupted it."""
    if not signals:
        return await run_batch(ledger, tasks, config, hooks, skipped=skipped, resume=resume,
                               signer=signer)
    kill_now = trio.Event()
    result: BatchResult | None = None
    # SIGHUP too: a closed terminal must not leave agents running and a run unended.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as received:
        async with trio.open_nursery() as nursery:
            batch = trio.CancelScope()

            async def watch() -> None:
                count = 0
                async for _ in received:
                    count += 1
                    if count == 1:
                        callbacks.notice(
                            "interrupted: stopping tasks (Ctrl-C again to kill them now)")
                        batch.cancel()
                    else:
                        kill_now.set()

            nursery.start_soon(watch)
            with batch:
                result = await run_batch(ledger, tasks, config, hooks, skipped=skipped,
                                         resume=resume, kill_now=kill_now, signer=signer)
            nursery.cancel_scope.cancel()
    return result


def recorded_expectations(ledger: Ledger, run_id: str) -> dict[str, str]:
    """Per task key, the ``expect`` its latest attempt recorded in ``task.started``
    (keys whose latest attempt has none are left out)."""
    latest: dict[str, tuple[int, str | None]] = {}
    # Of a signed run, only what its own processes sealed: a forged later attempt must
    # not change which expectation judges a key.
    ignored = ledger.seal_report(run_id, until_seq=ledger.last_seq()).ignored
    for row in ledger.rows(run_id, types=[EventType.TASK_STARTED]):
        if row.seq in ignored:
            continue
        key = row.task_key or ""
        # Canonical JSON: a definition with an expectation holds this text; a payload
        # without it is parsed only when it may clear an earlier attempt's.
        if '"expect":"' not in row.payload and key not in latest:
            continue
        payload = json.loads(row.payload)
        attempt = payload.get("attempt", 1)
        if attempt >= latest.get(key, (0, None))[0]:
            expect = (payload.get("definition") or {}).get("expect")
            latest[key] = (attempt, expect if isinstance(expect, str) else None)
    return {key: expect for key, (_, expect) in latest.items() if expect is not None}
