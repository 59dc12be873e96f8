"""``evalledger compare``: B against A, paired by task, with the statistics that say
whether a difference is more than noise (``projections.compare_runs``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal

import click

from evalledger._text import visible

from ._common import count_infra_option, grades_option, rebuild_summary, resolve_run
from ._errors import EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.projections import Comparison

Gate = Literal["significant-regression", "regression", "never"]


@click.command()
@click.argument("run_a")
@click.argument("run_b", required=False)
@click.option("--variants", nargs=2, metavar="X Y",
              help="Compare variant Y against variant X (of RUN_A, or X of RUN_A and Y of "
                   "RUN_B).")
@click.option("--baseline", metavar="X",
              help="Compare every other variant (of RUN_B, else RUN_A) against variant X "
                   "of RUN_A, the p-values adjusted together (Holm).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95,
              show_default=True, help="The intervals' confidence; 1 - it is the test's level.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The paired bootstrap's seed (recorded in --json).")
@click.option("--fail-on", type=click.Choice(["significant-regression", "regression", "never"]),
              default="significant-regression", show_default=True,
              help="Exit 1 on a regression the paired test finds significant, on any task "
                   "whose pass rate is lower in B, or never; nothing to compare (a side that "
                   "graded no task) fails every gate but never.")
@click.option("--format", "output", type=click.Choice(["text", "json", "markdown", "junit"]),
              default="text", show_default=True,
              help="markdown: a table for a pull request; junit: JUnit XML, a failed test "
                   "case per significant regression. Each names the test and its p-value.")
@click.option("--json", "as_json", is_flag=True,
              help="The comparison as one JSON object (a list with --baseline).")
@grades_option
@click.option("--grades-b", metavar="NAME",
              help="RUN_B's grade set, when not --grades' (`compare R R --grades original "
                   "--grades-b strict`: two gradings of one run).")
@count_infra_option
@pass_settings
def compare(settings: Settings, run_a: str, run_b: str | None, variants: tuple[str, str] | None,
            baseline: str | None, confidence: float, seed: int, fail_on: Gate, output: str,
            as_json: bool, grades: str | None, grades_b: str | None,
            count_infra: bool) -> None:
    """Compare two runs (or two variants) task by task, and say whether B differs from A
    by more than noise.

    Tasks are paired by task id, replicates together; each side's pass rate is the mean
    of its tasks' pass rates, with an interval clustered by task; the tasks' rate
    differences are tested with a paired sign-flip permutation test, and a paired
    bootstrap gives the interval of the difference in pass rate and in mean score. With
    --baseline, several variants are tested at once and their p-values adjusted by
    Holm's method.

    Example:

        evalledger compare 20261101-0930 latest --fail-on significant-regression
    """
    if run_b is None and not (variants or baseline or grades_b):
        raise UserError("give RUN_B, --variants X Y, --baseline X or --grades-b NAME")
    if variants and baseline:
        raise UserError("give --variants X Y or --baseline X, not both")
    with settings.open_ledger(read_only=True) as ledger:
        a = rebuild_summary(ledger, resolve_run(ledger, run_a), grades, count_infra)
        b = a if run_b is None and grades_b is None else rebuild_summary(
            ledger, resolve_run(ledger, run_b or run_a), grades_b or grades, count_infra)
    from evalledger.app import compared

    found = compared(a, b, variants, baseline, confidence, seed)
    _print(found, "json" if as_json else output, listed=bool(baseline))
    for c in found:
        if c.nothing_because and fail_on != "never":
            click.echo(f"--fail-on {fail_on}: nothing to compare ({visible(c.nothing_because)})",
                       err=True)
    if any(c.fails(fail_on) for c in found):
        sys.exit(EXIT_TASKS_FAILED)


def _print(found: list[Comparison], output: str, *, listed: bool) -> None:
    """The comparisons as ``output`` says: json (a list of them when ``listed``),
    markdown, junit, or text for people."""
    from evalledger.render import comparison_junit, comparison_markdown, comparison_text

    if output == "json":
        click.echo(found[0].model_dump_json(indent=2) if not listed else
                   "[" + ",\n".join(c.model_dump_json(indent=2) for c in found) + "]")
    elif output == "markdown":
        click.echo(comparison_markdown(found), nl=False)
    elif output == "junit":
        click.echo(comparison_junit(found), nl=False)
    else:
        for c in found:
            click.echo("\n".join(comparison_text(c)))
