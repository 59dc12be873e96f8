"""What ``resume`` says, through a real ``evalledger`` process: drift named field by field
(``timeout: 20 → 30``), edits that change nothing a run evaluates (description, tags) left
out, what ``--strict`` compares with, and an imported run refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import COMMAND, PATIENCE, Result, _env, assert_one_line_error

KEY = "default/add/00"


def cli(cwd: Path, *args: str) -> Result:
    done = subprocess.run([*COMMAND, "--ledger", "l.db", *args], cwd=cwd, env=_env(),
                          text=True, capture_output=True, timeout=PATIENCE * 4)
    return Result(done.returncode, done.stdout, done.stderr)


def write(cwd: Path, **fields: Any) -> None:
    data = {"description": "add two numbers", "tags": ["math"], "command": "true",
            "timeout": 20, "env": {"MODE": "fast"},
            "success_criteria": [{"type": "exit_code"}], **fields}
    (cwd / "tasks").mkdir(exist_ok=True)
    (cwd / "tasks" / "add.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def drift(result: Result) -> list[str]:
    return [line for line in result.err_lines if line.startswith("drift: ")]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_drift_names_each_changed_field_with_its_value_before_and_now(tmp_path: Path) -> None:
    write(tmp_path)
    assert cli(tmp_path, "run", "tasks").returncode == 0
    write(tmp_path, timeout=30, env={"MODE": "slow"}, description="add them", tags=["x"])
    result = cli(tmp_path, "resume", "latest")
    assert result.returncode == 0, result
    assert drift(result) == [f'drift: task {KEY}: env.MODE: "fast" → "slow"',
                             f"drift: task {KEY}: timeout: 20 → 30"], result.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_editing_a_description_or_tags_is_not_drift(tmp_path: Path) -> None:
    write(tmp_path)
    assert cli(tmp_path, "run", "tasks").returncode == 0
    write(tmp_path, description="adds two integers, carefully", tags=["math", "easy"])
    result = cli(tmp_path, "resume", "latest", "--strict")
    assert result.returncode == 0, result
    assert drift(result) == [], result.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_strict_refuses_drift_since_the_last_resume_and_says_so(tmp_path: Path) -> None:
    write(tmp_path)
    assert cli(tmp_path, "run", "tasks").returncode == 0
    write(tmp_path, timeout=30)
    # Drift taken on by a resume that ran something is recorded with it (run.resumed)...
    assert cli(tmp_path, "resume", "latest", "--rerun", KEY).returncode == 0
    write(tmp_path, timeout=40)
    result = cli(tmp_path, "resume", "latest", "--strict")
    # ...so --strict compares with that resume: 30 → 40, not 20 → 40.
    error = assert_one_line_error(result)
    assert drift(result) == [f"drift: task {KEY}: timeout: 30 → 40"], result.stderr
    assert " drifted since its last resume, at 20" in error, error
    assert "1 difference(s), printed above; resume without --strict" in error, error


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_strict_on_a_first_resume_says_since_it_started(tmp_path: Path) -> None:
    write(tmp_path)
    assert cli(tmp_path, "run", "tasks").returncode == 0
    write(tmp_path, timeout=30)
    result = cli(tmp_path, "resume", "latest", "--strict")
    error = assert_one_line_error(result)
    assert " drifted since it started: 1 difference(s)" in error, error
    assert drift(result) == [f"drift: task {KEY}: timeout: 20 → 30"], result.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_resuming_an_imported_run_says_it_cannot_be_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "old" / "2026-03-01_10-00-00"
    (run / "default" / "t1" / "00").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name}), encoding="utf-8")
    (run / "default" / "t1" / "00" / "task.json").write_text(json.dumps({
        "task_id": "t1", "final_status": "FAILURE", "started_at": "2026-03-01T10:00:05",
        "duration_seconds": 3.0}), encoding="utf-8")
    assert cli(tmp_path, "import", "old").returncode == 0
    result = cli(tmp_path, "resume", run.name)
    error = assert_one_line_error(result)
    assert error == (f"Error: run {run.name} was imported (from {run}): its tasks were "
                     "defined by the old harness, so it cannot be resumed; run them with "
                     "`evalledger run`"), error
    assert result.stdout == ""
