"""``evalledger events``: a run's events as NDJSON, optionally followed live."""

from __future__ import annotations

import time

import click

from evalledger.ledger import EVENT_TYPES, has_task, has_type, ndjson

from ._common import resolve_run, run_is_over
from ._errors import UserError
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
    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
        if unknown := [t for t in types
                       if t not in EVENT_TYPES and not has_type(ledger, run_id, t)]:
            # Types a newer evalledger wrote are printed like any other; a typo is
            # not an empty answer.
            raise UserError(f"no events of type {', '.join(map(repr, unknown))} in run "
                            f"{run_id}; known types: {', '.join(sorted(EVENT_TYPES))}")
        if task_key is not None and not has_task(ledger, run_id, task_key):
            raise UserError(f"run {run_id} has no task {task_key!r} (see `evalledger show "
                            f"{run_id}`)")
        after = 0
        while True:
            # Decided before reading: every event up to run.finished is then printed.
            done = not follow or run_is_over(ledger, run_id)
            for row in ledger.rows(run_id, task_key=task_key, types=types or None,
                                   after_seq=after):
                click.echo(ndjson(row))
                after = row.seq or after
            if done:
                return
            time.sleep(interval)

