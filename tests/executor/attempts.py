"""One task's attempts through ``run_batch``, for the runner's tests: a task, a script
it runs, a batch of them run into a ledger, and what the ledger then holds of a task."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from evalledger.executor import BatchConfig, BatchResult, run_batch
from evalledger.ledger import AnyEvent, Ledger, TaskCompleted, TaskOutput, verify
from evalledger.options import RunOptions
from evalledger.suite import ResolvedTask
from tests.waiting import PATIENCE

RUN_ID = "run-1"
PY = sys.executable
# A timeout (or the like) a test must never reach, and the bound that shows it was not
# reached: far apart, so that a loaded machine never lands between them.
NEVER = PATIENCE
QUICK = NEVER / 2


def make_task(
    name: str,
    command: str | list[str],
    criteria: Sequence[dict[str, Any]] = ({"type": "exit_code", "equals": 0},),
    **fields: Any,
) -> ResolvedTask:
    return ResolvedTask(
        task_key=f"default/{name}/00",
        task_id=name,
        variant_id="default",
        replicate_index=0,
        source=f"/suite/{name}.yaml",
        command=command,
        success_criteria=list(criteria),
        **fields,
    )


def script(tmp_path: Path, name: str, body: str, *args: str) -> list[str]:
    """Write a Python script into tmp_path; return the argv that runs it."""
    path = tmp_path / f"cmd_{name}.py"  # a prefix: a script named json.py shadows json
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return [PY, str(path), *args]


def run(
    ledger: Ledger,
    tmp_path: Path,
    *tasks: ResolvedTask,
    mode: str = "move-on-write",
    max_parallel: int = 4,
    **more: Any,
) -> BatchResult:
    options = RunOptions(out=str(tmp_path / "out"), max_parallel=max_parallel,
                         preservation_mode=mode, kill_grace=0.5, **more)  # type: ignore[arg-type]
    config = BatchConfig(run_id=RUN_ID, options=options)
    result = trio.run(run_batch, ledger, list(tasks), config)
    assert verify(ledger).ok
    return result


def completed(result: BatchResult, ledger: Ledger, task: ResolvedTask) -> TaskCompleted:
    """The one task.completed of ``task``, checked to be the same in result and ledger."""
    [returned] = [c for c in result.completed if c.task_key == task.task_key]
    [stored] = ledger.events(RUN_ID, task_key=task.task_key, types={"task.completed"})
    assert isinstance(stored, TaskCompleted)
    assert stored.model_dump(exclude={"seq"}) == returned.model_dump(exclude={"seq"})
    assert stored.category == stored.final_status.category
    return stored


def task_events(ledger: Ledger, task: ResolvedTask, *types: str) -> list[AnyEvent]:
    return list(ledger.events(RUN_ID, task_key=task.task_key, types=set(types) or None))


def lines(ledger: Ledger, task: ResolvedTask, stream: str = "stdout") -> list[str]:
    return [
        e.line
        for e in task_events(ledger, task, "task.output")
        if isinstance(e, TaskOutput) and e.stream == stream
    ]
