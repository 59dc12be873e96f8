"""``evalledger runs``: the runs in the ledger, newest first."""

from __future__ import annotations

import json

import click

from evalledger._text import money
from evalledger.ledger import EventType, Ledger

from ._common import run_is_over
from ._main import Settings, pass_settings
from ._tables import table


@click.command()
@click.option("--limit", type=click.IntRange(min=1, max=2**63 - 1), default=20,
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, newest first.")
@pass_settings
def runs(settings: Settings, limit: int, as_json: bool) -> None:
    """List runs, newest first, from the `runs` SQL view.

    Example:

        evalledger runs --limit 5
    """
    with settings.open_ledger(read_only=True) as ledger:
        columns, rows = ledger.query(
            "SELECT * FROM runs ORDER BY started_at DESC LIMIT ?", [limit]
        )
        listed = [dict(zip(columns, row, strict=True)) for row in rows]
        if "cost_complete" not in columns:  # a ledger from before the view said so
            floors = _cost_floors(ledger, [r["run_id"] for r in listed])
            for run in listed:
                run["cost_complete"] = run["run_id"] not in floors
        for run in listed:
            run["cost_complete"] = bool(run["cost_complete"])
            # The view says what the ledger holds; a run whose process is gone without
            # recording run.finished was cut off (resume finishes it).
            run["cut_off"] = run["status"] == "running" and run_is_over(ledger, run["run_id"])
    if as_json:  # exact numbers, for programs
        for run in listed:
            click.echo(json.dumps(run))
        return
    shown = [c for c in columns if c != "cost_complete"]
    for run in listed:
        run["status"] = "cut off" if run["cut_off"] else run["status"]
        run["cost_usd"] = money(run["cost_usd"], run["cost_complete"])
    table(shown, [tuple(run[c] for c in shown) for run in listed])


def _cost_floors(ledger: Ledger, run_ids: list[str]) -> set[str]:
    """The runs among ``run_ids`` some of whose usage had no price (their cost is a floor)."""
    if not run_ids:
        return set()
    marks = ",".join("?" * len(run_ids))
    _, rows = ledger.query(
        f"SELECT DISTINCT run_id FROM events WHERE run_id IN ({marks}) AND type = ? "
        "AND json_extract(payload, '$.cost_usd') IS NULL", [*run_ids, EventType.TASK_USAGE])
    return {r[0] for r in rows}
