"""``evalledger compare``: B against A, paired by task, with the statistics that say
whether a difference is more than noise (``projections.compare_runs``)."""

from __future__ import annotations

import sys
from typing import Literal

import click

from evalledger._text import visible

from ._common import grades_option, rebuild_summary, resolve_run
from ._errors import EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings

Gate = Literal["significant-regression", "regression", "never"]


@click.command()
@click.argument("run_a")
@click.argument("run_b", required=False)
@click.option("--variants", nargs=2, metavar="X Y",
              help="Compare variant Y against variant X (of RUN_A, or X of RUN_A and Y of "
                   "RUN_B).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95,
              show_default=True, help="The intervals' confidence; 1 - it is the test's level.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The paired bootstrap's seed (recorded in --json).")
@click.option("--fail-on", type=click.Choice(["significant-regression", "regression", "never"]),
              default="significant-regression", show_default=True,
              help="Exit 1 on a regression McNemar's test finds significant, on any task "
                   "that passed in A and not in B, or never.")
@click.option("--json", "as_json", is_flag=True, help="The comparison as one JSON object.")
@grades_option
@pass_settings
def compare(settings: Settings, run_a: str, run_b: str | None, variants: tuple[str, str] | None,
            confidence: float, seed: int, fail_on: Gate, as_json: bool,
            grades: str | None) -> None:
    """Compare two runs (or two variants) task by task, and say whether B differs from A
    by more than noise.

    Tasks are paired by task id, replicates together; each side's pass rate has a
    Wilson interval, the tasks that passed on one side only are tested with McNemar's
    exact test, and a paired bootstrap gives the interval of the difference in pass
    rate and in mean score.

    Example:

        evalledger compare 20261101-0930 latest --fail-on significant-regression
    """
    from evalledger.projections import compare_runs

    if run_b is None and not variants:
        raise UserError("give RUN_B, or --variants X Y to compare two variants of RUN_A")
    with settings.open_ledger(read_only=True) as ledger:
        a = rebuild_summary(ledger, resolve_run(ledger, run_a), grades)
        b = a if run_b is None else rebuild_summary(ledger, resolve_run(ledger, run_b), grades)
    c = compare_runs(a, b, confidence=confidence, seed=seed,
                     variants=tuple(variants) if variants else None)  # type: ignore[arg-type]
    if as_json:
        click.echo(c.model_dump_json(indent=2))
    else:
        pct = f"{confidence:.0%}"
        click.echo(f"compare {visible(c.a.name)} -> {visible(c.b.name)}: {c.pairs} task(s) "
                   f"both graded ({len(c.only_a)} only in A, {len(c.only_b)} only in B)")
        for side in (c.a, c.b):
            i = side.pass_rate_interval
            click.echo(f"  {visible(side.name)}: {side.tasks_passed}/{c.pairs} passed, "
                       f"{side.pass_rate:.1%} [{i.low:.1%}, {i.high:.1%}] ({pct} Wilson)")
        diff = c.pass_rate_difference_interval
        click.echo(f"  pass rate B - A: {c.pass_rate_difference * 100:+.1f} points"
                   + (f" [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}] ({pct} paired "
                      f"bootstrap, seed {c.seed})" if diff else ""))
        if c.score_difference is not None:
            s = c.score_difference_interval
            click.echo(f"  mean score B - A: {c.score_difference:+.3f}"
                       + (f" [{s.low:+.3f}, {s.high:+.3f}]" if s else ""))
        click.echo(f"  passed in A only: {c.passed_only_a}, in B only: {c.passed_only_b}; "
                   f"McNemar exact p = {c.mcnemar_p:.4g}")
        click.echo(f"verdict: {c.verdict} at {pct}")
    failed = (c.significant_regression() if fail_on == "significant-regression"
              else fail_on == "regression" and c.passed_only_a > 0)
    if failed:
        sys.exit(EXIT_TASKS_FAILED)
