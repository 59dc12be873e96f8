"""What a batch needs before anything runs: a valid name, its tasks, its rate card, its
folder; each refused with one line (an ``EvalledgerError``) before the ledger is
touched."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from evalledger._text import visible
from evalledger.errors import InvalidRequest, NothingToRun, Unavailable
from evalledger.options import ExecutorKind, RunOptions
from evalledger.pricing import DEFAULT_RATES, RateCard
from evalledger.suite import Overrides, ResolvedTask, TaskSet, load_tasks

from ._callbacks import Callbacks

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_run_id() -> str:
    """Sortable by start time, unique enough for one ledger: ``20261129-213512-3f9a``."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_run_id(run_id: str | None, shard: str | None) -> None:
    """Refuse a run id the ledger and the reports' folder cannot both hold, ``latest``
    (it names the newest run), and a shard without one (shards share their run's id).

    Raises:
        InvalidRequest: saying which.
    """
    if run_id is not None and not RUN_ID_PATTERN.match(run_id):
        raise InvalidRequest(f"invalid --run-id {run_id!r}: use letters, digits, '.', '_' "
                             "or '-'")
    if run_id == "latest":
        raise InvalidRequest("--run-id latest is reserved: `latest` names the newest run")
    if shard is not None and run_id is None:
        raise InvalidRequest("--shard needs --run-id: the shards of a run share its id")


def shard_spec(spec: str) -> str:
    """``K/N`` as ``RunOptions.shard`` holds it (``01/2`` is ``1/2``).

    Raises:
        InvalidRequest: not two whole numbers with 1 <= K <= N.
    """
    k, _, n = spec.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise InvalidRequest(f"--shard {spec!r}: K/N with 1 <= K <= N, such as 1/2")
    return f"{int(k)}/{int(n)}"


def check_executor(kind: ExecutorKind | None) -> None:
    """Refuse, before anything runs, an executor that cannot be had here.

    Raises:
        Unavailable: Ray is asked for and not installed.
    """
    if kind == "ray" and importlib.util.find_spec("ray") is None:
        from evalledger.executor.ray import INSTALL_HINT

        raise Unavailable(INSTALL_HINT)


def rate_card(pricing: str | None) -> RateCard:
    """The built-in rate card, plus the rates of a pricing file.

    Raises:
        PricingError: the file cannot be used.
    """
    return DEFAULT_RATES.with_file(pricing) if pricing else DEFAULT_RATES


# Formats whose agent reports what it spent: the card prices only an attempt cut off
# before its report (an estimate, a floor either way), or, for OpenCode, a step it
# priced at $0 (a model it has no price for): warning of a model the card lacks before
# the run says a cost will be unknown that the agent itself reports (#49).
_SELF_PRICED = frozenset({"claude-code", "opencode"})


def unpriced(tasks: list[ResolvedTask], rates: RateCard, callbacks: Callbacks) -> list[str]:
    """The models the tasks name that the card does not price, each said; a model only
    agents that report their own cost run is not one."""
    models = rates.unpriced(t.model for t in tasks if t.stream_format not in _SELF_PRICED)
    for model in models:
        callbacks.notice(f"warning: no price for model {model!r}: its cost will be unknown")
    return models


def load_task_set(options: RunOptions, callbacks: Callbacks, *,
                  missing_ok: bool = False) -> TaskSet:
    """The tasks ``options`` name, resolved now; what was skipped or is missing is said.

    Raises:
        NothingToRun: no paths or experiment, or no task left to run.
        TaskLoadError: a path does not exist (unless ``missing_ok``), or the experiment
            file is unusable.
    """
    if not options.paths and options.experiment is None:
        raise NothingToRun("nothing to run: give task files or folders, or -e EXPERIMENT")
    task_set = load_tasks(
        options.paths, experiment=options.experiment, include_tags=options.tags,
        exclude_tags=options.exclude_tags,
        overrides=Overrides(timeout=options.timeout, repeats=options.repeats,
                            model=options.model, isolation=options.isolation,
                            stall_timeout=options.stall_timeout, retries=options.retries),
        missing_ok=missing_ok,
        sample=None if options.sample is None else (options.sample, options.seed or 0),
        shard=_shard(options.shard),
    )
    for path in task_set.missing:
        callbacks.notice(f"warning: {path} no longer exists; its tasks cannot run (if the "
                         "suite moved: resume --relocate OLD=NEW)")
    for skip in task_set.skipped:
        callbacks.notice(f"skipped {visible(skip.path)}: {visible(skip.reason)}")
    if not task_set.tasks:
        raise NothingToRun(_nothing_to_run(options, task_set))
    check_isolation(task_set.tasks, options, callbacks)
    check_gateway(task_set.tasks, options)
    return task_set


def check_gateway(tasks: Sequence[ResolvedTask], options: RunOptions) -> None:
    """Refuse to start tasks with ``gateway`` where their agent could not reach it.

    Raises:
        Unavailable: saying which tasks and what would let them.
    """
    through = [t for t in tasks if t.gateway]
    if not through:
        return
    if options.executor != "local":
        raise Unavailable(f"{len(through)} task(s) call through the gateway, which runs "
                          "with the local executor only (not --executor ray)")
    shut = sorted({t.isolation for t in through if t.isolation != "none"
                   and t.network == "none"})
    if shut:
        raise Unavailable(
            f"{sum(t.isolation in shut and t.network == 'none' for t in through)} task(s) "
            f"call through the gateway under isolation {', '.join(shut)} with network: "
            "none, where nothing on the host can be reached: give them network: gateway "
            "(the gateway their only way out)")
    if any(t.isolation == "docker" and t.network == "gateway" for t in through) and (
            os.geteuid() != 0):
        raise Unavailable("network: gateway under docker enters each container's network "
                          "namespace, which only root may: run as root, or use isolation "
                          "bwrap")


def check_isolation(tasks: Sequence[ResolvedTask], options: RunOptions,
                    callbacks: Callbacks) -> None:
    """Refuse to start when an isolation the tasks ask for cannot run here; with
    ``allow_unconfined`` (and not ``require_isolation``) say so instead: those tasks
    run with none, and their records say so.

    Raises:
        Unavailable: saying what and why.
    """
    asked = {t.isolation for t in tasks} - {"none"}
    if options.executor != "local" or not asked:
        return  # on Ray, each worker finds out for itself (and records it)
    from evalledger.executor.isolation import IsolationUnavailable, bwrap, docker, image_id

    for isolation in sorted(asked):
        asking = [t for t in tasks if t.isolation == isolation]
        try:
            if isolation in ("bwrap", "auto"):  # auto: the strongest that runs, bwrap
                bwrap()
            else:
                found = docker()
                for source in {(t.image, t.dockerfile) for t in asking}:
                    image_id(found, *source)  # built now, not by the first task
        except IsolationUnavailable as e:
            said = (f"isolation {isolation} is not available: {e}" if isolation != "auto"
                    else f"no isolation runs here (isolation auto: {e})")
            if options.require_isolation or not options.allow_unconfined:
                ways = ("--allow-unconfined runs them with none: no boundary" +
                        ("; or give them isolation: none" if isolation == "auto" else ""))
                raise Unavailable(f"{said}; {len(asking)} task(s) ask for it ({ways})") from e
            callbacks.notice(f"warning: {said}; {len(asking)} task(s) asking for it run with "
                             "none (no boundary: --allow-unconfined)")


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


def _shard(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    k, _, n = spec.partition("/")
    return int(k), int(n)


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
