"""Batches for ``run_batch`` tests: a task, a script to run, a config, a run and what it
recorded. Shared by the executor's tests and the agents' format tests (which run a batch
to read each agent's stream)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from evalledger.executor import BatchConfig, BatchResult, Callbacks, run_batch
from evalledger.ledger import AnyEvent, Ledger
from evalledger.options import RunOptions
from evalledger.suite import ResolvedTask

RUN = "run-1"


def make_task(name: str, command: list[str], **fields: Any) -> ResolvedTask:
    fields.setdefault("success_criteria", [{"type": "exit_code"}])
    return ResolvedTask(
        task_key=f"default/{name}/00", task_id=name, variant_id="default",
        replicate_index=0, source=f"/suite/{name}.yaml", command=command, **fields,
    )


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return path


def py(path: Path, *args: object) -> list[str]:
    return [sys.executable, str(path), *map(str, args)]


_BATCH_FIELDS = {"experiment_id", "rates", "unpriced_models"}


def config(tmp_path: Path, run_id: str = RUN, **fields: Any) -> BatchConfig:
    """A batch config; fields of ``RunOptions`` (max_parallel, ...) go into its options."""
    fields.setdefault("kill_grace", 0.5)
    batch = {k: fields.pop(k) for k in list(fields) if k in _BATCH_FIELDS}
    options = RunOptions(out=str(tmp_path / "out"), **fields)
    return BatchConfig(run_id=run_id, options=options, **batch)


def run(
    ledger: Ledger,
    tasks: Sequence[ResolvedTask],
    cfg: BatchConfig,
    callbacks: Callbacks | None = None,
    **kwargs: Any,
) -> BatchResult:
    return trio.run(functools.partial(run_batch, ledger, tasks, cfg, callbacks, **kwargs))


def events(ledger: Ledger, run_id: str = RUN) -> list[AnyEvent]:
    """The run's facts: its snapshots (derived, after run.finished) left out."""
    return [e for e in ledger.events(run_id) if e.type != "run.snapshot"]


def of_type(evs: Sequence[AnyEvent], cls: type) -> list[Any]:
    return [e for e in evs if isinstance(e, cls)]
