"""``start_run`` (``evalledger.run``): load tasks, run the batch, record everything,
write the reports, say how it ended."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from evalledger._files import same_file
from evalledger.errors import InvalidRequest
from evalledger.executor import BatchConfig
from evalledger.ledger import RunConflict
from evalledger.options import RunOptions

from ._batch import RunOutcome, execute
from ._callbacks import Callbacks
from ._prepare import (
    check_executor,
    check_run_id,
    load_task_set,
    make_folders,
    new_run_id,
    rate_card,
    shard_spec,
    unpriced,
)
from ._settings import RunSettings, open_ledger


def start_run(options: RunOptions, settings: RunSettings | None = None, *,
              run_id: str | None = None, callbacks: Callbacks | None = None) -> RunOutcome:
    """Run the tasks ``options`` name as a new run, recorded in the ledger.

    Paths in ``options`` are made absolute (a resume works from any folder); a
    ``sample`` without a ``seed`` gets a random one, said and recorded;
    ``max_parallel`` left unset is the experiment's, if it says. The reports go to
    ``<options.out>/<run_id>/``.

    Args:
        options: what the run evaluates and how; recorded in ``run.started``.
        settings: the ledger, durability, JUnit output, signals (none recorded).
        run_id: the run's name (default: its start time and 4 random hex digits).
        callbacks: told what happens as it goes (default: warnings are logged).

    Returns:
        The outcome: run id, summary, reports written, and how it ended (an
        interrupted run is an outcome, not an exception).

    Raises:
        EvalledgerError: the request is refused before anything is recorded (a bad run
            id, a run id already taken, no task to run, an unreadable pricing file or
            experiment, Ray not installed), or the ledger fails.
    """
    settings = settings or RunSettings()
    callbacks = callbacks or Callbacks()
    check_run_id(run_id, options.shard)
    _check_junit(settings)
    check_executor(options.executor)
    if options.no_grade and options.preservation_mode == "none":
        raise InvalidRequest("--no-grade keeps each workspace for a later regrade: it cannot "
                             "go with --preservation-mode none")
    rates = rate_card(options.pricing)
    options = _absolute(options, callbacks)
    task_set = load_task_set(options, callbacks)
    if "max_parallel" not in options.model_fields_set and task_set.max_parallel:
        options = options.model_copy(update={"max_parallel": task_set.max_parallel})
    run_id = run_id or new_run_id()
    config = BatchConfig(
        run_id=run_id, options=options, experiment_id=task_set.experiment_id, rates=rates,
        unpriced_models=unpriced(task_set.tasks, rates, callbacks),
    )
    with open_ledger(settings.ledger, durable=settings.durable) as ledger:
        # Made now, not after every task ran: the reports and artifacts need a home.
        made = make_folders(config.out_dir / run_id)
        try:
            # A run id already taken (now, or by a process racing this one) is refused
            # when run.started is appended: RunConflict, under the write lock.
            return execute(ledger, task_set.tasks, task_set.skipped, config, settings,
                           callbacks, announce=True)
        except RunConflict:
            raise  # the folder is the existing run's
        except Exception:
            # Failed before anything ran: leave no empty folder behind for a run that
            # does not exist.
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise


def _check_junit(settings: RunSettings) -> None:
    junit = settings.junit_path
    if junit is None:
        return
    if not junit.resolve().parent.is_dir():
        raise InvalidRequest(f"--junit-xml {junit}: no folder {junit.resolve().parent}")
    if same_file(junit, settings.ledger_path):
        raise InvalidRequest(f"--junit-xml {junit} is the ledger itself; choose another file")


def _absolute(options: RunOptions, callbacks: Callbacks) -> RunOptions:
    """``options`` as recorded: paths absolute (a resume works from any folder), the
    folder it started in, the shard as ``K/N``, and a sample's seed chosen and said."""
    update: dict[str, object] = {
        "paths": [str(Path(p).resolve()) for p in options.paths],
        "out": str(Path(options.out).resolve()),
        "cwd": options.cwd or os.getcwd(),
    }
    for name in ("experiment", "pricing"):
        if (path := getattr(options, name)) is not None:
            update[name] = str(Path(path).resolve())
    if options.shard is not None:
        update["shard"] = shard_spec(options.shard)
    if options.sample is not None and options.seed is None:
        update["seed"] = secrets.randbelow(2**32)
        callbacks.notice(f"sampling with --seed {update['seed']}")
    return options.model_copy(update=update)
