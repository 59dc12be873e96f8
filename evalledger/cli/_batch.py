"""What ``run`` and ``resume`` share: the executor options, the terminal that shows a
batch (the app's ``Callbacks``), and the outcome printed and mapped to an exit code."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, get_args

import click

from evalledger._text import money
from evalledger.app import DEFAULT_LEDGER, Callbacks, Ending, RunOutcome, Verdict
from evalledger.ledger import AnyEvent, EventRow, TaskCompleted, VerifyReport
from evalledger.options import ExecutorKind
from evalledger.projections import RunSummary, SummaryFold
from evalledger.render import isolation_line, unpriced_line
from evalledger.statuses import Category
from evalledger.suite import ResolvedTask

from ._errors import (
    EXIT_INFRA_STOPPED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TASKS_FAILED,
    EXIT_USAGE,
    UserError,
)
from ._progress import Display, quiet, say

EXIT_CODES = {
    Ending.AS_EXPECTED: EXIT_OK,
    Ending.TASKS_FAILED: EXIT_TASKS_FAILED,
    Ending.FILES_SKIPPED: EXIT_TASKS_FAILED,
    Ending.INTERRUPTED: EXIT_INTERRUPTED,
    Ending.INFRA_STOPPED: EXIT_INFRA_STOPPED,
    Ending.LEDGER_BROKEN: EXIT_USAGE,
}


def executor_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--executor`` and ``--ray-address``, shared by ``run`` and ``resume``."""
    command = click.option(
        "--ray-address", metavar="ADDR",
        help="With --executor ray: join this cluster (`auto`: the one this machine "
             "belongs to; default: start a local Ray for the run).")(command)
    return click.option(
        "--executor", type=click.Choice(get_args(ExecutorKind)),
        help="Where attempts run: here (default) or on a Ray cluster; the ledger is "
             "written here either way.")(command)


def executor_choice(
    executor: ExecutorKind | None, ray_address: str | None
) -> tuple[ExecutorKind | None, str | None]:
    """The executor the two options ask for: ``--ray-address`` alone means Ray."""
    if ray_address is not None:
        if executor == "local":
            raise UserError("--ray-address goes with --executor ray")
        executor = "ray"
    return executor, ray_address


class Terminal(Callbacks):
    """The app's callbacks, shown: notes on stderr, the run id on stdout, the batch as
    ``Display`` shows it (a progress bar in a terminal, a line per task in a pipe)."""

    def __init__(self, *, stream: bool = False) -> None:
        self.stream = stream
        self.display: Display | None = None

    def notice(self, text: str) -> None:
        click.echo(text, err=True)

    def run_named(self, run_id: str) -> None:
        say(run_id)

    def batch_started(self, run_id: str, live: SummaryFold, total: int) -> None:
        self.display = Display(live, total, terminal=sys.stdout.isatty(), stream=self.stream)
        self.display.start()

    def task_started(self, task: ResolvedTask) -> None:
        if self.display is not None:
            self.display.on_task_start(task)

    def task_output(self, event: AnyEvent) -> None:
        if self.display is not None:
            self.display.on_output(event)

    def task_completed(self, result: TaskCompleted, expect: str | None,
                       as_expected: bool) -> None:
        if self.display is not None:
            self.display.on_complete(result, note=_expectation_note(expect, as_expected))

    def event(self, event: AnyEvent | EventRow) -> None:
        if self.display is not None:
            self.display.on_event(event)

    def batch_ended(self) -> None:
        if self.display is not None:
            self.display.close()


def _expectation_note(expect: str | None, as_expected: bool) -> str:
    """What a task line adds when its task expected not to succeed."""
    if expect is None:
        return ""
    return "as expected" if as_expected else f"unexpected (expect: {expect})"


def finish(outcome: RunOutcome) -> NoReturn:
    """Print the summary line and the reports' paths (stdout), and for an interrupted
    run the command that resumes it (stderr); exit with the run's code."""
    reports = [str(outcome.reports[f]) for f in ("md", "json", "html", "junit")
               if f in outcome.reports]
    try:
        click.echo(summary_line(outcome.summary, outcome.verdict))
        click.echo(f"isolation: {isolation_line(outcome.summary)}", err=True)
        if keys := outcome.summary.signing_keys:  # keep it: a forged batch has another
            click.echo(f"signed by key {keys[-1]}", err=True)
        if outcome.ledger_check is not None and outcome.ledger_check.ok:
            click.echo(f"ledger: intact, {checked_line(outcome.ledger_check)}", err=True)
        click.echo(f"reports: {' '.join(reports)}")
    except BrokenPipeError:  # `run ... | head`: the run is recorded; the reader left
        quiet(sys.stdout)
    check = outcome.ledger_check
    if check is not None and not check.ok:
        for line in check.lines():
            click.echo(f"ledger check: {line}", err=True)
        click.echo(f"the ledger is not intact after run {outcome.run_id}: its results "
                   f"cannot be trusted; see `evalledger --ledger {outcome.ledger} verify`",
                   err=True)
    elif outcome.interrupted:
        click.echo(f"run {outcome.run_id} interrupted; resume with: "
                   f"{resume_command(outcome.ledger, outcome.run_id)}", err=True)
    elif outcome.ending is Ending.INFRA_STOPPED:
        click.echo(f"run {outcome.run_id} stopped: infrastructure failures in a row reached "
                   f"--max-infra-failures ({outcome.summary.tasks_infra} in the run); mend "
                   f"what broke, then resume with: "
                   f"{resume_command(outcome.ledger, outcome.run_id)} --retry-errors", err=True)
    sys.exit(EXIT_CODES[outcome.ending])


def resume_command(ledger: Path, run_id: str) -> str:
    """The command that resumes the run, as pasted into a shell: with ``--ledger`` when
    the ledger is not the default one (given by ``--ledger`` or $EVALLEDGER_LEDGER),
    every word quoted where the shell needs it."""
    words = ["evalledger"]
    if ledger != Path(DEFAULT_LEDGER):
        words += ["--ledger", str(ledger)]
    return shlex.join([*words, "resume", run_id])


def checked_line(report: VerifyReport) -> str:
    """What a check read: ``412 events after seq 1033 checked`` or ``46 events checked``."""
    since = f" after seq {report.since.seq}" if report.since is not None else ""
    return f"{report.events} events{since} checked through seq {report.last_seq}"


def summary_line(s: RunSummary, verdict: Verdict) -> str:
    """``run R completed: 4 of 4 tasks run, 2 succeeded, 2 failed as expected, ...``"""
    cost = money(s.total_cost_usd, s.cost_complete)
    if not s.cost_complete:
        cost += f" ({unpriced_line(s)})"

    def bucket(count: int, word: str, category: Category) -> str:
        expected, unexpected = verdict.as_expected[category], verdict.unexpected[category]
        if category in (Category.SUCCEEDED, Category.UNGRADED):
            return f"{count} {word}" + (f" ({unexpected} unexpectedly)" if unexpected else "")
        if expected and expected == count:
            return f"{count} {word} as expected"
        return f"{count} {word}" + (f" ({expected} as expected)" if expected else "")

    ungraded = (f", {bucket(s.tasks_ungraded, 'ungraded', Category.UNGRADED)}"
                if s.tasks_ungraded else "")
    skipped = f"; {len(s.broken_files)} task file(s) skipped" if s.broken_files else ""
    return (
        f"run {s.run_id} {s.status}: {s.tasks_run} of {s.tasks_planned} tasks run, "
        f"{bucket(s.tasks_succeeded, 'succeeded', Category.SUCCEEDED)}, "
        f"{bucket(s.tasks_failed, 'failed', Category.FAILED)}, "
        f"{bucket(s.tasks_error, 'error', Category.ERROR)}{ungraded}{skipped}; cost {cost}"
    )
