"""``run`` as a new user meets it: the quick start, tasks that fail on purpose (``expect``),
and the line Ctrl-C leaves behind, each through a real ``evalledger`` process.

A task's ``expect`` says how it is meant to end when not by succeeding. It counts as it
ends (failed is failed in every number); the summary line says which ended as expected,
and the exit code is 0 when every task that did not succeed was expected to end so. A
task expected to fail that succeeds makes it 1, as pytest's strict xfail does.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger

from .helpers import COMMAND, PATIENCE, SUMMARY, Result, _env, wait_for_start

ROOT = Path(__file__).resolve().parents[2]
SMOKE_TASKS = ROOT / "examples" / "smoke" / "tasks"


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """``evalledger ARGS...`` as a real process in ``cwd``."""
    done = subprocess.run([*COMMAND, *args], cwd=cwd, env=env or _env(), text=True,
                          capture_output=True, timeout=PATIENCE * 4)
    return Result(done.returncode, done.stdout, done.stderr)


def task(folder: Path, name: str, *, exit_code: int = 0, **fields: Any) -> None:
    """A task whose command exits ``exit_code``; ``fields`` are added to its file."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"command": f"exit {exit_code}", "timeout": 20,
            "success_criteria": [{"type": "exit_code"}], **fields}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def summary_line(result: Result) -> str:
    lines = [line for line in result.out_lines if SUMMARY.match(line)]
    assert len(lines) == 1, result
    return lines[0]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_quick_start_exits_0_and_says_its_two_failures_were_expected(
        tmp_path: Path) -> None:
    # The README's first command, as written, from a fresh folder.
    result = cli(tmp_path, "run", str(SMOKE_TASKS))
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr
    line = summary_line(result)
    assert "4 of 4 tasks run, 2 succeeded, 2 failed as expected, 0 error;" in line, line
    marked = {line.split()[0]: line for line in result.out_lines
              if line.startswith(("FAILURE ", "TIMEOUT "))}
    assert set(marked) == {"FAILURE", "TIMEOUT"}, result
    assert all("as expected" in line for line in marked.values()), marked


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_unexpected_failure_still_exits_1(tmp_path: Path) -> None:
    task(tmp_path / "tasks", "meant-to-fail", exit_code=1, expect="failure")
    task(tmp_path / "tasks", "broken", exit_code=1)
    # A different way not to succeed than the one expected is not what was expected.
    task(tmp_path / "tasks", "meant-to-time-out", exit_code=1, expect="TIMEOUT")
    result = cli(tmp_path, "run", "tasks")
    assert result.returncode == 1, result
    line = summary_line(result)
    assert "0 succeeded, 3 failed (1 as expected), 0 error;" in line, line
    by_key = {line.split()[1]: line for line in result.out_lines
              if line.startswith("FAILURE ")}
    assert "as expected" in by_key["default/meant-to-fail/00"]
    assert "unexpected (expect: timeout)" in by_key["default/meant-to-time-out/00"]
    assert "as expected" not in by_key["default/broken/00"]
    assert "unexpected" not in by_key["default/broken/00"]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_task_expected_to_fail_that_succeeds_exits_1_and_says_so(tmp_path: Path) -> None:
    task(tmp_path / "tasks", "fixed-since", exit_code=0, expect="failed")
    task(tmp_path / "tasks", "still-broken", exit_code=1, expect="failed")
    result = cli(tmp_path, "run", "tasks")
    assert result.returncode == 1, result  # the expectation no longer holds: say so
    line = summary_line(result)
    assert "1 succeeded (1 unexpectedly), 1 failed as expected, 0 error;" in line, line
    success = next(line for line in result.out_lines if line.startswith("SUCCESS "))
    assert "unexpected (expect: failed)" in success


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_resume_judges_kept_tasks_by_the_expectation_their_attempt_recorded(
        tmp_path: Path) -> None:
    task(tmp_path / "tasks", "meant-to-fail", exit_code=1, expect="failure")
    assert cli(tmp_path, "run", "tasks").returncode == 0
    again = cli(tmp_path, "resume", "latest")
    assert again.returncode == 0, again
    assert "nothing to resume" in again.stdout
    # `expect` judges an outcome, it changes nothing that runs: no drift, and the kept
    # result keeps the expectation it ran under.
    task(tmp_path / "tasks", "meant-to-fail", exit_code=1)
    later = cli(tmp_path, "resume", "latest")
    assert (later.returncode, later.stderr) == (0, ""), later


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_ctrl_c_hint_names_the_ledger_and_works_when_pasted(tmp_path: Path) -> None:
    go = tmp_path / "go"
    task(tmp_path / "tasks", "a-waits", command=f"while [ ! -e {shlex.quote(str(go))} ]; "
                                                "do sleep 0.05; done")
    db = tmp_path / "my runs" / "ledger one.db"  # a space: the hint must quote it
    db.parent.mkdir()
    run = subprocess.Popen([*COMMAND, "--ledger", str(db.relative_to(tmp_path)), "run",
                            "tasks"], cwd=tmp_path, env=_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdout is not None
        run_id = run.stdout.readline().strip()
        wait_for_start(db, run_id, run)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=PATIENCE)
    finally:
        run.kill()
    assert run.returncode == 130, err
    hints = [line for line in err.splitlines() if "resume with: " in line]
    assert len(hints) == 1, err
    pasted = hints[0].split("resume with: ", 1)[1]
    assert "--ledger" in pasted, pasted
    go.touch()
    # Pasted into a shell where `evalledger` is the installed command.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(["/bin/sh", "-c", pasted], cwd=tmp_path, text=True,
                          capture_output=True, env=_env(PATH=path), timeout=PATIENCE * 4)
    assert done.returncode == 0, (pasted, done.stdout, done.stderr)
    with Ledger(db, read_only=True) as ledger:
        types = [e.type for e in ledger.events(run_id)]
    assert types.count("run.resumed") == 1 and types.count("task.completed") == 1, types
