"""``evalledger run``: parse the options, start the run (``evalledger.app.start_run``),
print how it ended and exit with its code.

Ctrl-C once: the run stops its tasks and records the interruption; exit 130 after
printing the command that resumes it. Ctrl-C again: the remaining process groups are
killed at once (the app's run command handles the signals, docs/cli.md).

The exit code forgives what was expected: a task whose file says ``expect: failure``
(or another way not to succeed) and ends so still counts as failed, but does not
make the exit code 1; one that succeeds instead does (docs/cli.md, "Exit codes").
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import click

from evalledger.app import RunSettings, shard_spec, start_run
from evalledger.options import (
    MAX_REPEATS,
    MAX_RETRIES,
    ExecutorKind,
    Isolation,
    PreservationMode,
    RunOptions,
)

from ._batch import Terminal, executor_choice, executor_options, finish
from ._common import PositiveNumber
from ._main import Settings, pass_settings


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("-e", "--experiment", type=click.Path(), help="An experiment file.")
@click.option("--tag", "tags", multiple=True, help="Keep tasks with ANY of these tags.")
@click.option("--exclude-tag", "exclude_tags", multiple=True,
              help="Drop tasks with ANY of these tags.")
@click.option("-j", "--max-parallel", type=click.IntRange(min=1),
              help="Tasks at once (default: the experiment's, else "
                   f"{RunOptions.default('max_parallel')}).")
@click.option("--repeats", type=click.IntRange(min=1, max=MAX_REPEATS),
              help="Replicates per task.")
@click.option("--run-id", help="Name the run (default: a timestamp).")
@click.option("--out", type=click.Path(path_type=Path), default=RunOptions.default("out"),
              show_default=True, help="Reports and artifacts go to OUT/RUN_ID/.")
@click.option("--timeout", type=PositiveNumber(),
              help="Seconds per task, overriding task files.")
@click.option("--stall-timeout", type=PositiveNumber(),
              help="Seconds without any output after which an attempt is stalled "
                   "(task.stalled; ended as STALLED unless its stall_action is warn), "
                   "overriding task files.")
@click.option("--retries", type=click.IntRange(0, MAX_RETRIES),
              help="Try an attempt again this many times after an infrastructure failure "
                   "(a stall, a sandbox, a process that could not start, a judge's API, a "
                   "lost Ray node), overriding task files.")
@click.option("--retry-backoff", type=click.FloatRange(min=0),
              help="Seconds before a task's first retry; each next waits twice as long "
                   f"(default {RunOptions.default('retry_backoff')}).")
@click.option("--max-infra-failures", type=click.IntRange(min=1),
              help="Stop dispatching after this many infrastructure failures in a row "
                   "(exit code 3; resume once mended).")
@click.option("--model", help="The model every task uses, overriding task files and variants.")
@click.option("--sample", type=click.IntRange(min=1),
              help="Run only N of the tasks found (every variant and replicate of each).")
@click.option("--seed", type=int,
              help="What chooses the --sample (default: a random seed, recorded and printed).")
@click.option("--shard", metavar="K/N",
              help="Run only the K-th of N disjoint shares of the tasks (by task key, the "
                   "same on every machine); give every shard the same --run-id, then merge "
                   "their ledgers.")
@click.option("--max-cost", type=PositiveNumber(),
              help="Stop dispatching once the run has spent this many USD.")
@click.option("--preservation-mode", type=click.Choice(get_args(PreservationMode)),
              default=RunOptions.default("preservation_mode"), show_default=True,
              help="What happens to each task's sandbox.")
@click.option("--pricing", type=click.Path(exists=True, dir_okay=False),
              help="A YAML rate card adding model prices (USD per million tokens).")
@click.option("--kill-grace", type=PositiveNumber(),
              help="Seconds between SIGTERM and SIGKILL when a task is ended (default: "
                   f"{RunOptions.default('kill_grace')}, or as the run had it).")
@click.option("--isolation", type=click.Choice(get_args(Isolation)),
              help="What every task's command can see, overriding task files: auto (the "
                   "strongest that runs here: bwrap), none (the whole machine: no "
                   "boundary), bwrap (its workspace, the system read-only) or docker (its "
                   "workspace, in its image); docs/isolation.md.")
@click.option("--allow-unconfined", is_flag=True,
              help="Run a task whose isolation cannot run here with none (no boundary), "
                   "saying so, instead of refusing to start.")
@click.option("--require-isolation", is_flag=True, hidden=True,
              help="Refuse to start when a task's isolation cannot run here (the default).")
@click.option("--no-grade", is_flag=True,
              help="Run the commands only: check no criterion, keep each workspace; every "
                   "attempt ends NOT_GRADED until `evalledger regrade` grades it.")
@executor_options
@click.option("--stream", is_flag=True, help="Print task output as it arrives.")
@click.option("--durable", is_flag=True,
              help="synchronous=FULL: every commit survives power loss, not just a crash.")
@click.option("--junit-xml", "junit_xml", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the results as JUnit XML to this file (for CI).")
@click.option("--allow-skipped", is_flag=True,
              help="Task files that cannot be used (recorded as skipped) do not make the exit "
                   "code 1.")
@pass_settings
def run(
    settings: Settings, paths: tuple[str, ...], experiment: str | None, tags: tuple[str, ...],
    exclude_tags: tuple[str, ...], max_parallel: int | None, repeats: int | None,
    run_id: str | None, out: Path, timeout: float | None, stall_timeout: float | None,
    retries: int | None, retry_backoff: float | None, max_infra_failures: int | None,
    model: str | None,
    sample: int | None, seed: int | None, shard: str | None, max_cost: float | None,
    preservation_mode: PreservationMode, pricing: str | None, kill_grace: float | None,
    isolation: str | None, allow_unconfined: bool, require_isolation: bool, no_grade: bool,
    executor: ExecutorKind | None,
    ray_address: str | None, stream: bool, durable: bool,
    junit_xml: Path | None, allow_skipped: bool,
) -> None:
    """Run a batch of tasks and record every event in the ledger.

    PATHS are task files or folders of them. Prints the run id first, a line per
    finished task, and a summary last. Exit code: 0 all succeeded, 1 some task
    failed or errored or a task file could not be used, 2 usage/config/ledger
    error, 3 stopped by --max-infra-failures, 130 interrupted.

    Example:

        evalledger run examples/smoke/tasks -j 4 --tag smoke
    """
    if shard is not None:
        shard = shard_spec(shard)
    executor, ray_address = executor_choice(executor, ray_address)
    given = {
        "paths": list(paths), "experiment": experiment, "tags": list(tags),
        "exclude_tags": list(exclude_tags), "max_parallel": max_parallel, "repeats": repeats,
        "timeout": timeout, "max_cost_usd": max_cost, "preservation_mode": preservation_mode,
        "out": str(out), "pricing": pricing, "kill_grace": kill_grace, "model": model,
        "sample": sample, "seed": seed, "shard": shard, "executor": executor,
        "ray_address": ray_address, "isolation": isolation,
        "require_isolation": require_isolation or None, "no_grade": no_grade or None,
        "allow_unconfined": allow_unconfined or None,
        "stall_timeout": stall_timeout, "retries": retries, "retry_backoff": retry_backoff,
        "max_infra_failures": max_infra_failures,
    }
    # Only what was given: what was not is the model's default (or the experiment's).
    options = RunOptions.model_validate({k: v for k, v in given.items() if v is not None})
    outcome = start_run(
        options,
        RunSettings(ledger=settings.ledger_path, durable=durable, junit_xml=junit_xml,
                    allow_skipped=allow_skipped),
        run_id=run_id, callbacks=Terminal(stream=stream),
    )
    finish(outcome)
