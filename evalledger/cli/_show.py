"""``evalledger show``: one run's summary, rebuilt from the ledger."""

from __future__ import annotations

import click

from evalledger._text import money
from evalledger.projections import unpriced_line, variant_table

from ._common import rebuild_summary, resolve_run, run_is_over
from ._main import Settings, pass_settings
from ._tables import table


@click.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="The run.json summary.")
@pass_settings
def show(settings: Settings, run: str, as_json: bool) -> None:
    """Show a run's summary, rebuilt from the ledger.

    RUN is a run id, a unique prefix of one, or `latest`.

    Example:

        evalledger show latest
    """
    with settings.open_ledger(read_only=True) as ledger:
        s = rebuild_summary(ledger, resolve_run(ledger, run))
        cut_off = s.status == "running" and run_is_over(ledger, s.run_id)
    if cut_off:  # "running" is what the ledger says; nobody is running it any more
        click.echo(f"warning: the process running {s.run_id} is gone (it crashed or was "
                   f"killed); finish it with `evalledger resume {s.run_id}`", err=True)
    if as_json:
        click.echo(s.model_dump_json(indent=2))
        return
    cost = money(s.total_cost_usd, s.cost_complete)
    ungraded = f"{s.tasks_ungraded} ungraded, " if s.tasks_ungraded else ""
    click.echo(
        f"run {s.run_id} {s.status}: {s.tasks_run}/{s.tasks_planned} run, "
        f"{s.tasks_succeeded} succeeded, {s.tasks_failed} failed, {s.tasks_error} error, "
        f"{ungraded}{s.tasks_unfinished} unfinished; pass rate {s.pass_rate:.1%}; cost {cost}"
    )
    if not s.cost_complete:
        click.echo(f"cost is a floor: {unpriced_line(s)} (see --pricing)")
    if len(s.variants) > 1 or any(len(v.pass_at_k) > 1 for v in s.variants):
        table(*variant_table(s))
    table(
        ["task", "status", "score", "duration", "tokens", "cost", "error"],
        [
            (r.task_key, r.final_status.value if r.final_status else "UNFINISHED",
             f"{r.weighted_score:.2f}" if r.weighted_score is not None else None,
             f"{r.duration_seconds:.1f}s" if r.duration_seconds is not None else None,
             r.tokens.total, money(r.cost_usd, r.cost_complete) if r.final_status else None,
             (r.error_message or "")[:80])
            for r in s.tasks
        ],
    )
