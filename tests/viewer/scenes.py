"""A ledger of what a new user meets in the first hour, made by real ``evalledger`` processes.

An experiment of two variants (two models) whose Claude Code task is interrupted by a
real SIGINT half way and resumed (so its key has two attempts), a task that prints ANSI
colour and markup, a tag whose only task is ungraded; a second run of the experiment
with one success turned into a failure (a regression for the diff); then an old
harness's run folder imported last, although it started months before.

Shared by the viewer tests (a session fixture) and by the screenshot script. Every
process is a real ``python -m evalledger.cli``; waiting is for a row in the ledger, never
for a clock.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalledger.ledger import Ledger, LedgerError
from tests.waiting import PATIENCE, wait_until

EXPERIMENT = "models"
FIRST, SECOND, IMPORTED = "exp-1", "exp-2", "2026-01-10_09-00-00"
MODELS = {"alpha": "claude-sonnet-4-5", "beta": "claude-haiku-4-5"}
AGENT_KEY = "alpha/agent/00"
GATE_LINE = "waiting for the gate"

# A pretend coding agent speaking Claude Code's stream-json: it stops half way until the
# gate file exists (the first attempt is interrupted there), then finishes.
AGENT = r'''
import json, os, sys, time
model, gate = os.environ["MODEL"], sys.argv[1]
def say(obj):
    print(json.dumps(obj), flush=True)
    time.sleep(0.05)  # the messages of a real agent arrive over time
def usage(i, o):
    return {"input_tokens": i, "output_tokens": o, "cache_read_input_tokens": 2 * i}
say({"type": "system", "subtype": "init", "model": model, "tools": ["Bash", "Edit"],
     "session_id": "s1", "claude_code_version": "2.0.1"})
say({"type": "assistant", "message": {"id": "m1", "model": model, "usage": usage(1200, 80),
     "content": [{"type": "text", "text": "I will run the tests first."},
                 {"type": "tool_use", "id": "t1", "name": "Bash",
                  "input": {"command": "pytest -q"}}]}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1",
     "is_error": True,
     "content": "\x1b[31mFAILED\x1b[0m test_add.py::test_sum - assert add(2, 3) == 6\n"
                "\x1b[1m1 failed\x1b[0m in 0.02s"}]}})
if not os.path.exists(gate):
    print("waiting for the gate", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.05)
say({"type": "assistant", "message": {"id": "m2", "model": model, "usage": usage(2400, 160),
     "content": [{"type": "thinking", "thinking": "The test expects 6; add() returns 5."},
                 {"type": "text", "text": "The test is wrong: 2 + 3 is 5. Fixing the test."},
                 {"type": "tool_use", "id": "t2", "name": "Edit",
                  "input": {"file_path": "test_add.py", "old_string": "== 6",
                            "new_string": "== 5"}}]}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t2",
     "content": "The file test_add.py has been updated."}]}})
say({"type": "assistant", "message": {"id": "m3", "model": model, "usage": usage(3000, 40),
     "content": [{"type": "tool_use", "id": "t3", "name": "Bash",
                  "input": {"command": "pytest -q"}}]}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t3",
     "content": "\x1b[32m1 passed\x1b[0m in 0.01s"}]}})
say({"type": "result", "subtype": "success", "is_error": False, "total_cost_usd": 0.0421,
     "num_turns": 3, "duration_ms": 5300, "result": "Fixed the test: 1 passed.",
     "usage": {"input_tokens": 6600, "output_tokens": 280, "cache_read_input_tokens": 13200}})
'''

COLOURS = (
    "print('\\x1b[1;32mPASS\\x1b[0m tests/test_ok.py')\n"
    "print('\\x1b[31mFAIL\\x1b[0m tests/test_html.py <b>not bold</b> & <script>x()</script>')\n"
    "print('\\x1b[38;5;208morange\\x1b[0m \\x1b[4munderlined\\x1b[24m plain "
    "\\x1b]0;title\\x07 \\x1b[2J')\n"
)


@dataclass
class Scenes:
    root: Path
    db: Path
    out: Path

    @property
    def runs(self) -> list[str]:
        return [FIRST, SECOND, IMPORTED]


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(data), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def write_experiment(folder: Path, gate: Path) -> Path:
    tasks = folder / "tasks"
    _write(folder / "agent.py", AGENT)
    _write(folder / "flip.txt", "0")
    _write(tasks / "agent.yaml", {
        "command": ["python3", str(folder / "agent.py"), str(gate)],
        "stream_format": "claude-code", "tags": ["agent"], "timeout": 120,
        "success_criteria": [{"type": "output_contains", "includes": ["1 passed"]}]})
    _write(tasks / "colours.yaml", {
        "command": ["python3", "-c", COLOURS], "tags": ["fast"],
        "success_criteria": [{"type": "exit_code", "equals": 0}]})
    _write(tasks / "flip.yaml", {
        "command": f"exit $(cat {folder / 'flip.txt'})", "tags": ["fast"],
        "success_criteria": [{"type": "exit_code", "equals": 0}]})
    _write(tasks / "fails.yaml", {
        "command": "echo 'AssertionError: add(2, 3) == 6' >&2; exit 1", "tags": ["fast"],
        "success_criteria": [{"type": "exit_code", "equals": 0}]})
    _write(tasks / "notes.yaml", {"command": "echo just notes", "tags": ["docs"]})
    experiment = folder / "experiment.yaml"
    _write(experiment, {
        "experiment_id": EXPERIMENT, "tasks": ["tasks/"], "max_parallel": 4,
        "variants": [{"variant_id": name, "model": model, "env": {"MODEL": model}}
                     for name, model in MODELS.items()]})
    return experiment


def write_old_run(folder: Path) -> Path:
    """An old harness's run folder (docs/import.md): three attempts, one of them ERROR."""
    run = folder / IMPORTED
    rows = []
    for task_id, status in (("add", "SUCCESS"), ("parse", "FAILURE"), ("deploy", "ERROR")):
        rows.append({"task_id": task_id, "variant_id": "default", "replicate_index": 0,
                     "status": status, "tags": ["legacy"]})
        _write(run / f"default/{task_id}/00/task.json", {
            "task_id": task_id, "task_description": f"do {task_id}", "variant_id": "default",
            "agent_type": "claude-code", "model_used": "claude-sonnet-4-5",
            "started_at": "2026-01-10T09:00:05", "completed_at": "2026-01-10T09:03:05",
            "duration_seconds": 180.0, "final_status": status,
            "weighted_score": 1.0 if status == "SUCCESS" else 0.0,
            "error_message": None if status == "SUCCESS" else f"{task_id} went wrong",
            "success_criteria_results": [
                {"criterion_type": "command_succeeds", "score": 1.0 if status == "SUCCESS"
                 else 0.0, "details": "pytest -q", "pass_threshold": 0.9}],
            "environment_info": {"cli_version": "1.0.9", "coder_eval": "0.9.1"},
            "iterations": [
                {"iteration": 1, "model_used": "claude-sonnet-4-5", "agent_output":
                 "I read the code.\nThen I ran the tests.",
                 "token_usage": {"uncached_input_tokens": 900, "output_tokens": 120,
                                 "cache_read_input_tokens": 3000, "total_cost_usd": 0.02}},
                {"iteration": 2, "model_used": "claude-haiku-4-5", "agent_output": "Done.",
                 "token_usage": {"uncached_input_tokens": 300, "output_tokens": 30,
                                 "total_cost_usd": 0.001}}],
            "agent_config": {"max_turns": 30, "allowed_tools": ["Bash", "Edit"]},
        })
    _write(run / "run.json", {"run_id": IMPORTED, "start_time": "2026-01-10T09:00:00",
                              "end_time": "2026-01-10T09:20:00", "max_parallel": 2,
                              "task_results": rows})
    return folder


def copy_ledger(source: Path, target: Path) -> None:
    """A consistent copy of a ledger another process wrote, its WAL included (SQLite's
    online backup, read-only on the source)."""
    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, \
            sqlite3.connect(target) as dst:
        src.backup(dst)


def _cli(args: list[str], env: Mapping[str, str], **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "evalledger.cli", *args], text=True,
                            env=dict(env), **kwargs)  # type: ignore[call-overload]


def _finished(process: subprocess.Popen[str], codes: tuple[int, ...]) -> None:
    out, err = process.communicate(timeout=PATIENCE * 8)
    assert process.returncode in codes, (process.args, process.returncode, out, err)


def _count_lines(db: Path, run_id: str, text: str) -> int:
    if not db.exists():
        return 0
    try:
        with Ledger(db, read_only=True) as ledger:
            # Lines as the ledger gives them back (a chunk of them: each one).
            return sum(text in row.payload
                       for row in ledger.rows(run_id, types=["task.output"]))
    except LedgerError:  # not made yet, or busy
        return 0


def _others_running(db: Path, run_id: str) -> int:
    """Tasks but the agents' that started and have not ended: a SIGINT now would give
    them a second attempt in the resume (the colours page showed its FAIL line twice
    when the interrupt caught it half way, on a machine running three suites)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM events s WHERE s.run_id = ? AND s.type = 'task.started' "
            "AND s.task_key NOT LIKE '%/agent/%' AND NOT EXISTS (SELECT 1 FROM events e "
            "WHERE e.run_id = s.run_id AND e.task_key = s.task_key AND e.seq > s.seq AND "
            "e.type IN ('task.completed', 'task.interrupted'))", [run_id]).fetchone()
        return int(n)


def build(root: Path, env: Mapping[str, str] | None = None) -> Scenes:
    """Make the ledger ``root/ledger.db`` (reports under ``root/runs``); ``env`` is the
    environment of every process (say, a ``PYTHONPATH`` naming the code to use)."""
    env = dict(os.environ if env is None else env)
    env["TMPDIR"] = str(root)  # the batches' sandboxes stay in this folder
    root.mkdir(parents=True, exist_ok=True)
    db, out = root / "ledger.db", root / "runs"
    gate = root / "agent.gate"
    experiment = write_experiment(root / "suite", gate)
    base = ["--ledger", str(db)]
    # The first run: its agent tasks stop half way; a real SIGINT interrupts the run.
    runner = _cli([*base, "run", "-e", str(experiment), "--run-id", FIRST, "--out", str(out)],
                  env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root)

    def while_running(state: Callable[[], bool]) -> Callable[[], bool]:
        """``state``, failing at once if the runner ended first."""

        def check() -> bool:
            assert runner.poll() is None, runner.communicate()
            return state()

        return check

    wait_until(while_running(lambda: _count_lines(db, FIRST, GATE_LINE) >= len(MODELS)),
               "the agent tasks to reach the gate", timeout=2 * PATIENCE, every=0.05)
    wait_until(while_running(lambda: not _others_running(db, FIRST)),
               "the fast tasks to end", timeout=2 * PATIENCE, every=0.05)
    runner.send_signal(signal.SIGINT)
    _finished(runner, (130,))
    gate.write_text("open", encoding="utf-8")
    _finished(_cli([*base, "resume", FIRST], env, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, cwd=root), (1,))
    # The second run: flip now fails (a regression).
    (root / "suite" / "flip.txt").write_text("1", encoding="utf-8")
    _finished(_cli([*base, "run", "-e", str(experiment), "--run-id", SECOND, "--out", str(out)],
                   env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root), (1,))
    # An old run imported last, although it started first.
    _finished(_cli([*base, "import", str(write_old_run(root / "old"))], env,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root), (0,))
    return Scenes(root, db, out)
