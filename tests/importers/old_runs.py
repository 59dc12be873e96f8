"""Run folders as the old harness left them (docs/import.md's layout), written for a
test: a task.json's fields, a file at a path, whole runs; and a run's summary as
``evalledger show --json`` prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.helpers import evalledger

RUN = "2026-03-01_10-00-00"


def task_json(task_id: str, status: str | None, *, tokens: str = "new",
              cost: float | None = 0.01, model: str = "claude-sonnet-4-5",
              cli: str = "1.0.0", variant: str = "default", **extra: Any) -> dict[str, Any]:
    usage: dict[str, Any] = (
        {"uncached_input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 5,
         "cache_read_input_tokens": 7, "input_tokens": 112, "total_cost_usd": cost}
        if tokens == "new" else {"input_tokens": 100, "output_tokens": 20,
                                 "total_cost_usd": cost})
    data: dict[str, Any] = {
        "task_id": task_id, "task_description": f"do {task_id}", "variant_id": variant,
        "agent_type": "claude-code", "model_used": model,
        "started_at": "2026-03-01T10:00:05.250000", "completed_at": "2026-03-01T10:01:05",
        "duration_seconds": 59.75, "weighted_score": 1.0 if status == "SUCCESS" else 0.0,
        "success_criteria_results": [
            {"criterion_type": "file_exists", "score": 1.0 if status == "SUCCESS" else 0.0,
             "details": "out.py", "pass_threshold": 0.9}],
        "environment_info": {"cli_version": cli, "coder_eval": "0.9.1"},
        "total_token_usage": usage, "iteration_count": 3, "some_future_field": {"kept": True},
        **extra,
    }
    if status is not None:
        data["final_status"] = status
    return data


def write(folder: Path, relative: str, data: Any) -> Path:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def write_old_runs(tmp_path: Path) -> Path:
    """``tmp_path/runs`` holding ``RUN``: every kind of attempt docs/import.md lists (both
    token shapes, a batch-level failure, a malformed file, one without final_status, a
    model without a price, a version that differs on one task) and a nested sub-run."""
    root = tmp_path / "runs"
    run = root / RUN
    write(run, "run.json", {
        "run_id": RUN, "start_time": "2026-03-01T10:00:00", "end_time": "2026-03-01T10:30:00",
        "max_parallel": 4, "skipped_tasks": [{"path": "tasks/broken.yaml", "reason": "bad"}],
        "task_results": [
            {"task_id": "t1", "variant_id": "default", "replicate_index": 0,
             "status": "SUCCESS", "tags": ["smoke"]},
            # A batch-level failure: a row, no task.json.
            {"task_id": "crashed", "variant_id": "default", "replicate_index": None,
             "status": "ERROR", "duration": 1.5, "error_message": "docker build failed",
             "input_tokens": 0, "output_tokens": 0, "total_cost_usd": None},
        ],
    })
    write(run, "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    write(run, "default/t1/01/task.json", task_json("t1", "FAILURE", tokens="old", cost=0.02))
    write(run, "default/suite/row-1/00/task.json", task_json(
        "suite/row-1", "ERROR", error_message="agent crashed",
        error_details={"error_category": "agent_crash"}))
    write(run, "default/t2/00/task.json", task_json("t2", "NOT_GRADED", weighted_score=None))
    write(run, "default/t3/00/task.json", task_json("t3", "TIMEOUT", cost=None,
                                                    model="mystery-model"))
    write(run, "default/t4/00/task.json", task_json("t4", "SUCCESS", cli="2.0.0"))
    write(run, "default/turns/00/task.json", task_json(
        "turns", "MAX_TURNS_EXHAUSTED", iterations=[
            {"iteration": 1, "model_used": "m-a",
             "token_usage": {"input_tokens": 10, "output_tokens": 1, "total_cost_usd": 0.5}},
            {"iteration": 2, "model_used": "m-b",
             "token_usage": {"input_tokens": 20, "output_tokens": 2, "total_cost_usd": None}},
        ]))
    write(run, "default/bad/00/task.json", "{not json")
    write(run, "default/nostatus/00/task.json", task_json("nostatus", None))
    # Not results: a pre-grade snapshot and a half-written file.
    write(run, "default/t1/00/task.execute.json", task_json("t1", "FAILURE"))
    write(run, "default/t1/00/task.json.tmp", "{")
    # A nested sub-run (say, a task that ran the harness itself): a run of its own.
    inner = run / "default/t1/00/artifacts/inner"
    write(inner, "run.json", {"run_id": "inner-run", "start_time": "2026-03-01T10:00:10"})
    write(inner, "default/x/00/task.json", task_json("x", "SUCCESS"))
    return root


def good_and_hostile(tmp_path: Path) -> tuple[Path, Path]:
    """``runs/r1`` with one good attempt (``default/good/00``) and a folder for a hostile
    one (``default/bad/00/``), and a file outside the runs with a secret in it."""
    root = tmp_path / "runs"
    run = root / "r1"
    write(run, "run.json", {"run_id": "r1", "start_time": "2026-03-01T10:00:00"})
    write(run, "default/good/00/task.json", task_json("good", "SUCCESS"))
    (run / "default/bad/00").mkdir(parents=True)
    write(tmp_path, "outside.json", task_json("bad", "SUCCESS", secret="s3cret"))
    return root, run / "default/bad/00/task.json"


def summary(db: Path, run_id: str) -> dict[str, Any]:
    """``evalledger show RUN --json`` of the ledger ``db``."""
    result = evalledger(db.parent, db, "show", run_id, "--json")
    assert result.returncode == 0, result
    return json.loads(result.stdout)
