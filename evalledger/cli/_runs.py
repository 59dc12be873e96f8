"""``evalledger runs``: the runs in the ledger, newest first."""

from __future__ import annotations

import json
from typing import Any

import click

from evalledger._text import money
from evalledger.ledger import EventType

from ._common import run_is_over
from ._main import Settings, pass_settings
from ._tables import table

# The columns of the `runs` SQL view, in its order; the CLI adds cut_off.
COLUMNS = ("run_id", "experiment_id", "started_at", "finished_at", "status", "tasks_planned",
           "tasks_succeeded", "tasks_failed", "tasks_error", "cost_usd", "tasks_ungraded",
           "cost_complete")


@click.command()
@click.option("--limit", type=click.IntRange(min=1, max=2**63 - 1), default=20,
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, newest first.")
@pass_settings
def runs(settings: Settings, limit: int, as_json: bool) -> None:
    """List runs, newest first: the columns of the `runs` SQL view.

    A finished run's line is read from its snapshot, so the listing takes as long
    for a ledger of a thousand runs as for one of ten.

    Example:

        evalledger runs --limit 5
    """
    from evalledger.projections import load_headline

    with settings.open_ledger(read_only=True) as ledger:
        # One line per run: a run merged from shards has a run.started per shard.
        _, newest = ledger.query(
            "SELECT run_id FROM events WHERE type = ? AND task_key IS NULL "
            "GROUP BY run_id ORDER BY min(ts) DESC, min(seq) DESC LIMIT ?",
            [EventType.RUN_STARTED, limit])
        listed = []
        for (run_id,) in newest:
            head = load_headline(ledger, run_id)
            run: dict[str, Any] = {c: head.get(c) for c in COLUMNS}
            run["cost_usd"] = head["total_cost_usd"]
            # The ledger says "running"; a run whose process is gone without recording
            # run.finished was cut off (resume finishes it).
            run["cut_off"] = run["status"] == "running" and run_is_over(ledger, run_id)
            listed.append(run)
    if as_json:  # exact numbers, for programs
        for run in listed:
            click.echo(json.dumps(run))
        return
    shown = [c for c in COLUMNS if c != "cost_complete"]
    for run in listed:
        run["status"] = "cut off" if run["cut_off"] else run["status"]
        run["cost_usd"] = money(run["cost_usd"], run["cost_complete"])
    table(shown, [tuple(run[c] for c in shown) for run in listed])
