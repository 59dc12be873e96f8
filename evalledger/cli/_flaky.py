"""``evalledger flaky``: tasks whose verdict flips across runs while their definition
and model stay the same (``projections.flaky_history``)."""

from __future__ import annotations

import json

import click

from evalledger._text import visible

from ._common import resolve_run
from ._main import Settings, pass_settings
from ._tables import table


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--last", type=click.IntRange(min=2), default=20, show_default=True,
              help="Without RUNS: the newest this many runs.")
@click.option("--experiment", metavar="ID", help="Only the runs of this experiment id.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per flaky task.")
@pass_settings
def flaky(settings: Settings, runs: tuple[str, ...], last: int, experiment: str | None,
          as_json: bool) -> None:
    """List flaky tasks: a task whose verdict flips across runs (or replicates) while
    its definition and model stay the same. Their flips in a diff are noise.

    RUNS are run ids (or unique prefixes); without them, the newest --last runs.

    Example:

        evalledger flaky --experiment nightly --last 30
    """
    from evalledger.app import flaky_tasks, recent_runs

    with settings.open_ledger(read_only=True) as ledger:
        if runs:
            run_ids = [resolve_run(ledger, r) for r in runs]
        else:
            run_ids = recent_runs(ledger, last, experiment)
        found = flaky_tasks(ledger, run_ids)
    if as_json:
        for task in found:
            click.echo(json.dumps(task.model_dump(mode="json"), sort_keys=True))
        return
    table(["variant", "task", "passed", "failed", "model", "definition"],
          [(t.variant_id, t.task_id, _runs(t.passed), _runs(t.failed), t.model,
            t.definition_hash[:12]) for t in found])
    click.echo(f"{len(found)} flaky task(s) over {len(run_ids)} run(s)", err=True)


def _runs(counts: dict[str, int]) -> str:
    """``r1, r2 (x2)``: the runs, with their replicates where more than one."""
    return visible(", ".join(run + (f" (x{n})" if n > 1 else "") for run, n in counts.items()))
