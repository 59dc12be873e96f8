"""``evalledger resume``: parse the options, resume the run
(``evalledger.app.resume_run``), print how it ended and exit with its code.

The rules live in ``projections.plan_resume``; the app reads the ledger and the task
files for it, says the drift (printed here on stderr) and runs the plan.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalledger.app import ResumeRequest, RunSettings, resume_run
from evalledger.options import ExecutorKind, RunOptions

from ._batch import EXIT_CODES, Terminal, executor_choice, executor_options, finish
from ._common import PositiveNumber
from ._errors import UserError
from ._main import Settings, pass_settings


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
    executor, ray_address = executor_choice(executor, ray_address)
    request = ResumeRequest(
        strict=strict, retry_errors=retry_errors, rerun_failed=rerun_failed, rerun=rerun,
        model=model, max_parallel=max_parallel, max_cost_usd=max_cost, kill_grace=kill_grace,
        relocate=moved, executor=executor, ray_address=ray_address,
    )
    outcome = resume_run(
        run, request,
        RunSettings(ledger=settings.ledger_path, durable=durable, allow_skipped=allow_skipped),
        callbacks=Terminal(stream=stream),
    )
    if not outcome.ran:
        kept = len(outcome.plan.partition.kept) if outcome.plan is not None else 0
        click.echo(f"run {outcome.run_id}: nothing to resume ({kept} tasks kept)")
        sys.exit(EXIT_CODES[outcome.ending])
    finish(outcome)


def _relocation(spec: str | None) -> tuple[str, str] | None:
    if spec is None:
        return None
    old, sep, new = spec.partition("=")
    if not sep or not old or not new:
        raise UserError(f"--relocate {spec!r}: give OLD=NEW, two folders")
    return str(Path(old).expanduser().absolute()), str(Path(new).expanduser().resolve())
