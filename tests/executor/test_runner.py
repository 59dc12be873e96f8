"""One task attempt end to end: real subprocesses, a real ledger, every final status.

Each test writes a small Python (or shell) command into ``tmp_path``, runs it through
``run_batch`` and checks both what ``run_batch`` returned and what the ledger holds:
the ``task.completed`` payload (status, category, exit code, criteria, score, error
message, tokens, cost) and the stream of ``task.output`` / ``task.event`` /
``task.usage`` events in between. Process tests also check, through ``/proc``, that
nothing the command started outlives the task (a zombie counts as dead: it is only
waiting for whichever process it was reparented to).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from evalledger.executor import (
    MAX_LINE,
    BatchConfig,
    Callbacks,
    _criteria,
    _runner,
    _sandbox,
    run_batch,
)
from evalledger.executor import isolation as _isolation
from evalledger.executor._process import release_pipes
from evalledger.ledger import (
    Ledger,
    TaskCompleted,
    TaskEmitted,
    TaskOutput,
    TaskOutputTruncated,
    TaskUsage,
    TokenCounts,
    verify,
)
from evalledger.options import RunOptions
from evalledger.pricing import DEFAULT_RATES
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import Category, FinalStatus, RunStatus
from evalledger.suite import ResolvedTask
from tests.agents.transcripts.claude_code import MODEL, RESULT, TRANSCRIPT, assistant
from tests.needs import root as needs_root
from tests.needs import unavailable
from tests.processes import wait_gone

from .attempts import (
    NEVER,
    PY,
    QUICK,
    RUN_ID,
    completed,
    lines,
    make_task,
    run,
    script,
    task_events,
)
from .batches import config as config_of
from .batches import run as run_batches

# -- helpers -------------------------------------------------------------------------------


def price(model: str, **tokens: int) -> float | None:
    return DEFAULT_RATES.price(model, TokenCounts(**tokens))


def assert_bracketed(ledger: Ledger, task: ResolvedTask) -> None:
    """task.started first, task.completed last, n strictly increasing in between."""
    events = task_events(ledger, task)
    assert events[0].type == "task.started"
    assert events[-1].type == "task.completed"
    assert [e.type for e in events].count("task.completed") == 1
    ns = [e.n for e in events if isinstance(e, TaskOutput | TaskEmitted)]
    assert ns == list(range(1, len(ns) + 1))


@pytest.fixture
def late_hunt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hunt down escaped processes only after NEVER seconds of held pipes, not after
    ``ESCAPE_GRACE``: a task that still ends within QUICK had its pipes released by
    the kill of its process group alone."""
    late = functools.partial(release_pipes, grace=NEVER)
    monkeypatch.setattr(_runner, "release_pipes", late)
    monkeypatch.setattr(_criteria, "release_pipes", late)


def read_pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


def artifacts(tmp_path: Path, task: ResolvedTask) -> Path:
    return tmp_path / "out" / RUN_ID / "artifacts" / task.task_key


# -- success -------------------------------------------------------------------------------

SUCCESS_SCRIPT = """
import json, os, sys
from pathlib import Path

stdin = sys.stdin.read()
Path("result.txt").write_text("hello world")
Path("seen.json").write_text(json.dumps({
    "stdin": stdin,
    "prompt": os.environ["EVALLEDGER_PROMPT"],
    "task_key": os.environ["EVALLEDGER_TASK_KEY"],
    "run_id": os.environ["EVALLEDGER_RUN_ID"],
    "sandbox": os.environ["EVALLEDGER_SANDBOX"],
    "mode": os.environ.get("MODE"),
    "cwd": os.getcwd(),
}))
for i in range(1, 4):
    print(f"line {i}", flush=True)
print("done")
"""

CHECK_RESULT = (
    "import pathlib, sys; sys.exit(pathlib.Path('result.txt').read_text() != 'hello world')"
)


def test_success_all_criteria_pass(ledger: Ledger, tmp_path: Path) -> None:
    prompt = "Create add.py\nthat adds two numbers ✓\n"
    task = make_task(
        "ok",
        script(tmp_path, "ok", SUCCESS_SCRIPT),
        criteria=[
            {"type": "exit_code", "equals": 0},
            {"type": "file_exists", "path": "result.txt"},
            {"type": "file_contains", "path": "result.txt", "includes": ["hello"],
             "excludes": ["goodbye"]},
            {"type": "output_contains", "includes": ["done", "line 2"]},
            {"type": "run_command", "command": [PY, "-c", CHECK_RESULT], "weight": 2},
        ],
        prompt=prompt,
        env={"MODE": "fast"},
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)

    assert result.status == RunStatus.COMPLETED
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.category == Category.SUCCEEDED
    assert done.exit_code == 0
    assert done.error_message is None
    assert [(c.type, c.passed, c.weight) for c in done.criteria] == [
        ("exit_code", True, 1.0),
        ("file_exists", True, 1.0),
        ("file_contains", True, 1.0),
        ("output_contains", True, 1.0),
        ("run_command", True, 2.0),
    ]
    assert done.weighted_score == 1.0
    assert done.environment_info["exit_code"] == 0
    assert done.tokens.total == 0
    assert done.cost_usd == 0.0 and done.cost_complete

    outputs = task_events(ledger, task, "task.output")
    assert [(e.line, e.n, e.stream, e.truncated) for e in outputs] == [
        ("line 1", 1, "stdout", False),
        ("line 2", 2, "stdout", False),
        ("line 3", 3, "stdout", False),
        ("done", 4, "stdout", False),
    ]
    assert_bracketed(ledger, task)
    [started] = task_events(ledger, task, "task.started")
    assert started.task_id == "ok" and started.attempt == 1
    assert started.definition_hash == task.definition_hash

    kept = artifacts(tmp_path, task)
    seen = json.loads((kept / "seen.json").read_text())
    assert seen["stdin"] == prompt
    assert seen["prompt"] == prompt
    assert seen["task_key"] == "default/ok/00"
    assert seen["run_id"] == RUN_ID
    assert seen["mode"] == "fast"
    assert Path(seen["sandbox"]).resolve() == Path(seen["cwd"]).resolve()
    # move-on-write: the command ran in a temporary folder, never in the output folder
    assert not Path(seen["sandbox"]).resolve().is_relative_to(tmp_path.resolve())
    assert not Path(seen["sandbox"]).exists()
    assert (kept / "result.txt").read_text() == "hello world"


def test_no_prompt_means_empty_stdin_and_prompt(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import os, sys
    print(repr(sys.stdin.read()), repr(os.environ["EVALLEDGER_PROMPT"]))
    """
    task = make_task("noprompt", script(tmp_path, "noprompt", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    assert lines(ledger, task) == ["'' ''"]


def test_large_prompt_not_read_by_the_command(ledger: Ledger, tmp_path: Path) -> None:
    """A prompt bigger than a pipe buffer (64 KiB) that the command ignores does not hang."""
    task = make_task("ignores", [PY, "-c", "print('ignored')"], prompt="x" * 100_000,
                     timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.duration_seconds < QUICK


def test_large_prompt_read_from_stdin(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import hashlib, os, sys
    data = sys.stdin.buffer.read()
    print(len(data), hashlib.sha256(data).hexdigest())
    print(os.environ["EVALLEDGER_PROMPT"] == data.decode())
    """
    prompt = "é" * 60_000  # 120,000 bytes
    task = make_task("bigprompt", script(tmp_path, "bigprompt", body), prompt=prompt, timeout=NEVER)
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    assert lines(ledger, task) == [f"120000 {digest}", "True"]


def test_prompt_over_128_kib(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import sys
    print(len(sys.stdin.read()))
    """
    task = make_task("hugeprompt", script(tmp_path, "hugeprompt", body), prompt="x" * 200_000,
                     timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert lines(ledger, task) == ["200000"]


def test_string_command_runs_through_sh(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task(
        "shell",
        'echo "$GREETING from $0"; echo oops >&2; test -n "$EVALLEDGER_SANDBOX"',
        env={"GREETING": "hi there"},
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    assert lines(ledger, task) == ["hi there from /bin/sh"]
    assert lines(ledger, task, "stderr") == ["oops"]


def test_workdir_is_copied_into_the_sandbox(ledger: Ledger, tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    (fixture / "pkg").mkdir(parents=True)
    (fixture / "pkg" / "data.txt").write_text("original")
    body = """
    from pathlib import Path
    p = Path("pkg/data.txt")
    print(p.read_text())
    p.write_text("changed by the agent")
    """
    task = make_task(
        "copy",
        script(tmp_path, "copy", body),
        criteria=[{"type": "file_contains", "path": "pkg/data.txt", "includes": ["changed"]}],
        workdir=str(fixture),
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    assert lines(ledger, task) == ["original"]
    assert (fixture / "pkg" / "data.txt").read_text() == "original"  # the source is untouched
    assert (artifacts(tmp_path, task) / "pkg" / "data.txt").read_text() == "changed by the agent"


# -- failing criteria ----------------------------------------------------------------------


def test_failing_criterion_gives_failure_and_weighted_score(
    ledger: Ledger, tmp_path: Path
) -> None:
    body = """
    from pathlib import Path
    Path("present.txt").write_text("alpha beta")
    print("finished")
    """
    task = make_task(
        "partial",
        script(tmp_path, "partial", body),
        criteria=[
            {"type": "exit_code", "equals": 0, "weight": 1},
            {"type": "file_exists", "path": "missing.txt", "weight": 2},
            {"type": "file_contains", "path": "present.txt", "includes": ["alpha"], "weight": 3},
            {"type": "output_contains", "includes": ["finished"], "excludes": ["Traceback"],
             "weight": 0.5},
        ],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    assert done.category == Category.FAILED
    assert done.exit_code == 0
    assert [c.passed for c in done.criteria] == [True, False, True, True]
    assert done.weighted_score == pytest.approx(4.5 / 6.5)
    assert done.error_message is not None
    assert "file_exists" in done.error_message
    assert "missing.txt does not exist" in done.error_message
    # only the failed criterion is named
    assert "file_contains" not in done.error_message
    assert "exit_code" not in done.error_message
    assert_bracketed(ledger, task)


def test_every_criterion_is_evaluated_and_details_explain(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import sys
    print("to stdout")
    print("to stderr", file=sys.stderr)
    sys.exit(3)
    """
    task = make_task(
        "allfail",
        script(tmp_path, "allfail", body),
        criteria=[
            {"type": "exit_code", "equals": 0},
            {"type": "output_contains", "includes": ["to stderr"], "stream": "stdout"},
            {"type": "output_contains", "includes": ["to stderr"], "stream": "stderr"},
            {"type": "output_contains", "excludes": ["to stdout"]},
            {"type": "run_command", "command": "echo boom >&2; exit 4"},
            {"type": "run_command", "command": "exit 4", "expect_exit_code": 4},
        ],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    assert done.exit_code == 3
    assert [c.passed for c in done.criteria] == [False, False, True, False, False, True]
    details = [c.detail for c in done.criteria]
    assert details[0] == "exit code 3, expected 0"
    assert "lacks ['to stderr']" in details[1]
    assert "contains excluded ['to stdout']" in details[3]
    assert details[4].startswith("exit code 4") and "boom" in details[4]
    assert done.weighted_score == pytest.approx(2 / 6)
    assert done.error_message is not None
    assert done.error_message.count("output_contains") == 2
    assert "run_command" in done.error_message


def test_run_command_criterion_timeout(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task(
        "slowcheck",
        [PY, "-c", "pass"],
        criteria=[
            {"type": "exit_code"},
            {"type": "run_command", "command": [PY, "-c", "import time; time.sleep(60)"],
             "timeout": 0.5},
        ],
        timeout=NEVER,
    )
    started = time.monotonic()
    result = run(ledger, tmp_path, task)
    assert time.monotonic() - started < NEVER  # the check's 60 s sleep was cut short
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    assert done.criteria[1].passed is False
    assert "timed out" in done.criteria[1].detail
    assert "timed out after 0.5s" in (done.error_message or "")
    assert done.weighted_score == 0.5


def test_run_command_criterion_that_cannot_start(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task(
        "badcheck",
        [PY, "-c", "pass"],
        criteria=[{"type": "run_command", "command": [str(tmp_path / "no-such-checker")]}],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    assert "cannot run" in done.criteria[0].detail
    assert "no-such-checker" in done.criteria[0].detail


def test_run_command_criterion_sees_the_task_environment(ledger: Ledger, tmp_path: Path) -> None:
    check = (
        "import os, sys; sys.exit(not (os.environ['MODE'] == 'strict' and "
        "os.path.samefile(os.environ['EVALLEDGER_SANDBOX'], os.getcwd())))"
    )
    task = make_task(
        "envcheck",
        [PY, "-c", "pass"],
        criteria=[{"type": "run_command", "command": [PY, "-c", check]}],
        env={"MODE": "strict"},
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS


def test_run_command_criterion_with_background_child(
    ledger: Ledger, tmp_path: Path, late_hunt: None
) -> None:
    task = make_task(
        "bgcheck",
        [PY, "-c", "pass"],
        criteria=[{"type": "run_command", "command": "sleep 60 & exit 0", "timeout": NEVER}],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.criteria[0].detail == "exit code 0"
    assert done.final_status == FinalStatus.SUCCESS
    assert done.duration_seconds < QUICK  # the group kill ended the check's background job


# -- timeouts and process groups -----------------------------------------------------------

SPAWNER = """
import os, subprocess, sys, time
from pathlib import Path
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
print("started", flush=True)
time.sleep(60)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_timeout_kills_the_command_and_its_children(ledger: Ledger, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    # 2 s: time enough for two interpreters to start on a loaded machine.
    task = make_task("slow", script(tmp_path, "slow", SPAWNER, str(pid_file)), timeout=2)
    started = time.monotonic()
    result = run(ledger, tmp_path, task)
    elapsed = time.monotonic() - started

    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert done.category == Category.FAILED
    assert done.exit_code == -signal.SIGTERM
    assert done.error_message == "timed out after 2s"
    assert [c.passed for c in done.criteria] == [False]  # criteria are still evaluated
    assert done.weighted_score == 0.0
    assert 2 <= done.duration_seconds < QUICK  # not the command's 60 s sleep
    assert elapsed < NEVER
    assert lines(ledger, task) == ["started"]
    assert_bracketed(ledger, task)

    leader, child = read_pids(pid_file)
    assert wait_gone(leader, NEVER)
    assert wait_gone(child, NEVER), "the command's child outlived the task"


def test_timeout_of_a_shell_command_with_background_jobs(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task(
        "shslow",
        'sleep 30 & echo $! > "$PIDS/bg"; echo $$ > "$PIDS/sh"; echo waiting; sleep 30',
        env={"PIDS": str(tmp_path)},
        timeout=1,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert done.exit_code is not None and done.exit_code < 0
    assert lines(ledger, task) == ["waiting"]
    for name in ("sh", "bg"):
        [pid] = read_pids(tmp_path / name)
        assert wait_gone(pid, NEVER), f"{name} ({pid}) outlived the task"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_timeout_when_sigterm_is_ignored(ledger: Ledger, tmp_path: Path) -> None:
    # A shell: it ignores SIGTERM (and so does its sleep) a millisecond after it starts,
    # long before the timeout, however loaded the machine.
    task = make_task("stubborn", "trap '' TERM; echo stubborn; sleep 60", timeout=1)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert done.exit_code == -signal.SIGKILL
    assert lines(ledger, task) == ["stubborn"]
    # SIGKILL came once the timeout (1 s) and then the kill grace (0.5 s) had passed,
    # not after the command's 60 s sleep.
    assert 1 + 0.5 <= done.duration_seconds < QUICK


def test_exit_with_a_background_child_holding_stdout(
    ledger: Ledger, tmp_path: Path, late_hunt: None
) -> None:
    """The leader exits 0; its child keeps the pipes open: the task still ends at once."""
    body = """
    import os, subprocess, sys
    from pathlib import Path
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
    print("parent done", flush=True)
    """
    pid_file = tmp_path / "pids"
    task = make_task("orphan", script(tmp_path, "orphan", body, str(pid_file)), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.exit_code == 0
    assert done.duration_seconds < QUICK
    assert lines(ledger, task) == ["parent done"]
    leader, child = read_pids(pid_file)
    assert wait_gone(leader, NEVER)
    assert wait_gone(child, NEVER), "the background child was left running"


def test_shell_background_job_after_exit(
    ledger: Ledger, tmp_path: Path, late_hunt: None
) -> None:
    task = make_task(
        "shorphan",
        'sleep 60 & echo $! > "$PIDS/bg"; echo bye',
        env={"PIDS": str(tmp_path)},
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.duration_seconds < QUICK
    [bg] = read_pids(tmp_path / "bg")
    assert wait_gone(bg, NEVER)


# -- BUILD_FAILED and ERROR ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_build_failed_for_a_bad_workdir(ledger: Ledger, tmp_path: Path, kind: str) -> None:
    workdir = tmp_path / "fixtures" / "add"
    if kind == "file":
        workdir.parent.mkdir()
        workdir.write_text("not a folder")
    marker = tmp_path / "ran"
    task = make_task("build", ["touch", str(marker)], workdir=str(workdir), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.BUILD_FAILED
    assert done.category == Category.ERROR
    assert done.exit_code is None
    assert done.criteria == []
    assert done.weighted_score == 0.0
    assert done.error_message == f"workdir {workdir} is not a folder"
    assert not marker.exists()  # the command never ran
    assert [e.type for e in task_events(ledger, task)] == ["task.started", "task.completed"]
    assert result.status == RunStatus.COMPLETED


def test_error_when_the_executable_does_not_exist(ledger: Ledger, tmp_path: Path) -> None:
    bogus = str(tmp_path / "bin" / "no-such-agent")
    broken = make_task("broken", [bogus, "--flag"], timeout=NEVER)
    fine = [make_task(f"fine{i}", [PY, "-c", f"print({i})"], timeout=NEVER) for i in range(3)]
    result = run(ledger, tmp_path, broken, *fine, max_parallel=2)

    assert result.status == RunStatus.COMPLETED
    done = completed(result, ledger, broken)
    assert done.final_status == FinalStatus.ERROR
    assert done.category == Category.ERROR
    assert done.exit_code is None
    assert done.criteria == []
    assert done.error_message is not None
    assert done.error_message.startswith("FileNotFoundError:")
    assert bogus in done.error_message
    for i, task in enumerate(fine):
        assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
        assert lines(ledger, task) == [str(i)]
    assert len(result.completed) == 4
    [finished] = ledger.events(RUN_ID, types={"run.finished"})
    assert finished.status == RunStatus.COMPLETED


def test_shell_command_not_found_is_a_failure(ledger: Ledger, tmp_path: Path) -> None:
    """Through /bin/sh a missing program is the command's own exit code 127, not ERROR."""
    task = make_task("nocmd", "no-such-program-evalledger-test", timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    assert done.exit_code == 127
    assert any("not found" in line for line in lines(ledger, task, "stderr"))


# -- budgets -------------------------------------------------------------------------------

USAGE_SCRIPT = """
import json, os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(str(os.getpid()))
line = json.loads(sys.argv[2])
for _ in range(int(sys.argv[3])):
    print(json.dumps(line), flush=True)
    time.sleep(0.01)
time.sleep(60)  # past the timeout: only the budget stops it early
"""


def usage_task(tmp_path: Path, name: str, line: dict[str, Any], count: int,
               **fields: Any) -> tuple[ResolvedTask, Path]:
    pid_file = tmp_path / f"{name}.pid"
    argv = script(tmp_path, name, USAGE_SCRIPT, str(pid_file), json.dumps(line), str(count))
    return make_task(name, argv, timeout=NEVER, **fields), pid_file


def check_usage_matches(ledger: Ledger, task: ResolvedTask, done: TaskCompleted) -> list[TaskUsage]:
    usages = [e for e in task_events(ledger, task, "task.usage") if isinstance(e, TaskUsage)]
    for kind in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert getattr(done.tokens, kind) == sum(getattr(u, kind) for u in usages)
    return usages


def test_token_budget_exceeded_stops_the_command(ledger: Ledger, tmp_path: Path) -> None:
    line = {"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 400,
            "output_tokens": 100}
    task, pid_file = usage_task(tmp_path, "tokens", line, 8, budget={"max_tokens": 2000})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)

    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED
    assert done.category == Category.FAILED
    assert done.duration_seconds < QUICK  # well before the timeout, let alone the sleep
    assert done.exit_code == -signal.SIGTERM
    assert done.tokens.total > 2000
    assert done.error_message == f"used {done.tokens.total} tokens, budget 2000"
    usages = check_usage_matches(ledger, task, done)
    assert len(usages) == 5  # the 5th line passes 2000; nothing after it is recorded
    assert all(u.model == "claude-sonnet-4-5" for u in usages)
    per_line = price("claude-sonnet-4-5", input_tokens=400, output_tokens=100)
    assert all(u.cost_usd == pytest.approx(per_line) for u in usages)
    assert done.cost_usd == pytest.approx(per_line * len(usages))
    assert done.cost_complete
    # each usage line is also kept as a task.event, whole
    emitted = [e.data for e in task_events(ledger, task, "task.event")]
    assert emitted and all(d == line for d in emitted)
    assert_bracketed(ledger, task)
    assert wait_gone(int(pid_file.read_text()), NEVER)


def test_a_budget_passed_mid_read_records_nothing_after_its_line(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression (the test above failed 1 run in 3 on a loaded machine): lines that
    came in the same read as the one passing the budget were recorded too, so the
    tokens recorded (4,000) were not the ones the error stated (2,500). Here all eight
    lines come in one write, so in one read, every time."""
    body = """
    import json, sys, time
    line = json.dumps({"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 400,
                       "output_tokens": 100})
    sys.stdout.write((line + "\\n") * 8 + "after\\n")  # one write: well under PIPE_BUF
    sys.stdout.flush()
    time.sleep(60)
    """
    task = make_task("batched", script(tmp_path, "batched", body), timeout=NEVER,
                     budget={"max_tokens": 2000})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED
    assert done.tokens.total == 2500
    assert done.error_message == "used 2500 tokens, budget 2000"
    assert len(check_usage_matches(ledger, task, done)) == 5
    assert len(task_events(ledger, task, "task.event")) == 5
    assert lines(ledger, task) == []  # "after" came after the budget was passed


def test_tokens_exactly_at_budget_are_not_exceeded(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import json
    for _ in range(4):
        print(json.dumps({"type": "usage", "model": "claude-sonnet-4-5",
                          "input_tokens": 250, "output_tokens": 250}))
    """
    task = make_task("atbudget", script(tmp_path, "atbudget", body), timeout=NEVER,
                     budget={"max_tokens": 2000})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.tokens.total == 2000


def test_cost_budget_exceeded_priced_from_rate_card(ledger: Ledger, tmp_path: Path) -> None:
    # no cost_usd: 100k input tokens of claude-sonnet-4-5 at $3/M = $0.30 a line
    line = {"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 100_000}
    task, pid_file = usage_task(tmp_path, "cost", line, 6, budget={"max_cost_usd": 0.5})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)

    assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
    assert done.category == Category.FAILED
    assert done.duration_seconds < QUICK
    usages = check_usage_matches(ledger, task, done)
    assert len(usages) >= 2
    assert all(u.cost_usd == pytest.approx(0.30) for u in usages)
    assert done.cost_usd == pytest.approx(0.30 * len(usages))
    assert done.cost_complete
    assert done.tokens.input_tokens == 100_000 * len(usages)
    assert done.error_message == f"spent ${0.30 * len(usages):.4f}, budget $0.5000"
    assert wait_gone(int(pid_file.read_text()), NEVER)


def test_cost_budget_with_reported_costs(ledger: Ledger, tmp_path: Path) -> None:
    """A reported cost_usd is used as is, whatever the model (even an unpriced one)."""
    line = {"type": "usage", "model": "in-house-model", "input_tokens": 10, "cost_usd": 0.2}
    task, _ = usage_task(tmp_path, "reported", line, 6, budget={"max_cost_usd": 0.5})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
    usages = check_usage_matches(ledger, task, done)
    assert len(usages) >= 3
    assert all(u.cost_usd == 0.2 and u.model == "in-house-model" for u in usages)
    assert done.cost_usd == pytest.approx(0.2 * len(usages))
    assert done.cost_complete


def test_unknown_model_is_unpriced_never_zero(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import json
    print(json.dumps({"type": "usage", "model": "mystery-model-9", "input_tokens": 1000,
                      "output_tokens": 50, "cache_read_tokens": 7}))
    print(json.dumps({"type": "usage", "input_tokens": 5}))
    """
    task = make_task("unpriced", script(tmp_path, "unpriced", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    usages = check_usage_matches(ledger, task, done)
    assert [(u.model, u.cost_usd) for u in usages] == [("mystery-model-9", None), (None, None)]
    assert done.tokens.model_dump() == {
        "input_tokens": 1005, "output_tokens": 50, "cache_read_tokens": 7,
        "cache_write_tokens": 0,
    }
    assert done.cost_usd is None
    assert done.cost_complete is False


def test_task_model_prices_lines_without_a_model(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import json
    print(json.dumps({"type": "usage", "input_tokens": 1_000_000}))
    print(json.dumps({"type": "usage", "model": "openai/gpt-4o-2024-08-06",
                      "output_tokens": 1_000_000}))
    """
    task = make_task("taskmodel", script(tmp_path, "taskmodel", body), timeout=NEVER,
                     model="claude-haiku-4-5")
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    usages = check_usage_matches(ledger, task, done)
    assert [(u.model, u.cost_usd) for u in usages] == [
        ("claude-haiku-4-5", pytest.approx(1.0)),
        ("openai/gpt-4o-2024-08-06", pytest.approx(10.0)),
    ]
    assert done.cost_usd == pytest.approx(11.0)
    assert done.cost_complete


# -- claude-code stream-json ---------------------------------------------------------------

# Replays a transcript one line (one write) at a time, as claude does; then exits or
# hangs. A shell: it is printing a millisecond after it starts, so a timeout of a
# second is never reached before the transcript is out, however loaded the machine.
REPLAY = "while IFS= read -r line; do printf '%s\\n' \"$line\"; done < {data}{then}"


def claude_task(tmp_path: Path, name: str, transcript: list[dict[str, Any]], then: str,
                **fields: Any) -> ResolvedTask:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in transcript))
    command = REPLAY.format(data=shlex.quote(str(data)),
                            then={"hang": "; sleep 60", "exit": ""}[then])
    return make_task(name, command, stream_format="claude-code", **fields)


def test_claude_code_result_line_gives_the_totals(ledger: Ledger, tmp_path: Path) -> None:
    task = claude_task(tmp_path, "claude", [*TRANSCRIPT, RESULT], "exit", timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.tokens.model_dump() == {
        "input_tokens": 10, "output_tokens": 160, "cache_read_tokens": 29000,
        "cache_write_tokens": 5300,
    }
    assert done.cost_usd == 0.0123
    assert done.cost_complete
    [usage] = task_events(ledger, task, "task.usage")
    assert isinstance(usage, TaskUsage)
    assert usage.cost_usd == 0.0123
    assert usage.model == MODEL
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
            usage.cache_write_tokens) == (10, 160, 29000, 5300)
    # every line is a task.event, kept whole (nested content included)
    emitted = [e.data for e in task_events(ledger, task, "task.event")]
    assert emitted == [*TRANSCRIPT, RESULT]
    assert task_events(ledger, task, "task.output") == []
    assert_bracketed(ledger, task)
    # task.usage is recorded right after the result line's task.event
    kinds = [e.type for e in task_events(ledger, task)]
    assert kinds[-3:] == ["task.event", "task.usage", "task.completed"]


def _estimate() -> dict[str, int]:
    # last report per message id: msg_01's second block, msg_02
    return {"input_tokens": 4 + 6, "output_tokens": 120 + 40,
            "cache_read_tokens": 12000 + 17000, "cache_write_tokens": 5000 + 300}


def test_claude_code_without_result_records_the_estimate(ledger: Ledger, tmp_path: Path) -> None:
    task = claude_task(tmp_path, "cutoff", TRANSCRIPT, "hang", timeout=1)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    [usage] = task_events(ledger, task, "task.usage")
    assert isinstance(usage, TaskUsage)
    expected = _estimate()
    assert {k: getattr(usage, k) for k in expected} == expected
    assert done.tokens.model_dump() == expected
    assert usage.cost_usd == pytest.approx(price(MODEL, **expected))
    # The priced part of what the stream showed; a floor: a cut-off message is not in it.
    assert done.cost_usd == pytest.approx(price(MODEL, **expected))
    assert done.cost_complete is False


def test_claude_code_token_budget_uses_the_running_estimate(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: budgets were only checked on the result line (assistant messages
    update the running estimate but never triggered the check)."""
    # msg_01 brings the estimate to 17,124 tokens, msg_02 to 34,470: past 20,000
    task = claude_task(tmp_path, "ccbudget", TRANSCRIPT, "hang", timeout=NEVER,
                       budget={"max_tokens": 20_000})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED, done.error_message
    assert done.duration_seconds < QUICK
    usages = task_events(ledger, task, "task.usage")
    assert len(usages) == 1
    assert done.tokens.total == 34_470
    check_usage_matches(ledger, task, done)


def test_claude_code_budget_checked_on_the_final_estimate(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: the estimate recorded at the end (finish()) was not checked."""
    task = claude_task(tmp_path, "ccfinal", TRANSCRIPT, "exit", timeout=NEVER,
                       budget={"max_tokens": 20_000})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.tokens.total == 34_470
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED


def test_claude_code_result_over_budget(ledger: Ledger, tmp_path: Path) -> None:
    # the running estimate peaks at $0.0310: under budget until the result line
    expensive = {**RESULT, "total_cost_usd": 0.0623}
    task = claude_task(tmp_path, "ccresult", [*TRANSCRIPT, expensive], "exit", timeout=NEVER,
                       budget={"max_cost_usd": 0.05})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
    assert done.cost_usd == 0.0623
    assert done.error_message == "spent $0.0623, budget $0.0500"


# Claude Code 2.x also uses a small model (here a subagent's messages, under the main
# model's tool call); its result line reports each model in `modelUsage`.
HAIKU = "claude-haiku-4-5-20251001"
TWO_MODELS: list[dict[str, Any]] = [
    *TRANSCRIPT[:4],
    assistant("msg_h1", [{"type": "text", "text": "Looking at the files."}],
               {"input_tokens": 1500, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 10}, model=HAIKU,
               parent="toolu_01"),
    assistant("msg_h1", [{"type": "tool_use", "id": "toolu_h1", "name": "Read",
                           "input": {"file_path": "add.py"}}],
               {"input_tokens": 1500, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 75}, model=HAIKU,
               parent="toolu_01"),
    TRANSCRIPT[4],
]
# Costs as a real CLI printed them: the float sum of the two is 0.013645000000000001,
# one rounding step off total_cost_usd.
MODEL_USAGE = {
    MODEL: {"inputTokens": 10, "outputTokens": 160, "cacheReadInputTokens": 29000,
            "cacheCreationInputTokens": 5300, "webSearchRequests": 0, "costUSD": 0.01161,
            "contextWindow": 200000},
    HAIKU: {"inputTokens": 1500, "outputTokens": 75, "cacheReadInputTokens": 0,
            "cacheCreationInputTokens": 0, "webSearchRequests": 0,
            "costUSD": 0.0020350000000000004, "contextWindow": 200000},
}
RESULT_2X = {**RESULT, "total_cost_usd": 0.013645, "modelUsage": MODEL_USAGE}


def _estimates() -> dict[str, dict[str, int]]:
    """TWO_MODELS' messages summed per model, the last report per message id."""
    return {MODEL: _estimate(),
            HAIKU: {"input_tokens": 1500, "output_tokens": 75, "cache_read_tokens": 0,
                    "cache_write_tokens": 0}}


def _by_model(ledger: Ledger, task: ResolvedTask) -> dict[str | None, TaskUsage]:
    usages = [u for u in task_events(ledger, task, "task.usage") if isinstance(u, TaskUsage)]
    by_model = {u.model: u for u in usages}
    assert len(by_model) == len(usages), "one usage per model"
    return by_model


def _check_estimates(ledger: Ledger, task: ResolvedTask, done: TaskCompleted) -> None:
    by_model = _by_model(ledger, task)
    expected = _estimates()
    assert set(by_model) == set(expected)
    for model, tokens in expected.items():
        usage = by_model[model]
        assert usage.estimate
        assert {k: getattr(usage, k) for k in tokens} == tokens
        assert usage.cost_usd == pytest.approx(price(model, **tokens))
    check_usage_matches(ledger, task, done)
    assert done.cost_usd == pytest.approx(sum(price(m, **t) or 0.0 for m, t in expected.items()))
    assert done.cost_complete is False  # a floor


def test_claude_code_timeout_records_the_estimate_of_each_model(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: the estimate was one usage, all tokens priced as the last message's
    model (the small one's tokens at the main model's price)."""
    task = claude_task(tmp_path, "cut2", TWO_MODELS, "hang", timeout=1)
    done = completed(run(ledger, tmp_path, task), ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    _check_estimates(ledger, task, done)


def test_claude_code_budget_stop_records_the_estimate_of_each_model(
    ledger: Ledger, tmp_path: Path
) -> None:
    # the estimate passes 35,000 tokens with msg_02, the last message
    task = claude_task(tmp_path, "budget2", TWO_MODELS, "hang", timeout=NEVER,
                       budget={"max_tokens": 35_000})
    done = completed(run(ledger, tmp_path, task), ledger, task)
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED, done.error_message
    assert done.duration_seconds < QUICK
    _check_estimates(ledger, task, done)
    assert done.error_message == f"used {done.tokens.total} tokens, budget 35000"


def test_claude_code_model_usage_books_each_model_at_its_own_cost(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: the result line's totals and whole total_cost_usd were booked to the
    main model; the small model never appeared in models or usage_by_model."""
    task = claude_task(tmp_path, "twomodels", [*TWO_MODELS, RESULT_2X], "exit",
                       timeout=NEVER)
    done = completed(run(ledger, tmp_path, task), ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    by_model = _by_model(ledger, task)
    assert set(by_model) == {MODEL, HAIKU}
    for model, reported in MODEL_USAGE.items():
        usage = by_model[model]
        assert not usage.estimate
        assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
                usage.cache_write_tokens) == (
            reported["inputTokens"], reported["outputTokens"],
            reported["cacheReadInputTokens"], reported["cacheCreationInputTokens"])
        assert usage.cost_usd == pytest.approx(reported["costUSD"], abs=1e-9)
    total = RESULT_2X["total_cost_usd"]
    assert sum(u.cost_usd or 0.0 for u in by_model.values()) == pytest.approx(total, abs=1e-12)
    assert done.cost_usd == pytest.approx(total, abs=1e-12) and done.cost_complete
    check_usage_matches(ledger, task, done)
    assert done.environment_info["model"] == f"{HAIKU}, {MODEL}"
    # What the reports and the SQL view say, from the same events.
    summary = fold(SummaryFold(RUN_ID), ledger.events(RUN_ID)).summary()
    assert summary.models == [HAIKU, MODEL]
    assert {m.model: (m.tokens.total, pytest.approx(m.cost_usd, abs=1e-12))
            for m in summary.usage_by_model} == {
        model: (u.tokens.total, u.cost_usd) for model, u in by_model.items()}
    assert summary.total_cost_usd == pytest.approx(total, abs=1e-12)
    rows = ledger.query("SELECT model, sum(cost_usd), sum(output_tokens) FROM usage "
                        "WHERE run_id = :run GROUP BY model ORDER BY model", {"run": RUN_ID})[1]
    assert [(m, t) for m, _, t in rows] == [(HAIKU, 75), (MODEL, 160)]
    assert sum(c for _, c, _ in rows) == pytest.approx(total, abs=1e-12)


# -- lines ---------------------------------------------------------------------------------


def test_over_long_line_is_cut_and_the_next_line_kept(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import sys
    sys.stdout.buffer.write(b"x" * 200_000 + b"\\nafter\\n")
    big = b'{"a": "' + b"y" * 70_000 + b'"}'
    sys.stdout.buffer.write(big + b"\\n" + b"z" * MAX + b"\\n")
    """.replace("MAX", str(MAX_LINE))
    task = make_task("long", script(tmp_path, "long", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    outputs = [e for e in task_events(ledger, task, "task.output") if isinstance(e, TaskOutput)]
    assert [(len(e.line.encode()), e.truncated, e.n) for e in outputs] == [
        (65_536, True, 1),
        (5, False, 2),
        (65_536, True, 3),  # an over-long JSON object line is cut and not parsed
        (65_536, False, 4),  # exactly MAX_LINE bytes is not over the limit
    ]
    assert outputs[0].line == "x" * 65_536
    assert outputs[1].line == "after"
    assert outputs[2].line.startswith('{"a": "yyy')
    assert task_events(ledger, task, "task.event") == []


def test_invalid_utf8_is_replaced(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import sys
    sys.stdout.buffer.write(b"caf\\xe9 ok\\n\\xff\\xfe\\n\\xe2\\x82\\n")
    sys.stderr.buffer.write(b"bad \\xc3\\n")
    sys.stdout.buffer.write("fine ✓\\r\\n".encode())
    """
    task = make_task("binary", script(tmp_path, "binary", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS
    assert done.error_message is None
    assert lines(ledger, task) == ["caf\ufffd ok", "\ufffd\ufffd", "\ufffd", "fine ✓"]
    assert lines(ledger, task, "stderr") == ["bad \ufffd"]


def test_stderr_lines_are_recorded_as_stderr(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import sys
    print("warn 1", file=sys.stderr, flush=True)
    print('{"json": "on stderr"}', file=sys.stderr, flush=True)
    print("warn 2", file=sys.stderr, flush=True)
    """
    task = make_task(
        "stderr",
        script(tmp_path, "stderr", body),
        criteria=[{"type": "output_contains", "includes": ["warn 2"], "stream": "stderr"}],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    outputs = [e for e in task_events(ledger, task, "task.output") if isinstance(e, TaskOutput)]
    assert [(e.stream, e.line, e.n) for e in outputs] == [
        ("stderr", "warn 1", 1),
        ("stderr", '{"json": "on stderr"}', 2),  # only stdout JSON becomes task.event
        ("stderr", "warn 2", 3),
    ]
    assert task_events(ledger, task, "task.event") == []


def test_json_object_lines_become_events(ledger: Ledger, tmp_path: Path) -> None:
    nested = {"type": "step", "detail": {"nested": [1, {"deep": True, "none": None}]},
              "z": 1.5, "text": "é ✓"}
    body = f"""
    import json
    print(json.dumps({nested!r}))
    print("[1, 2, 3]")
    print("42")
    print('"just a string"')
    print("  {{\\"padded\\": 1}}  ")
    print("{{not json}}")
    print('{{"a": 1}} trailing')
    print("plain text")
    """
    task = make_task("json", script(tmp_path, "json", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    events = [e for e in task_events(ledger, task) if isinstance(e, TaskOutput | TaskEmitted)]
    summary = [
        (e.n, e.type, e.data if isinstance(e, TaskEmitted) else e.line) for e in events
    ]
    assert summary == [
        (1, "task.event", nested),
        (2, "task.output", "[1, 2, 3]"),
        (3, "task.output", "42"),
        (4, "task.output", '"just a string"'),
        (5, "task.event", {"padded": 1}),
        (6, "task.output", "{not json}"),
        (7, "task.output", '{"a": 1} trailing'),
        (8, "task.output", "plain text"),
    ]




@pytest.mark.parametrize(
    "line",
    [
        # regression: a ~300-deep object killed the ledger writer
        pytest.param('{"a": ' + "[" * 300 + "]" * 300 + "}", id="nested-300-deep"),
        # regression: a lone surrogate escape, as JSON.stringify writes a broken string
        pytest.param('{"text": "broken \\ud800 pair"}', id="lone-surrogate-escape"),
        pytest.param('{"a": ' + "[" * 100 + "]" * 100 + "}", id="nested-100-deep"),
    ],
)
def test_unstorable_json_line_does_not_kill_the_batch(
    ledger: Ledger, tmp_path: Path, line: str
) -> None:
    (tmp_path / "line.txt").write_text(line)
    body = """
    import sys
    print(open(sys.argv[1]).read(), flush=True)
    print("after")
    """
    task = make_task("unstorable", script(tmp_path, "unstorable", body,
                                          str(tmp_path / "line.txt")), timeout=NEVER)
    other = make_task("other", [PY, "-c", "print('ok')"], timeout=NEVER)
    try:
        result = run(ledger, tmp_path, task, other)
    except BaseExceptionGroup as group:
        pytest.fail(f"run_batch raised {group.exceptions!r}")
    assert result.status == RunStatus.COMPLETED
    assert completed(result, ledger, other).final_status == FinalStatus.SUCCESS
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    assert lines(ledger, task)[-1] == "after"


def test_json_line_nested_past_the_recursion_limit(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: json.loads raised RecursionError, uncaught: the task ended in ERROR."""
    depth = 5000
    body = f"""
    print('{{"a": ' + '[' * {depth} + ']' * {depth} + '}}')
    print("after")
    """
    task = make_task("deeper", script(tmp_path, "deeper", body), timeout=NEVER)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    deep = '{"a": ' + "[" * depth + "]" * depth + "}"
    assert lines(ledger, task) == [deep, "after"]  # kept whole, as a plain line


# -- criteria path safety ------------------------------------------------------------------

SANDBOX_LINKS = """
import os, sys
from pathlib import Path
Path("real.txt").write_text("inside content")
os.symlink(sys.argv[1], "link-out.txt")
os.symlink("real.txt", "link-in.txt")
os.symlink(os.path.dirname(sys.argv[1]), "dir-out")
"""


def test_criteria_paths_cannot_leave_the_sandbox(ledger: Ledger, tmp_path: Path) -> None:
    secret = tmp_path / "secret" / "outside.txt"
    secret.parent.mkdir()
    secret.write_text("TOPSECRET")
    out_criteria: list[dict[str, Any]] = [
        {"type": "file_exists", "path": "../outside"},
        {"type": "file_contains", "path": "../../../../../../" + str(secret).lstrip("/"),
         "includes": ["TOPSECRET"]},
        {"type": "file_exists", "path": str(secret)},
        {"type": "file_contains", "path": str(secret), "includes": ["TOPSECRET"]},
        {"type": "file_contains", "path": "link-out.txt", "includes": ["TOPSECRET"]},
        {"type": "file_exists", "path": "link-out.txt"},
        {"type": "file_contains", "path": "dir-out/outside.txt", "includes": ["TOPSECRET"]},
    ]
    in_criteria: list[dict[str, Any]] = [
        {"type": "file_contains", "path": "link-in.txt", "includes": ["inside content"]},
        {"type": "file_contains", "path": "sub/../real.txt", "includes": ["inside"]},
        {"type": "file_exists", "path": "./real.txt"},
    ]
    task = make_task(
        "escape",
        script(tmp_path, "escape", SANDBOX_LINKS, str(secret)),
        criteria=out_criteria + in_criteria,
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE
    results = done.criteria
    assert [c.passed for c in results] == [False] * len(out_criteria) + [True] * len(in_criteria)
    details = [c.detail for c in results]
    assert details[0] == "../outside resolves outside the sandbox"
    assert details[1].endswith("resolves outside the sandbox")
    assert "absolute path" in details[2] and "absolute path" in details[3]
    assert details[4] == "link-out.txt resolves outside the sandbox"
    assert details[5] == "link-out.txt resolves outside the sandbox"
    assert details[6] == "dir-out/outside.txt resolves outside the sandbox"
    # refused before any read: no detail reports on the outside file's contents
    assert not any("has all of" in d or "lacks" in d for d in details[: len(out_criteria)])
    assert done.weighted_score == pytest.approx(3 / 10)


def test_criteria_on_a_missing_or_non_file_path(ledger: Ledger, tmp_path: Path) -> None:
    body = """
    import os
    os.mkdir("folder")
    """
    task = make_task(
        "nonfile",
        script(tmp_path, "nonfile", body),
        criteria=[
            {"type": "file_contains", "path": "nothing.txt", "includes": ["x"]},
            {"type": "file_contains", "path": "folder", "includes": ["x"]},
            {"type": "file_exists", "path": "folder"},
        ],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert [c.passed for c in done.criteria] == [False, False, True]
    assert done.criteria[0].detail == "nothing.txt is not a file"
    assert done.criteria[1].detail == "folder is not a file"


def test_symlink_loop_fails_the_criterion(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: Path.resolve() raised RuntimeError (3.11) and the task ended in ERROR."""
    body = """
    import os
    os.symlink("b", "a")
    os.symlink("a", "b")
    """
    task = make_task(
        "loop",
        script(tmp_path, "loop", body),
        criteria=[{"type": "exit_code"}, {"type": "file_exists", "path": "a"}],
        timeout=NEVER,
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE, done.error_message
    assert [c.passed for c in done.criteria] == [True, False]


# -- preservation modes --------------------------------------------------------------------

WRITER = """
import os
from pathlib import Path
Path("made.txt").write_text("artifact")
Path("sub").mkdir()
Path("sub", "nested.txt").write_text("nested")
print(os.environ["EVALLEDGER_SANDBOX"])
print(os.getcwd())
"""


def test_preservation_none_keeps_nothing(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task("pnone", script(tmp_path, "pnone", WRITER), timeout=NEVER,
                     criteria=[{"type": "file_exists", "path": "sub/nested.txt"}])
    result = run(ledger, tmp_path, task, mode="none")
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    sandbox, _ = lines(ledger, task)
    assert not Path(sandbox).exists()
    assert not (tmp_path / "out" / RUN_ID / "artifacts").exists()


def test_preservation_move_on_write_keeps_the_files(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task("pmove", script(tmp_path, "pmove", WRITER), timeout=NEVER)
    result = run(ledger, tmp_path, task, mode="move-on-write")
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    sandbox, cwd = lines(ledger, task)
    kept = artifacts(tmp_path, task)
    assert kept == tmp_path / "out" / RUN_ID / "artifacts" / "default" / "pmove" / "00"
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == [
        "made.txt", "sub", "sub/nested.txt",
    ]
    assert (kept / "made.txt").read_text() == "artifact"
    assert Path(sandbox).resolve() != kept.resolve()
    assert os.path.realpath(sandbox) == os.path.realpath(cwd)
    assert not Path(sandbox).exists()  # moved, not copied


def test_preservation_direct_write_runs_in_the_artifacts_folder(
    ledger: Ledger, tmp_path: Path
) -> None:
    task = make_task("pdirect", script(tmp_path, "pdirect", WRITER), timeout=NEVER)
    result = run(ledger, tmp_path, task, mode="direct-write")
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    sandbox, cwd = lines(ledger, task)
    kept = artifacts(tmp_path, task)
    assert Path(sandbox) == kept
    assert Path(cwd).resolve() == kept.resolve()
    assert (kept / "made.txt").read_text() == "artifact"
    assert (kept / "sub" / "nested.txt").read_text() == "nested"


def test_direct_write_sandbox_variable_with_relative_out_dir(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: with a relative out_dir (BatchConfig's default is ``runs``) the
    variable was relative, and meaningless from the command's cwd."""
    monkeypatch.chdir(tmp_path)
    body = """
    import os
    print(os.path.isdir(os.environ["EVALLEDGER_SANDBOX"]))
    """
    task = make_task("reldir", script(tmp_path, "reldir", body), timeout=NEVER)
    config = BatchConfig(run_id=RUN_ID, options=RunOptions(
        out="out", preservation_mode="direct-write", kill_grace=0.5))
    result = trio.run(run_batch, ledger, [task], config)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    assert lines(ledger, task) == ["True"]


# -- max_output ------------------------------------------------------------------------------


RUNAWAY = """
import json, sys
for i in range(1, 2001):
    if i % 500 == 0:  # usage past the cap still counts
        print(json.dumps({"type": "usage", "model": "m", "input_tokens": 10, "output_tokens": i}))
    else:
        print(f"line {i:04d} " + "x" * 89)  # 100 bytes with its newline
print("the verdict: all done")
"""


def printed() -> list[str]:
    """What RUNAWAY prints, line by line (``n`` from 1)."""
    return [json.dumps({"type": "usage", "model": "m", "input_tokens": 10, "output_tokens": i})
            if i % 500 == 0 else f"line {i:04d} " + "x" * 89
            for i in range(1, 2001)] + ["the verdict: all done"]


def test_output_past_max_output_is_counted_its_tail_kept_and_its_usage_booked(
    ledger: Ledger, tmp_path: Path
) -> None:
    task = make_task("runaway", script(tmp_path, "runaway", RUNAWAY),
                     [{"type": "output_contains", "includes": ["the verdict: all done"]}],
                     max_output=10_000)
    done = completed(run(ledger, tmp_path, task), ledger, task)

    assert done.final_status == FinalStatus.SUCCESS  # the criteria saw the whole stream
    assert done.tokens.output_tokens == 500 + 1000 + 1500 + 2000  # each usage line, booked
    rows = task_events(ledger, task, "task.output", "task.event", "task.output_truncated")
    [cut_at] = [i for i, e in enumerate(rows) if isinstance(e, TaskOutputTruncated)]
    cut = rows[cut_at]
    assert isinstance(cut, TaskOutputTruncated)
    size = {n: len(text) + 1 for n, text in enumerate(printed(), start=1)}
    head = [e.n for e in rows[:cut_at]]  # type: ignore[union-attr]
    tail = [e.n for e in rows[cut_at + 1:]]  # type: ignore[union-attr]
    assert head == list(range(1, len(head) + 1))
    recorded = sum(size[n] for n in head)
    assert recorded <= 10_000 < recorded + size[len(head) + 1]
    assert cut.from_n == len(head) + 1 and cut.limit_bytes == 10_000 and cut.attempt == 1
    # The tail: the last lines within a tenth of the cap (each line charged 64 bytes
    # more: what keeping it costs), in order, to the verdict; the usage line among them
    # recorded as the JSON event it is.
    assert tail == list(range(cut.tail_from_n or 0, 2002))
    kept = sum(size[n] for n in tail)
    assert kept + 64 * len(tail) <= 1000 < kept + 64 * len(tail) + size[tail[0] - 1] + 64
    assert lines(ledger, task)[-1] == "the verdict: all done"
    assert [e.n for e in task_events(ledger, task, "task.event")] == [2000]  # type: ignore[union-attr]
    assert cut.omitted_lines == 2001 - len(head) - len(tail)
    assert cut.omitted_bytes == sum(size.values()) - recorded - kept
    assert cut.seq is not None and done.seq is not None and cut.seq < done.seq


FLOOD = """
import json
print("x" * 2000)  # past max_output at once
for i in range(1, 301):
    print(json.dumps({"type": "usage", "model": f"m{i % 100}", "input_tokens": i}))
print(json.dumps({"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 1000000}))
"""


def test_usage_past_max_output_is_booked_whole_in_a_row_per_model(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Each usage line was a row of its own however far past max_output (300,000 lines,
    each of another model: a 129 MB ledger). Past it, one row per model, the first
    ``_MERGED_MODELS`` models; every token still counted, every price still paid."""
    from evalledger.executor._runner import _MERGED_MODELS, _OTHER_MODELS

    task = make_task("flood", script(tmp_path, "flood", FLOOD), [{"type": "exit_code"}],
                     max_output=1000)
    done = completed(run(ledger, tmp_path, task), ledger, task)
    usages = [e for e in task_events(ledger, task, "task.usage")]
    assert isinstance(done, TaskCompleted)
    assert done.tokens.input_tokens == sum(range(1, 301)) + 1_000_000
    assert sum(u.input_tokens for u in usages) == done.tokens.input_tokens  # type: ignore[union-attr]
    assert len(usages) == _MERGED_MODELS + 1
    by_model = {u.model: u for u in usages}  # type: ignore[union-attr]
    assert by_model["m1"].input_tokens == sum(range(1, 301, 100))  # type: ignore[union-attr]
    assert by_model[_OTHER_MODELS].cost_usd is None  # type: ignore[union-attr]
    # The priced model came 101st: merged with the others, unpriced: a floor.
    assert done.cost_complete is False


def test_the_tail_kept_past_max_output_is_bounded_in_lines_too() -> None:
    """Empty lines, charged a byte each, filled a 1 MiB tail with a million of them
    (222 MB of tuples); each is charged what keeping it costs, and the last line is
    kept whatever it costs (how the output ended)."""
    from evalledger.executor._runner import _Omitted

    omitted = _Omitted(from_n=1, tail_limit=1000)
    for n in range(1, 100_001):
        omitted.add(n, "stdout", "t", "", False, None, 1)
    assert [line[0] for line in omitted.tail] == list(range(100_001 - 15, 100_001))
    assert (omitted.lines, omitted.size, omitted.tail_size) == (100_000, 100_000, 15)
    omitted.add(100_001, "stdout", "t", "x" * 5000, False, None, 5001)
    assert [line[0] for line in omitted.tail] == [100_001]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_timed_out_attempt_past_max_output_records_its_tail_before_ending(
    ledger: Ledger, tmp_path: Path
) -> None:
    body = """
    import sys, time
    for i in range(1, 301):
        print(f"line {i}")
    sys.stdout.flush()
    time.sleep(60)
    """
    task = make_task("hangs", script(tmp_path, "hangs", body), timeout=2, max_output=1000)
    done = completed(run(ledger, tmp_path, task), ledger, task)

    assert done.final_status == FinalStatus.TIMEOUT
    [cut] = task_events(ledger, task, "task.output_truncated")
    assert isinstance(cut, TaskOutputTruncated)
    assert lines(ledger, task)[-1] == "line 300"
    assert cut.seq is not None and done.seq is not None and cut.seq < done.seq


def test_output_within_max_output_records_no_truncation(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task("fits", "seq 100", max_output=292)  # 1..100 with newlines: 292 bytes
    run(ledger, tmp_path, task)
    assert task_events(ledger, task, "task.output_truncated") == []
    assert lines(ledger, task) == [str(i) for i in range(1, 101)]


# -- what a kept workspace may hold ----------------------------------------------------------

# Left by a command running as root: a setuid-root copy of a program, a setgid folder
# anyone may write to, a device (root only), and a setuid file 10 folders down.
PLANTS = """
import os, shutil, stat, sys, time
shutil.copy(shutil.which("true"), "suid"); os.chmod("suid", 0o4755)
os.mkdir("shared"); os.chmod("shared", 0o2777)
if os.getuid() == 0:
    os.mknod("null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
top = os.getcwd()
for _ in range(10):
    os.mkdir("d"); os.chdir("d")
shutil.copy(shutil.which("true"), "bottom"); os.chmod("bottom", 0o6755)
os.chdir(top)
if sys.argv[1:] == ["hang"]:
    print("planted", flush=True)
    time.sleep(60)
"""


def dangerous(root: Path) -> list[str]:
    """What under ``root`` is setuid, setgid, writable by anyone or a device (by find:
    any depth)."""
    found = subprocess.run(["find", str(root), "(", "-perm", "/6002", "-o", "-type", "b",
                            "-o", "-type", "c", ")", "-printf", "%P\\n"],
                           capture_output=True, text=True, check=True).stdout
    return sorted(found.split())


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("case", "fields", "options"), [
    ("graded", {}, {}),
    ("not graded", {}, {"no_grade": True}),
    ("timed out", {"timeout": 3}, {}),
])
def test_a_kept_workspace_holds_nothing_setuid_setgid_or_a_device(
    ledger: Ledger, tmp_path: Path, case: str, fields: dict[str, Any], options: dict[str, Any],
) -> None:
    command = script(tmp_path, "plants", PLANTS, *(["hang"] if "timeout" in fields else []))
    task = make_task("plants", command, timeout=fields.get("timeout", NEVER))
    done = completed(run(ledger, tmp_path, task, **options), ledger, task)
    kept = artifacts(tmp_path, task)

    assert (kept / "suid").is_file() and (kept / "shared").is_dir()
    assert dangerous(kept) == [], case
    assert not (kept / "null").exists()
    assert stat.S_IMODE((kept / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((kept / "shared").stat().st_mode) == 0o775
    assert done.final_status == (FinalStatus.TIMEOUT if "timeout" in fields
                                 else FinalStatus.NOT_GRADED if options else FinalStatus.SUCCESS)
    # What a regrade checks: the workspace as kept.
    assert done.kept_hash == _isolation.hash_tree(kept)


def test_a_workspace_written_in_place_is_defused_too(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task("in-place", script(tmp_path, "plants", PLANTS))
    run(ledger, tmp_path, task, mode="direct-write")
    assert dangerous(artifacts(tmp_path, task)) == []


def test_a_tree_past_the_path_length_limit_is_defused_to_its_bottom(tmp_path: Path) -> None:
    # 30 folders of 200-character names: 6,000 characters, past PATH_MAX (4,096).
    root = tmp_path / "kept"
    root.mkdir()
    folder = os.open(root, os.O_RDONLY)
    for _ in range(30):
        os.mkdir("d" * 200, dir_fd=folder)
        inner = os.open("d" * 200, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    bottom = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder)
    os.fchmod(bottom, 0o6755)
    os.close(bottom)
    os.close(folder)
    assert len(dangerous(root)) == 1
    _sandbox.defuse(root)
    assert dangerous(root) == []


def test_a_regrades_copy_of_a_workspace_holds_nothing_setuid(tmp_path: Path) -> None:
    source = tmp_path / "kept"
    source.mkdir()
    (source / "suid").write_bytes(b"#!/bin/sh\n")
    (source / "suid").chmod(0o4755)
    (source / "open").mkdir(mode=0o777)
    (source / "open").chmod(0o2777)
    _sandbox.copy_workspace(source, tmp_path / "copy")
    assert dangerous(tmp_path / "copy") == []
    assert stat.S_IMODE((tmp_path / "copy" / "suid").stat().st_mode) == 0o755


DEEP = """
import os, sys
for _ in range(int(sys.argv[1])):
    os.mkdir(sys.argv[2]); os.chdir(sys.argv[2])
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("levels", "name", "says"), [
    (1100, "d", "folders nested deeper than 256 levels"),
    (20, "n" * 200, "a path longer than 3072 bytes"),
])
@pytest.mark.parametrize("criterion", ["exit_code", "run_command"])
def test_a_workspace_the_command_made_ungradable_is_its_failure_not_infra(
    ledger: Ledger, tmp_path: Path, levels: int, name: str, says: str, criterion: str,
) -> None:
    """A 1,100-deep tree made the workspace walk raise RecursionError: ERROR, infra, left
    out of the pass rate (shown 100% where it was 50%)."""
    criteria = [{"type": "exit_code", "equals": 0}] if criterion == "exit_code" else [
        {"type": "run_command", "command": "true"}]
    task = make_task("deep", script(tmp_path, "deep", DEEP, str(levels), name), criteria)
    try:
        done = completed(run(ledger, tmp_path, task), ledger, task)
        assert done.final_status == FinalStatus.FAILURE
        assert done.failure_class == "agent"
        assert done.error_message == f"the workspace cannot be graded: {says}"
        assert done.kept_hash is None
        assert artifacts(tmp_path, task).is_dir()  # kept all the same (defused)
    finally:  # deeper than pytest's own clean-up (shutil.rmtree) can go
        _sandbox.remove_tree(tmp_path / "out")


COPY_AS_USER = """\
import os, stat, sys
from pathlib import Path
from evalledger.executor._sandbox import copy_workspace
kept, copy = Path(sys.argv[1]), Path(sys.argv[2])
(kept / "plain").write_text("x")
(kept / "secret").write_text("hidden tests")
(kept / "secret").chmod(0)
(kept / "locked").mkdir()
(kept / "locked" / "inside").write_text("y")
(kept / "locked").chmod(0)
copy_workspace(kept, copy)
print(sorted(p.name for p in copy.iterdir()), oct(stat.S_IMODE(os.lstat(copy / "secret").st_mode)),
      os.lstat(copy / "secret").st_size)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_what_the_command_made_unreadable_does_not_fail_a_copy_to_grade_in() -> None:
    """As an unprivileged runner, one `chmod 000` file made the grading copy raise: the
    attempt an infra ERROR, left out of the pass rate."""
    needs_root("becoming the user nobody")
    if shutil.which("setpriv") is None:
        unavailable("UNPRIVILEGED", "setpriv (util-linux) is needed to become another user")
    folder = Path(tempfile.mkdtemp(prefix="evalledger-copy-", dir="/tmp"))
    try:
        shutil.copytree(Path(_sandbox.__file__).parents[1], folder / "lib" / "evalledger")
        (folder / "kept").mkdir()
        for path in (folder, *folder.rglob("*")):
            os.lchown(path, 65534, 65534)
        folder.chmod(0o755)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
             sys.executable, "-c", COPY_AS_USER, str(folder / "kept"), str(folder / "copy")],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(folder / "lib"),
                 "HOME": str(folder)}, capture_output=True, text=True, timeout=60)
        if "ModuleNotFoundError" in done.stderr:
            unavailable("UNPRIVILEGED", f"nobody cannot run this Python ({sys.executable})")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["['plain',", "'secret']", "0o0", "0"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- what an attempt prints is held a moment, then written as one row -------------------------

# Prints its lines one write each, each read before the next is written (one read a line,
# as an agent's), a JSON line and a stderr line among them; then exits.
ONE_A_READ = r"""
import fcntl, os, sys, termios, time
def unread(fd):
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
give_up = time.monotonic() + 60
for fd, text in [(1, "one"), (1, '{"type": "note", "k": 1}'), (2, "to stderr"), (1, "four"),
                 (1, "five"), (1, "six")]:
    os.write(fd, (text + "\n").encode())
    while unread(fd) and time.monotonic() < give_up:
        time.sleep(0.0005)
"""


def test_lines_read_apart_are_one_row_once_the_attempt_rests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line a read, as an agent prints: held while the attempt goes on (here, until its
    pipes close), then one task.lines row; read back, callbacks included, as its lines."""
    monkeypatch.setattr(_runner, "LINGER", NEVER)
    task = make_task("reads", [PY, "-c", ONE_A_READ])
    seen: list[object] = []
    committed: list[object] = []
    with Ledger(tmp_path / "l.db") as ledger:
        run_batches(ledger, [task], config_of(tmp_path),
                    Callbacks(on_output=seen.append, on_event=committed.append))
        stored = list(ledger.rows(RUN_ID, stored=True))
        read = list(ledger.events(RUN_ID, types={"task.output", "task.event"}))
        assert verify(ledger).ok
    assert [row.type for row in stored if row.type in (
        "task.lines", "task.output", "task.event")] == ["task.lines"]
    assert [(type(e).__name__, e.n) for e in read] == [  # type: ignore[union-attr]
        ("TaskOutput", 1), ("TaskEmitted", 2), ("TaskOutput", 3), ("TaskOutput", 4),
        ("TaskOutput", 5), ("TaskOutput", 6)]
    assert [getattr(e, "stream", "stdout") for e in read][2] == "stderr"
    assert [e.event_id for e in seen] == [e.event_id for e in read]  # type: ignore[attr-defined]
    lines_committed = [e for e in committed if getattr(e, "type", "") in ("task.output",
                                                                         "task.event")]
    assert [e.event_id for e in lines_committed] == [  # type: ignore[attr-defined]
        e.event_id for e in read]


def test_a_held_line_reaches_the_ledger_while_the_command_waits(tmp_path: Path) -> None:
    """Held no longer than the linger: the command waits, silent, until its line is
    committed (it would time out if the line waited for more output)."""
    go = tmp_path / "go"

    def on_event(event: object) -> None:
        if getattr(event, "type", "") == "task.output" and '"waiting"' in str(
                getattr(event, "payload", "")):
            go.touch()

    waits = ["sh", "-c", 'echo waiting; while [ ! -e "$1" ]; do sleep 0.01; done; echo done',
             "waits", str(go)]
    task = make_task("waits", waits, timeout=NEVER)
    with Ledger(tmp_path / "l.db") as ledger:
        result = run_batches(ledger, [task], config_of(tmp_path), Callbacks(on_event=on_event))
        assert completed(result, ledger, task).final_status is FinalStatus.SUCCESS
        assert lines(ledger, task) == ["waiting", "done"]
