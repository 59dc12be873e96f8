"""``evalledger run``: load tasks, run the batch, record everything, report.

Ctrl-C once: stop dispatching, end the running tasks, record the interruption,
exit 130 (the run is resumable) after printing the command that resumes it. Ctrl-C
again: SIGKILL the remaining process groups at once; the ledger is still consistent.

The exit code forgives what was expected: a task whose file says ``expect: failure``
(or another way not to succeed) and ends so still counts as failed, but does not
make the exit code 1; one that succeeds instead does (docs/cli.md, "Exit codes").
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn, get_args

import click
import trio

from evalledger._files import same_file
from evalledger._text import money, visible
from evalledger.executor import BatchConfig, BatchResult, Callbacks, Resume, run_batch
from evalledger.ledger import EventType, Ledger, RunConflict, TaskCompleted
from evalledger.options import ExecutorKind, PreservationMode, RunOptions
from evalledger.pricing import DEFAULT_RATES, RateCard
from evalledger.projections import RunSummary, SummaryFold, render_junit, unpriced_line
from evalledger.statuses import Category, FinalStatus
from evalledger.suite import (
    MAX_REPEATS,
    Overrides,
    ResolvedTask,
    Skipped,
    TaskLoadError,
    TaskSet,
    load_tasks,
    meets,
)

from ._common import PositiveNumber
from ._errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import DEFAULT_LEDGER, Settings, pass_settings
from ._progress import Display, quiet
from ._report import write_reports, write_text

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_run_id() -> str:
    """Sortable by start time, unique enough for one ledger: ``20261129-213512-3f9a``."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def load_task_set(options: RunOptions, *, missing_ok: bool = False) -> TaskSet:
    """The tasks ``options`` name, resolved now; what was skipped or is missing is said."""
    if not options.paths and options.experiment is None:
        raise UserError("nothing to run: give task files or folders, or -e EXPERIMENT")
    try:
        task_set = load_tasks(
            options.paths, experiment=options.experiment, include_tags=options.tags,
            exclude_tags=options.exclude_tags,
            overrides=Overrides(timeout=options.timeout, repeats=options.repeats,
                                model=options.model),
            missing_ok=missing_ok,
            sample=None if options.sample is None else (options.sample, options.seed or 0),
            shard=_shard(options.shard),
        )
    except TaskLoadError as e:
        raise UserError(str(e)) from e
    for path in task_set.missing:
        click.echo(f"warning: {path} no longer exists; its tasks cannot run (if the suite "
                   "moved: resume --relocate OLD=NEW)", err=True)
    for skip in task_set.skipped:
        click.echo(f"skipped {visible(skip.path)}: {visible(skip.reason)}", err=True)
    if not task_set.tasks:
        raise UserError(_nothing_to_run(options, task_set))
    return task_set


def _nothing_to_run(options: RunOptions, task_set: TaskSet) -> str:
    """Why there is nothing to run, naming the real cause."""
    skipped = len(task_set.skipped)
    also = f"; {skipped} task file(s) were skipped too (see above)" if skipped else ""
    if task_set.filtered_out:
        filters = " ".join([*(f"--tag {t}" for t in options.tags),
                            *(f"--exclude-tag {t}" for t in options.exclude_tags)])
        return (f"no tasks to run: the tag filters ({filters}) left none of the "
                f"{task_set.filtered_out} task(s) found{also}")
    if skipped:
        return f"no tasks to run: all {skipped} task file(s) were skipped (see above)"
    return "no tasks to run: no task files were found in the paths given"


async def _run_with_signals(
    ledger: Ledger, tasks: list[ResolvedTask], skipped: list[Skipped], config: BatchConfig,
    callbacks: Callbacks, resume: Resume | None,
) -> BatchResult | None:
    """Run the batch; return None when it was interrupted by a signal."""
    hurry = trio.Event()
    result: BatchResult | None = None
    # SIGHUP too: a closed terminal must not leave agents running and a run unended.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            batch = trio.CancelScope()

            async def watch() -> None:
                count = 0
                async for _ in signals:
                    count += 1
                    if count == 1:
                        click.echo(
                            "interrupted: stopping tasks (Ctrl-C again to kill them now)",
                            err=True,
                        )
                        batch.cancel()
                    else:
                        hurry.set()

            nursery.start_soon(watch)
            with batch:
                result = await run_batch(
                    ledger, tasks, config, callbacks, skipped=skipped, resume=resume,
                    kill_now=hurry,
                )
            nursery.cancel_scope.cancel()
    return result


def executor_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--executor`` and ``--ray-address``, shared by ``run`` and ``resume``."""
    command = click.option(
        "--ray-address", metavar="ADDR",
        help="With --executor ray: join this cluster (`auto`: the one this machine "
             "belongs to; default: start a local Ray for the run).")(command)
    return click.option(
        "--executor", type=click.Choice(get_args(ExecutorKind)),
        help="Where attempts run: here (default) or on a Ray cluster; the ledger is "
             "written here either way.")(command)


def check_executor(
    executor: ExecutorKind | None, ray_address: str | None
) -> tuple[ExecutorKind | None, str | None]:
    """Refuse, before anything runs, an executor that cannot be had here."""
    if ray_address is not None:
        if executor == "local":
            raise UserError("--ray-address goes with --executor ray")
        executor = "ray"
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        from evalledger.executor._ray import INSTALL_HINT

        raise UserError(INSTALL_HINT)
    return executor, ray_address


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
    run_id: str | None, out: Path, timeout: float | None, model: str | None,
    sample: int | None, seed: int | None, shard: str | None, max_cost: float | None,
    preservation_mode: PreservationMode, pricing: str | None, kill_grace: float | None,
    executor: ExecutorKind | None, ray_address: str | None, stream: bool, durable: bool,
    junit_xml: Path | None, allow_skipped: bool,
) -> None:
    """Run a batch of tasks and record every event in the ledger.

    PATHS are task files or folders of them. Prints the run id first, a line per
    finished task, and a summary last. Exit code: 0 all succeeded, 1 some task
    failed or errored or a task file could not be used, 2 usage/config/ledger
    error, 130 interrupted.

    Example:

        evalledger run examples/smoke/tasks -j 4 --tag smoke
    """
    if run_id is not None and not RUN_ID_PATTERN.match(run_id):
        raise UserError(f"invalid --run-id {run_id!r}: use letters, digits, '.', '_' or '-'")
    if run_id == "latest":
        raise UserError("--run-id latest is reserved: `latest` names the newest run")
    if shard is not None:
        k, _, n = shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            raise UserError(f"--shard {shard!r}: K/N with 1 <= K <= N, such as 1/2")
        if run_id is None:
            raise UserError("--shard needs --run-id: the shards of a run share its id")
        shard = f"{int(k)}/{int(n)}"
    if junit_xml is not None and not junit_xml.resolve().parent.is_dir():
        raise UserError(f"--junit-xml {junit_xml}: no folder {junit_xml.resolve().parent}")
    if junit_xml is not None and same_file(junit_xml, settings.ledger_path):
        raise UserError(f"--junit-xml {junit_xml} is the ledger itself; choose another file")
    executor, ray_address = check_executor(executor, ray_address)
    rates = load_rates(pricing)
    # Paths are recorded absolute: a resume works from any folder.
    options = RunOptions(
        paths=[str(Path(p).resolve()) for p in paths],
        experiment=str(Path(experiment).resolve()) if experiment else None,
        tags=list(tags), exclude_tags=list(exclude_tags), repeats=repeats, timeout=timeout,
        max_cost_usd=max_cost, preservation_mode=preservation_mode, out=str(out.resolve()),
        cwd=os.getcwd(), pricing=str(Path(pricing).resolve()) if pricing else None,
        kill_grace=kill_grace or RunOptions.default("kill_grace"), model=model,
        sample=sample, seed=_seed(seed) if sample is not None else seed, shard=shard,
        executor=executor or RunOptions.default("executor"), ray_address=ray_address,
    )
    task_set = load_task_set(options)
    if parallel := max_parallel or task_set.max_parallel:
        options = options.model_copy(update={"max_parallel": parallel})
    run_id = run_id or new_run_id()
    config = BatchConfig(
        run_id=run_id, options=options, experiment_id=task_set.experiment_id, rates=rates,
        unpriced_models=warn_unpriced(task_set.tasks, rates),
    )
    with settings.open_ledger(durable=durable) as ledger:
        # Made now, not after every task ran: the reports and artifacts need a home.
        run_dir = config.out_dir / run_id
        made = make_folders(run_dir)
        try:
            # A run id already taken (now, or by a process racing this one) is refused
            # when run.started is appended: RunConflict, under the write lock.
            execute(ledger, task_set.tasks, task_set.skipped, config, stream=stream,
                    announce=True, junit=junit_xml, allow_skipped=allow_skipped)
        except RunConflict:
            raise  # the folder is the existing run's
        except Exception:
            # Failed before anything ran: leave no empty folder behind for a run that
            # does not exist.
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise


def make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``; return the folders it made, deepest first (to undo it).

    Raises:
        OSError: with the folder named (a full disk, a read-only place).
    """
    missing = [f for f in (folder, *folder.parents) if not f.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(e.filename or folder)) from e
    return missing


def _shard(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    k, _, n = spec.partition("/")
    return int(k), int(n)


def _seed(seed: int | None) -> int:
    """The sample's seed: the one given, or a new one, said so it can be given again."""
    if seed is None:
        seed = secrets.randbelow(2**32)
        click.echo(f"sampling with --seed {seed}", err=True)
    return seed


def warn_unpriced(tasks: list[ResolvedTask], rates: RateCard) -> list[str]:
    unpriced = rates.unpriced(t.model for t in tasks)
    for model in unpriced:
        click.echo(f"warning: no price for model {model!r}: its cost will be unknown", err=True)
    return unpriced


def load_rates(path: str | None) -> RateCard:
    """The built-in rate card, plus the rates of a ``--pricing`` file."""
    if path is None:
        return DEFAULT_RATES
    try:
        return DEFAULT_RATES.with_file(path)
    except ValueError as e:  # PricingConflict included
        raise UserError(str(e)) from e


def execute(
    ledger: Ledger, tasks: list[ResolvedTask], skipped: list[Skipped], config: BatchConfig,
    *, stream: bool, resume: Resume | None = None, live: SummaryFold | None = None,
    announce: bool = False, junit: Path | None = None, allow_skipped: bool = False,
) -> NoReturn:
    """Run the batch, write the reports from the live summary, exit with the run's code.

    ``live`` may arrive already holding the run's earlier events (a resume). With
    ``announce``, the run id is printed first, once ``run.started`` is committed:
    a run id on stdout always names a run that is in the ledger. ``junit``: also
    write the summary there as JUnit XML. ``allow_skipped``: task files that could
    not be used do not make the exit code 1.
    """
    live = live or SummaryFold(config.run_id)
    total = len(set(live.planned) | {t.task_key for t in tasks})
    expected = {t.task_key: t.expect for t in tasks if t.expect is not None}
    with Display(live, total, terminal=sys.stdout.isatty(), stream=stream) as display:

        def batch_started(_: int) -> None:
            if announce:
                display.echo(config.run_id)
            display.start()

        def task_completed(result: TaskCompleted) -> None:
            display.on_complete(result, note=_expectation_note(
                expected.get(result.task_key), result.final_status))

        callbacks = Callbacks(
            on_batch_start=batch_started,
            on_task_complete=task_completed,
            on_output=display.on_output if stream else None,
            on_task_start=display.on_task_start if stream else None,
            on_event=display.on_event,
        )
        result = trio.run(_run_with_signals, ledger, tasks, skipped, config, callbacks, resume)
    # Nothing claims an anchor in a ledger deleted after the batch's last commit.
    ledger.check_file()
    summary = live.summary().anchored(ledger.anchor(config.run_id))
    # What the ledger recorded, not what the files say now: a resume's kept keys were
    # judged by the expectation of their own attempt.
    verdict = Verdict.of(summary, recorded_expectations(ledger, config.run_id)
                         if expected or resume is not None else {})
    paths = write_reports(ledger, summary, config.out_dir / config.run_id)
    if junit is not None:
        write_text(junit, render_junit(summary))
    try:
        click.echo(_summary_line(summary, verdict))
        click.echo(f"reports: {paths['md']} {paths['json']} {paths['html']}"
                   + (f" {junit}" if junit is not None else ""))
    except BrokenPipeError:  # `run ... | head`: the run is recorded; the reader left
        quiet(sys.stdout)
    if result is None:
        click.echo(f"run {config.run_id} interrupted; resume with: "
                   f"{resume_command(ledger, config.run_id)}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(exit_code(summary, verdict, allow_skipped=allow_skipped))


def resume_command(ledger: Ledger, run_id: str) -> str:
    """The command that resumes the run, as pasted into a shell: with ``--ledger`` when
    the ledger is not the default one (given by ``--ledger`` or $EVALLEDGER_LEDGER),
    every word quoted where the shell needs it."""
    words = ["evalledger"]
    if ledger.path != Path(DEFAULT_LEDGER):
        words += ["--ledger", str(ledger.path)]
    return shlex.join([*words, "resume", run_id])


def recorded_expectations(ledger: Ledger, run_id: str) -> dict[str, str]:
    """Per task key, the ``expect`` its latest attempt recorded in ``task.started``
    (keys whose latest attempt has none are left out)."""
    latest: dict[str, tuple[int, str | None]] = {}
    for row in ledger.rows(run_id, types=[EventType.TASK_STARTED]):
        key = row.task_key or ""
        # Canonical JSON: a definition with an expectation holds this text; a payload
        # without it is parsed only when it may clear an earlier attempt's.
        if '"expect":"' not in row.payload and key not in latest:
            continue
        payload = json.loads(row.payload)
        attempt = payload.get("attempt", 1)
        if attempt >= latest.get(key, (0, None))[0]:
            expect = (payload.get("definition") or {}).get("expect")
            latest[key] = (attempt, expect if isinstance(expect, str) else None)
    return {key: expect for key, (_, expect) in latest.items() if expect is not None}


@dataclass(frozen=True)
class Verdict:
    """How a run's counted results meet what their tasks expected (``expect``)."""

    as_expected: Counter[Category] = field(default_factory=Counter)
    """Keys that did not succeed, as expected, by category."""
    unexpected: Counter[Category] = field(default_factory=Counter)
    """Keys that ended otherwise than expected, by category: a failure of a task
    expected to succeed, or a success of one expected not to."""

    @classmethod
    def of(cls, summary: RunSummary, expectations: Mapping[str, str]) -> Verdict:
        """Each counted key judged by the expectation of its key."""
        verdict = cls()
        for row in summary.tasks:
            if row.final_status is None or row.category is None:
                continue
            expect = expectations.get(row.task_key)
            if not meets(expect, row.final_status):
                verdict.unexpected[row.category] += 1
            elif expect is not None:
                verdict.as_expected[row.category] += 1
        return verdict


def _expectation_note(expect: str | None, status: FinalStatus) -> str:
    """What a task line adds when its task expected not to succeed."""
    if expect is None:
        return ""
    return "as expected" if meets(expect, status) else f"unexpected (expect: {expect})"


def exit_code(summary: RunSummary, verdict: Verdict | None = None, *,
              allow_skipped: bool = False) -> int:
    """0 when every planned task ended as expected (succeeded or ran ungraded, unless
    its ``expect`` says otherwise) and no task file was skipped as unusable (unless
    allowed), else 1 (docs/cli.md)."""
    verdict = verdict if verdict is not None else Verdict.of(summary, {})
    broken = bool(summary.broken_files) and not allow_skipped
    if summary.tasks_run < summary.tasks_planned or verdict.unexpected.total() or broken:
        return EXIT_TASKS_FAILED
    return EXIT_OK


def _summary_line(s: RunSummary, verdict: Verdict) -> str:
    cost = money(s.total_cost_usd, s.cost_complete)
    if not s.cost_complete:
        cost += f" ({unpriced_line(s)})"

    def bucket(count: int, word: str, category: Category) -> str:
        expected, unexpected = verdict.as_expected[category], verdict.unexpected[category]
        if category in (Category.SUCCEEDED, Category.UNGRADED):
            return f"{count} {word}" + (f" ({unexpected} unexpectedly)" if unexpected else "")
        if expected and expected == count:
            return f"{count} {word} as expected"
        return f"{count} {word}" + (f" ({expected} as expected)" if expected else "")

    ungraded = (f", {bucket(s.tasks_ungraded, 'ungraded', Category.UNGRADED)}"
                if s.tasks_ungraded else "")
    skipped = f"; {len(s.broken_files)} task file(s) skipped" if s.broken_files else ""
    return (
        f"run {s.run_id} {s.status}: {s.tasks_run} of {s.tasks_planned} tasks run, "
        f"{bucket(s.tasks_succeeded, 'succeeded', Category.SUCCEEDED)}, "
        f"{bucket(s.tasks_failed, 'failed', Category.FAILED)}, "
        f"{bucket(s.tasks_error, 'error', Category.ERROR)}{ungraded}{skipped}; cost {cost}"
    )
