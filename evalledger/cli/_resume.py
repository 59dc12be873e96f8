"""``evalledger resume``: run what a run left unfinished, after checking for drift.

The rules live in ``projections.plan_resume``; this command reads the ledger,
hands the plan what it needs from the outside world (the task files, whether the
run's process still lives), prints what the plan says and runs it.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import click

from evalledger.executor import BatchConfig, Resume
from evalledger.hosts import running_pid
from evalledger.ledger import EventType, Ledger
from evalledger.options import ExecutorKind, RunOptions
from evalledger.projections import (
    ResumeFold,
    ResumeRefused,
    SummaryFold,
    load_folds,
    plan_resume,
)
from evalledger.suite import TaskSet

from ._common import PositiveNumber, resolve_run
from ._errors import UserError
from ._main import Settings, pass_settings
from ._run import (
    Verdict,
    check_executor,
    execute,
    executor_options,
    exit_code,
    load_rates,
    load_task_set,
    recorded_expectations,
    warn_unpriced,
)


@click.command()
@click.argument("run")
@click.option("--strict", is_flag=True,
              help="Refuse to resume when anything drifted since the run last started or "
                   "resumed.")
@click.option("--retry-errors", is_flag=True,
              help="Also re-run tasks that ended in the error category (ERROR, BUILD_FAILED).")
@click.option("--rerun-failed", is_flag=True,
              help="Also re-run tasks that ended in the failed category (FAILURE, TIMEOUT, "
                   "budgets).")
@click.option("--rerun", "rerun", multiple=True, metavar="KEY_OR_GLOB",
              help="Also re-run these task keys (globs such as 'baseline/*' too), however "
                   "they ended. Repeatable.")
@click.option("--model", help="The model every task uses from now on (drift: the "
                              "definitions change).")
@click.option("-j", "--max-parallel", type=click.IntRange(min=1),
              help="Tasks at once (default: as the run had it).")
@click.option("--max-cost", type=PositiveNumber(),
              help="A new run-level budget in USD (what the run already spent counts).")
@click.option("--relocate", metavar="OLD=NEW",
              help="The suite moved: read the recorded paths under folder OLD from NEW "
                   "instead (not drift; later resumes keep NEW).")
@click.option("--kill-grace", type=PositiveNumber(),
              help="Seconds between SIGTERM and SIGKILL when a task is ended (default: "
                   f"{RunOptions.default('kill_grace')}, or as the run had it).")
@click.option("--allow-skipped", is_flag=True,
              help="Task files the run could not use do not make the exit code 1.")
@executor_options
@click.option("--stream", is_flag=True, help="Print task output as it arrives.")
@click.option("--durable", is_flag=True, help="synchronous=FULL for this resume's commits.")
@pass_settings
def resume(
    settings: Settings, run: str, strict: bool, retry_errors: bool, rerun_failed: bool,
    rerun: tuple[str, ...], model: str | None, max_parallel: int | None,
    max_cost: float | None, relocate: str | None, kill_grace: float | None,
    allow_skipped: bool, executor: ExecutorKind | None, ray_address: str | None, stream: bool,
    durable: bool,
) -> None:
    """Resume a run: run its unfinished tasks (and, on request, its errors) again.

    RUN is a run id, a unique prefix, or `latest`. Tasks with a final status are
    kept; interrupted and never-started ones run, as a new attempt, and so do
    those --retry-errors, --rerun-failed and --rerun name. Tasks defined since the
    run began join it. Drift since the run last started or resumed (an edited task
    field, before → after; a changed option; a new task) is printed and, with
    --strict, refused. An imported run cannot be resumed.

    Example:

        evalledger resume latest --rerun-failed --rerun 'candidate/*'
    """
    moved = _relocation(relocate)
    executor, ray_address = check_executor(executor, ray_address)
    # Named first through a read-only handle: resuming a run that is not there
    # must not create a ledger file on the way.
    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
    with settings.open_ledger(durable=durable) as ledger:
        # Both folds from one pass over the run (through its snapshot).
        (state, live), _ = load_folds(ledger, run_id, ResumeFold, SummaryFold)
        assert isinstance(state, ResumeFold) and isinstance(live, SummaryFold)

        def load(options: RunOptions) -> TaskSet:
            # A deleted file's tasks are drift ("no longer defined"), not an error.
            return load_task_set(options, missing_ok=True)

        try:
            plan = plan_resume(
                state, load=load, spent_usd=live.spend.cost,
                running_pid=running_pid(state.host, state.finished),
                retry_errors=retry_errors, strict=strict, max_parallel=max_parallel,
                max_cost_usd=max_cost, relocate=moved, kill_grace=kill_grace,
                rerun_failed=rerun_failed, rerun=rerun, model=model,
                recorded=lambda hashes: recorded_definitions(ledger, run_id, hashes),
            )
        except ResumeRefused as e:
            for line in e.drift.lines():
                click.echo(f"drift: {line}", err=True)
            raise UserError(str(e)) from e
        for line in plan.drift.lines():
            click.echo(f"drift: {line}", err=True)
        for key in plan.undefined:
            click.echo(f"warning: {key} is no longer defined; it cannot run", err=True)
        if plan.added:
            click.echo(f"adding {len(plan.added)} new task(s) to the run: "
                       + ", ".join(plan.added[:10]) + (" ..." if len(plan.added) > 10 else ""),
                       err=True)
        click.echo(run_id)
        if not plan.has_work:
            click.echo(f"run {run_id}: nothing to resume ({len(plan.partition.kept)} tasks kept)")
            summary = live.summary()
            verdict = Verdict.of(summary, recorded_expectations(ledger, run_id))
            raise SystemExit(exit_code(summary, verdict, allow_skipped=allow_skipped))
        click.echo(f"resuming {len(plan.to_run)} task(s), keeping {len(plan.partition.kept)}",
                   err=True)
        options = plan.options
        if executor is not None:  # else as the run had it
            options = options.model_copy(update={"executor": executor,
                                                 "ray_address": ray_address})
        rates = load_rates(options.pricing)
        config = BatchConfig(
            run_id=run_id, options=options, experiment_id=plan.tasks.experiment_id,
            rates=rates, unpriced_models=warn_unpriced(plan.tasks.tasks, rates),
        )
        # All tasks go in, so run.resumed fingerprints the whole run; skip filters.
        execute(
            ledger, plan.tasks.tasks, [], config, stream=stream, live=live,
            allow_skipped=allow_skipped,
            resume=Resume(
                skip=plan.skip,
                attempts=plan.partition.attempts,
                drift={"lines": plan.drift.lines()} if plan.drift.any else {},
                spent_usd=plan.spent_usd,
                boundary_seq=plan.boundary_seq,
                added=tuple(plan.added),
                rerun=tuple(rerun),
                rerun_failed=rerun_failed,
                retry_errors=retry_errors,
            ),
        )


def recorded_definitions(ledger: Ledger, run_id: str,
                         hashes: Collection[str]) -> dict[str, dict[str, Any]]:
    """The definitions the run's ``task.started`` events recorded with these hashes (the
    first found of each): what drift compares today's definitions with, field by field."""
    wanted, found = set(hashes), {}
    for row in ledger.rows(run_id, types=[EventType.TASK_STARTED]):
        payload = json.loads(row.payload)
        digest = payload.get("definition_hash")
        if digest in wanted and digest not in found and isinstance(
                payload.get("definition"), dict):
            found[digest] = payload["definition"]
            if len(found) == len(wanted):
                break
    return found


def _relocation(spec: str | None) -> tuple[str, str] | None:
    if spec is None:
        return None
    old, sep, new = spec.partition("=")
    if not sep or not old or not new:
        raise UserError(f"--relocate {spec!r}: give OLD=NEW, two folders")
    return str(Path(old).expanduser().absolute()), str(Path(new).expanduser().resolve())
