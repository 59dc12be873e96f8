"""`latest` is the newest run by start time in every command, also after `import`
brought in a run that started months ago (it is appended last, it is not the latest).

Real processes on a real ledger: a run made by `evalledger run`, then an old-harness
run folder imported after it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ..importers.old_runs import task_json, write
from .helpers import COMMAND, PATIENCE, _env, write_task

OLD = "2025-06-01_09-00-00"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "--ledger", str(cwd / "l.db"), *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=3 * PATIENCE,
                          check=False)


@pytest.fixture(scope="module")
def native_then_old(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger where a run made today comes first and a run of June 2025 is imported
    after it."""
    cwd = tmp_path_factory.mktemp("latest")
    write_task(cwd / "tasks" / "t1.yaml", "echo hi")
    made = cli(cwd, "run", "tasks", "--run-id", "native")
    assert made.returncode == 0, made.stderr
    old = cwd / "old" / OLD
    write(old, "run.json", {"run_id": OLD, "start_time": "2025-06-01T09:00:00",
                            "end_time": "2025-06-01T09:30:00"})
    write(old, "default/t1/00/task.json", task_json(
        "t1", "FAILURE", started_at="2025-06-01T09:00:05", completed_at="2025-06-01T09:01:00"))
    imported = cli(cwd, "import", str(cwd / "old"), "--tz", "UTC")
    assert imported.returncode == 0, imported.stderr
    return cwd


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_show_latest_is_the_newest_start_not_the_last_import(native_then_old: Path) -> None:
    shown = cli(native_then_old, "show", "latest", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == "native"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_report_latest_is_the_newest_start(native_then_old: Path) -> None:
    report = cli(native_then_old, "report", "latest", "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["run_id"] == "native"


def test_diff_with_latest_compares_with_the_newest_start(native_then_old: Path) -> None:
    diff = cli(native_then_old, "diff", OLD, "latest", "--json", "--fail-on", "never")
    assert diff.returncode == 0, diff.stderr
    assert (json.loads(diff.stdout)["run_a"], json.loads(diff.stdout)["run_b"]) == (
        OLD, "native")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_resume_latest_resumes_the_newest_start(native_then_old: Path) -> None:
    resumed = cli(native_then_old, "resume", "latest")
    assert resumed.returncode == 0, resumed.stderr
    assert "run native: nothing to resume" in resumed.stdout + resumed.stderr


def test_runs_lists_by_start_time_newest_first(native_then_old: Path) -> None:
    listed = cli(native_then_old, "runs", "--format", "json")
    assert [json.loads(line)["run_id"] for line in listed.stdout.splitlines()] == [
        "native", OLD]
