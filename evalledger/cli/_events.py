"""``evalledger events``: a run's events as NDJSON, optionally followed live."""

from __future__ import annotations

import click

from evalledger.ledger import ndjson

from ._common import resolve_run
from ._main import Settings, pass_settings


@click.command()
@click.argument("run")
@click.option("--task", "task_key", help="Only this task key's events.")
@click.option("--type", "types", multiple=True, help="Only events of these types.")
@click.option("--follow", is_flag=True,
              help="Keep printing new events until the run records run.finished.")
@click.option("--interval", type=click.FloatRange(min=0.01, max=60), default=0.2,
              show_default=True, hidden=True)
@pass_settings
def events(settings: Settings, run: str, task_key: str | None, types: tuple[str, ...],
           follow: bool, interval: float) -> None:
    """Print a run's events as NDJSON, in ledger order.

    Example:

        evalledger events latest --type task.completed
    """
    from evalledger.app import run_events

    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
        for row in run_events(ledger, run_id, task_key=task_key, types=types, follow=follow,
                              interval=interval):
            click.echo(ndjson(row))
