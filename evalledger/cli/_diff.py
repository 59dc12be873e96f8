"""``evalledger diff``: two runs compared task by task."""

from __future__ import annotations

import sys
from collections import Counter
from typing import get_args

import click

from evalledger._text import visible
from evalledger.projections import Change, FailOn, diff_runs

from ._common import grades_option, rebuild_summary, resolve_run
from ._errors import EXIT_TASKS_FAILED
from ._main import Settings, pass_settings
from ._tables import table


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True)
@click.option("--fail-on", type=click.Choice(get_args(FailOn)), default="regression",
              show_default=True,
              help="Exit 1 when the diff has a regression, a regression the paired test finds "
                   "significant (by task), any change at all, a task of RUN_B a scan "
                   "flagged, or never.")
@grades_option
@click.option("--grades-b", metavar="NAME",
              help="RUN_B's grade set, when not --grades': two gradings of one run compared "
                   "(`diff R R --grades original --grades-b strict`).")
@click.option("--variants", "pairs", multiple=True, metavar="A=B",
              help="Pair RUN_A's variant A with RUN_B's variant B (their tasks compared "
                   "as one); repeatable. Default: where each run has one variant, those "
                   "two, whatever their names.")
@pass_settings
def diff(settings: Settings, run_a: str, run_b: str, as_json: bool, fail_on: FailOn,
         grades: str | None, grades_b: str | None, pairs: tuple[str, ...]) -> None:
    """Compare two runs task by task: regressions, fixes, score/duration/cost deltas.

    Regressions first, then fixes, changes, keys not run on one side (never started
    or interrupted: neither a fix nor a regression), added, removed, unchanged. Exits
    1 when there is a regression (see --fail-on), so it can gate CI.

    Example:

        evalledger diff 20261101-0930 latest --fail-on regression
    """
    with settings.open_ledger(read_only=True) as ledger:
        a = rebuild_summary(ledger, resolve_run(ledger, run_a), grades)
        b = rebuild_summary(ledger, resolve_run(ledger, run_b), grades_b or grades)
    result = diff_runs(a, b, _pairs(pairs) if pairs else None)
    for x, y in result.variants.items():
        click.echo(f"variant {visible(x)} of {result.run_a} paired with {visible(y)} of "
                   f"{result.run_b}", err=True)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        order = {change: i for i, change in enumerate(get_args(Change))}
        tasks = sorted(result.tasks, key=lambda t: (order[t.change], t.task_key))

        def fmt(value: float | None, spec: str) -> str | None:
            return None if value is None else format(value, spec)

        table(
            ["task", "change", "before", "after", "score Δ", "duration Δ", "cost Δ"],
            [(t.task_key, t.change, t.before, t.after, fmt(t.score_delta, "+.2f"),
              fmt(t.duration_delta, "+.1f"), fmt(t.cost_delta, "+.4f")) for t in tasks],
        )
        click.echo(", ".join(f"{n} {c.replace('_', ' ')}" for c, n in result.counts.items()))
        moved = Counter(t.isolation for t in result.tasks if t.isolation)
        for change, n in sorted(moved.items()):
            click.echo(f"warning: isolation differs for {n} task(s): {change} (a different "
                       "measurement, see docs/isolation.md)", err=True)
        for t in tasks:
            if t.flags:
                click.echo(f"flagged in {result.run_b}: {visible(t.task_key)}: "
                           f"{visible(', '.join(t.flags))}", err=True)
        if not result.tasks:
            click.echo("neither run has any task", err=True)
    if fail_on == "significant-regression":
        from evalledger.projections import compare_runs
        from evalledger.render import p_value_line

        paired = compare_runs(a, b)
        said = (f"nothing to compare ({visible(paired.nothing_because)})"
                if paired.nothing_because else f"{paired.verdict} at 95%")
        click.echo(f"paired by task: {p_value_line(paired)}: {said} (evalledger compare "
                   "says more)", err=True)
        if paired.fails("significant-regression"):
            sys.exit(EXIT_TASKS_FAILED)
    elif result.fails(fail_on):
        sys.exit(EXIT_TASKS_FAILED)


def _pairs(given: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for pair in given:
        x, eq, y = pair.partition("=")
        if not eq or not x or not y:
            raise click.BadParameter(f"{pair!r} is not A=B (a variant of RUN_A, one of "
                                     "RUN_B)", param_hint="--variants")
        found[x] = y
    return found
