"""``evalledger resume``: run what a run left unfinished, after checking for drift.

The tasks are resolved again from the configuration recorded in ``run.started``
(absolute paths, so it works from any folder). What changed since the run's
fingerprint was stored is printed as drift; ``--strict`` refuses to go on.
"""

from __future__ import annotations

from pathlib import Path

import click

from evalledger.executor import BatchConfig, Resume, fingerprint
from evalledger.projections import SummaryFold, compute_drift, fold
from evalledger.tasks import Overrides

from ._common import PositiveNumber, rebuild_resume, resolve_run
from ._errors import UserError
from ._main import Settings, cli, pass_settings
from ._run import execute, exit_code, load_pricing, load_task_set, warn_unpriced


@cli.command()
@click.argument("run")
@click.option("--strict", is_flag=True, help="Refuse to resume when the configuration drifted.")
@click.option("--retry-errors", is_flag=True,
              help="Also re-run tasks that ended in the error category (ERROR, BUILD_FAILED).")
@click.option("-j", "--max-parallel", type=click.IntRange(min=1),
              help="Tasks at once (default: as the run had it).")
@click.option("--max-cost", type=PositiveNumber(),
              help="A new run-level budget in USD (what the run already spent counts).")
@click.option("--stream", is_flag=True, help="Print task output as it arrives.")
@click.option("--durable", is_flag=True, help="synchronous=FULL for this resume's commits.")
@pass_settings
def resume(
    settings: Settings, run: str, strict: bool, retry_errors: bool, max_parallel: int | None,
    max_cost: float | None, stream: bool, durable: bool,
) -> None:
    """Resume a run: run its unfinished tasks (and, on request, its errors) again.

    RUN is a run id, a unique prefix, or `latest`. Tasks with a final status are
    kept; interrupted and never-started ones run, as a new attempt. Drift since
    the run began (an edited task, a changed option) is printed and, with
    --strict, refused.

    Example:

        evalledger resume latest --retry-errors
    """
    # Named first through a read-only handle: resuming a run that is not there
    # must not create a ledger file on the way.
    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
    with settings.open_ledger(durable=durable) as ledger:
        state = rebuild_resume(ledger, run_id)
        if not state.found:
            raise UserError(f"run {run_id} has no run.started event; it cannot be resumed")
        if (pid := state.live_pid()) is not None:
            raise UserError(
                f"run {run_id} is still running (pid {pid} on this host); wait for it, or "
                "stop it first"
            )
        options = dict(state.config)
        load_pricing(options.get("pricing"))
        task_set = load_task_set(
            tuple(options.get("paths") or ()), options.get("experiment"),
            tuple(options.get("tags") or ()), tuple(options.get("exclude_tags") or ()),
            Overrides(timeout=options.get("timeout"), repeats=options.get("repeats")),
            missing_ok=True,  # a deleted file's tasks are drift ("no longer defined")
        )
        parallel = max_parallel or int(options.get("max_parallel") or 1)
        options["max_parallel"] = parallel
        # The latest budget: one raised by an earlier `resume --max-cost` holds.
        options["max_cost_usd"] = state.fingerprint.options.get(
            "max_cost_usd", options.get("max_cost_usd")
        )
        if max_cost is not None:
            options["max_cost_usd"] = max_cost
        drift = compute_drift(state.fingerprint, fingerprint(options, task_set.tasks))
        for line in drift.lines():
            click.echo(f"drift: {line}", err=True)
        if drift.any and strict:
            raise UserError(
                f"run {run_id} drifted since it started ({len(drift.lines())} difference(s)); "
                "resume without --strict to go on anyway"
            )
        partition = state.partition(retry_errors=retry_errors)
        defined = {t.task_key for t in task_set.tasks}
        for key in partition.to_run:
            if key not in defined:
                click.echo(f"warning: {key} is no longer defined; it cannot run", err=True)
        wanted = set(partition.to_run)
        skip = frozenset(defined - wanted)
        live = fold(SummaryFold(run_id), ledger.events(run_id, types=SummaryFold.TYPES))
        spent = live.spend.cost
        budget = options.get("max_cost_usd")
        if defined & wanted and budget is not None and spent > budget:
            raise UserError(
                f"run {run_id} already spent ${spent:.4f} of its ${budget:.4f} budget; "
                "resume with a higher --max-cost"
            )
        click.echo(run_id)
        if not defined & wanted:
            summary = live.summary()
            click.echo(f"run {run_id}: nothing to resume ({len(partition.kept)} tasks kept)")
            raise SystemExit(exit_code(summary))
        click.echo(f"resuming {len(defined & wanted)} task(s), keeping {len(partition.kept)}",
                   err=True)
        config = BatchConfig(
            run_id=run_id, max_parallel=parallel, out_dir=Path(options.get("out") or "runs"),
            max_cost_usd=options.get("max_cost_usd"),
            preservation_mode=options.get("preservation_mode") or "move-on-write",
            experiment_id=task_set.experiment_id, options=options,
            unpriced_models=warn_unpriced(task_set.tasks),
        )
        # All tasks go in, so run.resumed fingerprints the whole run; skip filters.
        execute(
            ledger, task_set.tasks, [], config, stream=stream, live=live,
            resume=Resume(
                skip=skip,
                attempts=partition.attempts,
                drift={"lines": drift.lines()} if drift.any else {},
                spent_usd=spent,
                boundary_seq=state.boundary_seq,
            ),
        )
