"""The application layer's commands, called as a Python caller calls them: typed options
in, an outcome value out, nothing printed, no exit; errors a caller can act on are
``EvalledgerError``; what happens as it goes is told to ``Callbacks``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import evalledger
from evalledger.app import (
    Callbacks,
    Ending,
    ResumeRequest,
    RunSettings,
    resume_run,
    start_run,
)
from evalledger.errors import EvalledgerError, InvalidRequest, NothingToRun
from evalledger.ledger import EventType, Ledger, TaskCompleted, verify
from evalledger.options import RunOptions
from evalledger.projections import ResumeRefused
from tests.waiting import PATIENCE, wait_until


def _task(folder: Path, name: str, code: int, **extra: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"command": [sys.executable, "-c", f"import sys; sys.exit({code})"],
            "success_criteria": [{"type": "exit_code", "equals": 0}], **extra}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def _options(tmp_path: Path, **fields: object) -> RunOptions:
    return RunOptions.model_validate(
        {"paths": [str(tmp_path / "tasks")], "out": str(tmp_path / "out"), "kill_grace": 0.5,
         **fields})


class Seen(Callbacks):
    """Everything a command told its caller, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, object]] = []

    def notice(self, text: str) -> None:
        self.said.append(("notice", text))

    def run_named(self, run_id: str) -> None:
        self.said.append(("run_named", run_id))

    def batch_started(self, run_id: str, live: object, total: int) -> None:
        self.said.append(("batch_started", total))

    def task_completed(self, result: TaskCompleted, expect: str | None,
                       as_expected: bool) -> None:
        self.said.append(("task_completed", result.task_key))

    def batch_ended(self) -> None:
        self.said.append(("batch_ended", None))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.said]


def test_a_run_returns_its_outcome_and_prints_nothing(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _task(tmp_path / "tasks", "good", 0)
    _task(tmp_path / "tasks", "bad", 3)
    ledger = tmp_path / "l.db"
    seen = Seen()

    outcome = start_run(_options(tmp_path), RunSettings(ledger=ledger), run_id="r1",
                        callbacks=seen)

    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert (outcome.run_id, outcome.ending, outcome.ok, outcome.ran) == (
        "r1", Ending.TASKS_FAILED, False, True)
    s = outcome.summary
    assert (s.tasks_planned, s.tasks_succeeded, s.tasks_failed) == (2, 1, 1)
    assert outcome.ledger == ledger
    assert set(outcome.reports) == {"md", "json", "html"}
    assert all(path.parent == tmp_path / "out" / "r1" for path in outcome.reports.values())
    assert json.loads(outcome.reports["json"].read_text())["tasks_succeeded"] == 1
    # The caller was told as it went: the run named once it exists, then the batch.
    kinds = seen.kinds()
    assert kinds[0] == "run_named" and kinds[1] == "batch_started"
    assert kinds.count("task_completed") == 2 and kinds[-1] == "batch_ended"
    with Ledger(ledger, read_only=True) as opened:
        assert verify(opened).ok


def test_a_refused_request_raises_an_evalledger_error_and_leaves_no_ledger(
        tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    (tmp_path / "tasks").mkdir()
    with pytest.raises(NothingToRun, match="no tasks to run"):
        start_run(_options(tmp_path), RunSettings(ledger=ledger))
    _task(tmp_path / "tasks", "good", 0)
    with pytest.raises(InvalidRequest, match="reserved"):
        start_run(_options(tmp_path), RunSettings(ledger=ledger), run_id="latest")
    with pytest.raises(EvalledgerError, match="--shard needs --run-id"):
        start_run(_options(tmp_path, shard="1/2"), RunSettings(ledger=ledger))
    assert not ledger.exists()
    assert not (tmp_path / "out").exists()


def test_resume_runs_its_plan_and_says_when_nothing_is_left(tmp_path: Path) -> None:
    _task(tmp_path / "tasks", "good", 0)
    _task(tmp_path / "tasks", "bad", 3)
    settings = RunSettings(ledger=tmp_path / "l.db")
    start_run(_options(tmp_path), settings, run_id="r1", callbacks=Seen())

    idle = resume_run("r1", settings=settings, callbacks=Seen())
    assert (idle.ran, idle.reports, idle.ending) == (False, {}, Ending.TASKS_FAILED)
    assert idle.plan is not None and len(idle.plan.partition.kept) == 2

    seen = Seen()
    again = resume_run("latest", ResumeRequest(rerun_failed=True), settings, callbacks=seen)
    assert again.ran and again.run_id == "r1"
    assert again.plan is not None and again.plan.to_run == ["default/bad/00"]
    assert ("notice", "resuming 1 task(s), keeping 1") in seen.said
    assert again.summary.tasks_planned == 2 and again.summary.tasks_failed == 1
    with Ledger(settings.ledger_path, read_only=True) as ledger:
        [resumed] = ledger.events("r1", types={EventType.RUN_RESUMED})
        assert resumed.rerun_failed and resumed.to_run == ["default/bad/00"]
        attempts = [e.attempt for e in ledger.events("r1", types={EventType.TASK_STARTED})
                    if e.task_key == "default/bad/00"]
        assert attempts == [1, 2]
    with pytest.raises(ResumeRefused, match="matches no task key") as refused:
        resume_run("r1", ResumeRequest(rerun=["nothing/*"]), settings)
    assert isinstance(refused.value, EvalledgerError)


def test_the_package_runs_and_resumes_with_the_apps_commands() -> None:
    assert evalledger.run is start_run
    assert evalledger.resume is resume_run


_SCRIPT = """
import sys
import evalledger
options = evalledger.RunOptions(paths=[sys.argv[1]], out=sys.argv[2], kill_grace=0.5)
outcome = evalledger.run(options, evalledger.RunSettings(ledger=sys.argv[3]), run_id="r1")
print("ending", outcome.ending.value, outcome.summary.tasks_unfinished, flush=True)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_python_caller_gets_an_interrupted_outcome_not_an_exit(tmp_path: Path) -> None:
    """Ctrl-C under ``evalledger.run`` in a real process: the batch records the
    interruption and returns; the caller goes on (here: prints and exits 0)."""
    started = tmp_path / "started"
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "slow.yaml").write_text(yaml.safe_dump({
        "command": [sys.executable, "-c",
                    f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); "
                    "time.sleep(120)"],
    }), encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(folder), str(tmp_path / "out"),
         str(tmp_path / "l.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())

    def task_started() -> bool:
        if started.exists():
            return True
        assert child.poll() is None, child.communicate()
        return False

    try:
        wait_until(task_started, "the task to start", timeout=2 * PATIENCE, every=0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=2 * PATIENCE)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert out.splitlines() == ["ending interrupted 1"]
    with Ledger(tmp_path / "l.db", read_only=True) as ledger:
        types = [e.type for e in ledger.events("r1")]
    assert "task.interrupted" in types and "run.finished" in types


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_python_caller_sees_no_warning_on_stderr_unless_its_logging_shows_it(
    tmp_path: Path,
) -> None:
    """#48: ``evalledger.run`` prints nothing. A notice (here: a model with no price) is
    logged to ``evalledger``; Python's last resort wrote it to the caller's stderr. It
    shows where the program's logging shows it, and the CLI prints it."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "t.yaml").write_text(yaml.safe_dump({
        "command": "true", "model": "mystery-model-7", "isolation": "none",
        "success_criteria": [{"type": "exit_code"}]}), encoding="utf-8")
    said = "no price for model 'mystery-model-7'"

    def python(prelude: str, db: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", prelude + _SCRIPT, str(folder), str(tmp_path / "out"),
             str(tmp_path / db)], capture_output=True, text=True, timeout=120)

    quiet = python("", "quiet.db")
    assert quiet.returncode == 0 and quiet.stdout.startswith("ending"), quiet.stderr
    assert quiet.stderr == ""
    shown = python("import logging; logging.basicConfig()\n", "shown.db")
    assert shown.returncode == 0 and said in shown.stderr, shown.stderr
    cli = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger",
                          str(tmp_path / "cli.db"), "run", str(folder)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and said in cli.stderr, cli.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("stream_format", "warned"), [
    ("opencode", False), ("claude-code", False), ("codex", True), (None, True)])
def test_a_model_the_card_lacks_is_warned_of_unless_its_agent_prices_itself(
    tmp_path: Path, stream_format: str | None, warned: bool,
) -> None:
    """#49: Claude Code and OpenCode report what each step cost; a model the card lacks
    is no unknown cost there, and the run says nothing of it before it starts."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    task = {"command": "true", "model": "mystery-model-9", "isolation": "none",
            "success_criteria": [{"type": "exit_code"}]}
    if stream_format is not None:
        task["stream_format"] = stream_format
    (folder / "t.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    ran = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger",
                          str(tmp_path / "l.db"), "run", str(folder)],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ("no price for model 'mystery-model-9'" in ran.stderr) is warned, ran.stderr
