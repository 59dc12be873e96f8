"""``evalledger show``: one run's summary, rebuilt from the ledger."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

import click

from evalledger._text import money, visible
from evalledger.projections import RunSummary, TaskRow, error_digest
from evalledger.render import (
    calls_line,
    cost_line,
    infra_note,
    interval_kind,
    isolation_line,
    model_table,
    rate_cell,
    status_text,
    status_word,
    success_cost_line,
    unpriced_line,
    variant_table,
)

from ._common import (
    count_infra_option,
    grades_option,
    is_cut_off,
    rebuild_summary,
    resolve_run,
)
from ._main import Settings, pass_settings
from ._tables import table

# Task rows `show` prints by default: every row of a run people read in a terminal, a
# page of one of 100,000 tasks (whose other rows are then not even decoded).
ROWS = 1000


@click.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="The run.json summary.")
@click.option("--full-errors", is_flag=True,
              help="Also print every error message whole, line breaks kept, below the table "
                   "(a terminal's table shows each error's first and last line; a pipe gets "
                   "them whole).")
@click.option("--limit", type=click.IntRange(min=0), default=ROWS, show_default=True,
              help="Print at most this many task rows, in task order (0: every row). A "
                   "larger run's other rows are not even read: `--limit 0` or `report "
                   "--format json` has them all.")
@grades_option
@count_infra_option
@pass_settings
def show(settings: Settings, run: str, as_json: bool, full_errors: bool, limit: int,
         grades: str | None, count_infra: bool) -> None:
    """Show a run's summary, rebuilt from the ledger.

    RUN is a run id, a unique prefix of one, or `latest` (the newest by start time).

    Example:

        evalledger show latest
    """
    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
        rows: int | None = None
        confined: dict[str, int] | None = None
        if as_json or limit == 0:
            s = rebuild_summary(ledger, run_id, grades, count_infra)
        else:
            from evalledger.app import load_summary_page

            page = load_summary_page(ledger, run_id, limit, grades=grades,
                                     count_infra=count_infra)
            s, rows, confined = page.summary.anchored(ledger.anchor(run_id)), page.rows, \
                page.isolation
        gone = is_cut_off(ledger, s.run_id, s.status)
    if gone:
        click.echo(f"warning: the process running {s.run_id} is gone (it crashed or was "
                   f"killed); finish it with `evalledger resume {s.run_id}`", err=True)
    if as_json:
        click.echo(s.model_dump_json(indent=2))
        return
    click.echo(_headline(s, gone))
    _notes(s, confined)
    _variants(s)
    if len(s.usage_by_model) > 1:
        table(*model_table(s), stacked_when_narrow=True)
    # A terminal gets each error's digest (the line that says what went wrong); a pipe,
    # where nothing is cut, the whole message.
    shorten = error_digest if sys.stdout.isatty() else str
    table(["task", "status", "score", "duration", "tokens", "cost", "error"],
          [_task_cells(r, shorten) for r in s.tasks])
    if rows is not None and rows > len(s.tasks):
        click.echo(f"{len(s.tasks):,} of {rows:,} task rows shown (--limit 0: all of them)",
                   err=True)
    for r in s.tasks:  # findings, not verdicts: beside the table, on stderr
        if r.flags:
            click.echo(f"flagged {visible(r.task_key)}: {visible(', '.join(r.flags))} "
                       "(evalledger sql \"SELECT * FROM task_flags\")", err=True)
    if full_errors:
        _echo_full_errors(s.tasks)


def _notes(s: RunSummary, confined: dict[str, int] | None) -> None:
    """What the headline leaves to lines of their own: isolation, skipped files, why
    the cost is a floor, cost per success, the gateway's calls."""
    # On stderr with the other notes: a pipe's stdout stays the counts and the table.
    click.echo(f"isolation: {isolation_line(s, confined)}", err=True)
    # As `run` says them: on stderr, so a pipe's stdout stays the counts and the table.
    for k in s.skipped_tasks:
        click.echo(f"skipped {visible(k.path)}: {visible(k.reason)}", err=True)
    if not s.cost_complete:
        click.echo(f"cost is a floor: {unpriced_line(s)}"
                   f"{' (see --pricing)' if s.unpriced else ''}")
    if per_success := success_cost_line(s):
        click.echo(f"per success: {per_success}")
    if calls := calls_line(s):
        click.echo(calls)


def _variants(s: RunSummary) -> None:
    """The variants' table, where there is more than one variant or pass@k, and what
    each leaves out."""
    if not (len(s.variants) > 1 or any(len(v.pass_at_k) > 1 for v in s.variants)):
        return
    table(*variant_table(s), stacked_when_narrow=True)
    for v in s.variants:
        if v.flaky_tasks:
            click.echo(f"flaky in {visible(v.variant_id)} (replicates disagree): "
                       f"{visible(', '.join(v.flaky_tasks))}")
        for at, left in v.pass_at_k_left_out.items():
            click.echo(f"pass@{at} of {visible(v.variant_id)} leaves out {len(left)} "
                       f"task(s) with fewer than {at} graded replicates: "
                       f"{visible(', '.join(left))}")


def _headline(s: RunSummary, gone: bool) -> str:
    """The run's status and counts on one line, then its cost."""
    cost = cost_line(s.total_cost_usd, s.cost_complete, s.usage_by_role)
    ungraded = f"{s.tasks_ungraded} ungraded, " if s.tasks_ungraded else ""
    skipped = f"; {len(s.broken_files)} task file(s) skipped" if s.broken_files else ""
    # Which verdicts these are, once there is more than the run's own.
    graded = f" (grades: {visible(s.grades)})" if len(s.grade_sets) > 1 else ""
    return (
        f"run {s.run_id} {status_word(s.status, gone)}{graded}: "
        f"{s.tasks_run}/{s.tasks_planned} run, "
        f"{s.tasks_succeeded} succeeded, {s.tasks_failed} failed, {s.tasks_error} error, "
        f"{ungraded}{s.tasks_unfinished} unfinished{skipped}; "
        f"pass rate {rate_cell(s.pass_rate, s.pass_rate_interval, s.graded)}"
        f"{f' (95% {interval_kind(s.pass_rate_stderr)})' if s.graded else ''}"
        f"{infra_note(s)}; cost {cost}"
    )


def _task_cells(r: TaskRow, shorten: Callable[[str], str]) -> tuple[object, ...]:
    """One row of the task table; None where there is nothing to say (the table's dash)."""
    return (
        r.task_key, status_text(r),
        f"{r.weighted_score:.2f}" if r.weighted_score is not None else None,
        f"{r.duration_seconds:.1f}s" if r.duration_seconds is not None else None,
        r.tokens.total, money(r.cost_usd, r.cost_complete) if r.final_status else None,
        shorten(r.error_message) if r.error_message else None,
    )




def _echo_full_errors(rows: Iterable[TaskRow]) -> None:
    for r in rows:
        if r.error_message:
            click.echo(f"\n{visible(r.task_key)}:\n"
                       + visible(r.error_message.replace("\r\n", "\n"), newlines=True))
