"""Edge cases of running and judging one task, with real subprocesses and a real ledger.

Each test states the behaviour a user expects; see the docstrings for what went wrong.
Every process a test starts (or makes a command start) is killed by pid in a finally.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from evalledger.executor import BatchConfig, BatchResult, _batch, _runner, _writer, run_batch
from evalledger.executor._criteria import CUT_OFF
from evalledger.executor._process import ESCAPE_GRACE
from evalledger.ledger import Ledger, TaskEmitted, verify
from evalledger.options import RunOptions
from evalledger.statuses import FinalStatus, RunStatus
from evalledger.suite import ResolvedTask
from tests.cli.helpers import evalledger
from tests.processes import wait_gone
from tests.waiting import wait_until

from .attempts import NEVER, PY, QUICK, RUN_ID, completed, lines, run, script, task_events
from .attempts import make_task as runner_task

SONNET = "claude-sonnet-4-5"


# -- helpers -------------------------------------------------------------------------------


def make_task(
    name: str,
    command: str | list[str],
    criteria: Sequence[dict[str, Any]] = ({"type": "exit_code", "equals": 0},),
    **fields: Any,
) -> ResolvedTask:
    fields.setdefault("timeout", NEVER)  # these commands misbehave: never the default 600 s
    return runner_task(name, command, criteria, **fields)


def kill_pids_in(*files: Path) -> None:
    for file in files:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(file.read_text()), signal.SIGKILL)


def remove_deep(path: Path) -> None:
    # shutil.rmtree recurses once per level; rm does not.
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system temp folder, where a batch makes its sandboxes, as a folder of this
    test's own: what is found in it was left by this test and nothing else."""
    root = tmp_path / "system-temp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    try:
        yield root
    finally:
        remove_deep(root)  # what a failing test left, too deep for pytest's own cleanup


def sandbox_roots(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("evalledger-*"))


# -- prompts -------------------------------------------------------------------------------

READ_STDIN = """
import sys
data = sys.stdin.buffer.read()
print(len(data))
"""


def test_prompt_with_a_nul_byte_reaches_stdin(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: ERROR "ValueError: embedded null byte" (the prompt is copied into the
    EVALLEDGER_PROMPT variable, which cannot hold NUL). YAML "\\0" makes one. The prompt
    should go to stdin whole; only the variable can do without it."""
    task = make_task("nulprompt", script(tmp_path, "nulprompt", READ_STDIN), prompt="a\0b")
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert lines(ledger, task) == ["3"]


def test_multibyte_prompt_under_the_character_cap_but_over_128_kib(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: ERROR "OSError: [Errno 7] Argument list too long". MAX_ENV_PROMPT counts
    characters, Linux's 128 KiB limit on one environment string counts bytes: 40,000
    emoji are 160,000 bytes. (CJK text: 3 bytes a character.)"""
    prompt = "\N{GRINNING FACE}" * 40_000
    task = make_task("emoji", script(tmp_path, "emoji", READ_STDIN), prompt=prompt)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert lines(ledger, task) == [str(len(prompt.encode()))]


# -- criteria paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [pytest.param("a\0b", id="nul-byte"), pytest.param("x" * 300, id="name-too-long")]
)
def test_an_unusable_criterion_path_fails_only_that_criterion(
    ledger: Ledger, tmp_path: Path, path: str
) -> None:
    """Regression: the whole task ended in ERROR ("ValueError: embedded null byte" /
    "OSError: [Errno 36] File name too long") with no criteria results at all, the
    passing exit_code criterion included. A path that cannot name a file in the
    sandbox is a failed criterion with a detail, like a path outside the sandbox."""
    task = make_task(
        "badpath", ["true"],
        criteria=[
            {"type": "exit_code", "equals": 0},
            {"type": "file_exists", "path": path},
            {"type": "file_contains", "path": path, "includes": ["x"]},
        ],
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.FAILURE, done.error_message
    assert [c.passed for c in done.criteria] == [True, False, False]
    assert all(c.detail for c in done.criteria)


# -- usage lines with odd values -----------------------------------------------------------


def test_an_absurd_token_count_is_recorded_not_an_error(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: a usage line with a 401-digit token count for a priced model made pricing
    raise OverflowError (int too large to convert to float) inside the stream pump:
    final status ERROR with the message "ExceptionGroup: Exceptions from Trio nursery
    (1 sub-exception)", and every line of that read (the usage line itself and the
    plain line after it) missing from the ledger. Garbage is recorded as garbage."""
    line = f'{{"type": "usage", "model": "{SONNET}", "input_tokens": 1{"0" * 400}}}'
    body = f"""
    print({line!r}, flush=True)
    print("plain", flush=True)
    """
    task = make_task("hugeint", script(tmp_path, "hugeint", body))
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert "plain" in lines(ledger, task)
    assert len(task_events(ledger, task, "task.event")) == 1


@pytest.mark.parametrize(
    ("costs", "floor"),
    [
        pytest.param(["Infinity"], None, id="infinity"),
        # Each past $1e9 is no cost reported (their sum would overflow): priced from the
        # rate card, which has no price for a usage that names no model.
        pytest.param(["1e308", "1e308"], None, id="sum-overflows"),
        pytest.param(["0.5", "1e308"], 0.5, id="one-past-the-bound"),
    ],
)
def test_a_non_finite_cost_is_never_booked_as_complete(
    ledger: Ledger, tmp_path: Path, costs: list[str], floor: float | None
) -> None:
    """Regression: cost_usd Infinity (json.loads accepts it; the sum of two 1e308 gets there
    too) went into task.completed as inf; the ledger stored null with cost_complete
    true ("complete, cost unknown"), the returned event said inf, and the runs view
    summed the run's cost to inf. A cost that is not a number must not be booked: it
    is priced from the rate card (here: unpriced, so cost_complete false, and the cost
    what had a price, or null)."""
    body = "\n".join(
        f'print(\'{{"type": "usage", "input_tokens": 5, "cost_usd": {c}}}\', flush=True)'
        for c in costs
    )
    task = make_task("infcost", script(tmp_path, "infcost", body))
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)  # also: the returned event is the stored one
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert (done.cost_usd, done.cost_complete) == (floor, False)
    assert done.tokens.input_tokens == 5 * len(costs)


def test_integer_valued_float_tokens_count_against_the_budget(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Bug (minor): ``"input_tokens": 5000.0`` counted as 0 tokens, so a command whose
    JSON writer prints floats (JSON has one number type) is never stopped by its
    token budget. A whole number is a count whichever way it is spelt."""
    body = """
    import time
    print('{"type": "usage", "input_tokens": 5000.0}', flush=True)
    time.sleep(60)
    """
    task = make_task("floattok", script(tmp_path, "floattok", body), budget={"max_tokens": 10})
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED, done.final_status
    assert done.tokens.input_tokens == 5000
    assert done.exit_code == -signal.SIGTERM  # stopped by the budget...
    assert done.duration_seconds < QUICK  # ...not by its timeout (30 s)


# -- huge output ---------------------------------------------------------------------------


def test_output_contains_sees_the_end_of_a_huge_output(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: only the first 16 M characters are kept for output_contains, so "done"
    printed after 18 MB of output fails the criterion ("output lacks ['done']"), and an
    excluded string printed late passes. The end of the output is what a check looks
    at; keep the tail (or stream the check), not the head."""
    body = """
    import sys
    for _ in range(300):
        sys.stdout.write("x" * 60000 + "\\n")
    print("done")
    print("Traceback (most recent call last):", file=sys.stderr)
    """
    task = make_task(
        "bigout", script(tmp_path, "bigout", body), timeout=30,
        criteria=[
            {"type": "output_contains", "includes": ["done"], "stream": "stdout"},
            {"type": "output_contains", "excludes": ["Traceback"]},
        ],
    )
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert lines(ledger, task)[-1] == "done"  # the ledger has all of it
    assert [c.passed for c in done.criteria] == [True, False], done.criteria


# -- sandboxes -----------------------------------------------------------------------------

DEEP = """
import os
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
"""


def test_a_very_deep_tree_left_in_the_sandbox_does_not_crash_the_batch(
    ledger: Ledger, tmp_path: Path, temp_root: Path
) -> None:
    """Regression: with preservation none, deleting a sandbox 1500 folders deep hits
    shutil.rmtree's recursion (RecursionError is not an OSError, so ignore_errors does
    not help): the task is recorded as task.interrupted "RecursionError", the run as
    interrupted, the other task never runs, run_batch raises (the CLI prints an
    exception-group traceback), and the sandbox stays behind in the temp folder."""
    deep = make_task("deep", script(tmp_path, "deep", DEEP))
    other = make_task("other", ["true"])
    try:
        result = run(ledger, tmp_path, deep, other, mode="none", max_parallel=1)
    except BaseException as e:
        pytest.fail(f"run_batch raised {e!r}")
    assert result.status == RunStatus.COMPLETED
    assert completed(result, ledger, deep).final_status == FinalStatus.SUCCESS
    assert completed(result, ledger, other).final_status == FinalStatus.SUCCESS
    assert sandbox_roots(temp_root) == []


def test_replacing_deep_artifacts_of_an_earlier_attempt(
    ledger: Ledger, tmp_path: Path, temp_root: Path
) -> None:
    """Regression: move-on-write replaces an earlier attempt's artifacts (a resume with
    --retry-errors does this) with shutil.rmtree; 1500 levels deep it raises
    RecursionError, and the batch is torn down as above."""
    task = make_task("redo", ["true"])
    old = tmp_path / "out" / RUN_ID / "artifacts" / task.task_key
    old.mkdir(parents=True)
    subprocess.run([PY, "-c", textwrap.dedent(DEEP)], cwd=old, check=True)
    try:
        try:
            result = run(ledger, tmp_path, task)
        except BaseException as e:
            pytest.fail(f"run_batch raised {e!r}")
        assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
        assert not (old / "d").exists()
        assert sandbox_roots(temp_root) == []
    finally:
        remove_deep(tmp_path / "out")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_very_deep_workdir_is_build_failed(
    ledger: Ledger, tmp_path: Path, temp_root: Path
) -> None:
    """Regression: copying a workdir 1200 folders deep raises RecursionError in
    shutil.copytree, which prepare() does not catch: status ERROR ("the runner itself
    broke") instead of BUILD_FAILED (the workdir could not be prepared)."""
    workdir = tmp_path / "deepwork"
    workdir.mkdir()
    subprocess.run([PY, "-c", DEEP.replace("1500", "1200")], cwd=workdir, check=True)
    task = make_task("deepwork", ["true"], workdir=str(workdir))
    try:
        result = run(ledger, tmp_path, task, mode="none")
        done = completed(result, ledger, task)
        assert done.final_status == FinalStatus.BUILD_FAILED, done.error_message
        assert done.error_message == (
            f"cannot prepare the sandbox from {workdir}: the tree is too deep to copy"
        )
        assert sandbox_roots(temp_root) == []  # the half-made copy is gone with the batch
    finally:
        remove_deep(workdir)


def test_a_socket_in_the_workdir_does_not_fail_the_build(ledger: Ledger, tmp_path: Path) -> None:
    """Bug (judgement): a unix socket left in the workdir (a dev server's, git's
    fsmonitor--daemon.ipc in .git) makes the whole task BUILD_FAILED ("No such device
    or address"). A socket has no content to copy; the copy should skip (or recreate)
    it and run the task, as ``cp -a`` / ``rsync -a`` users expect."""
    import socket

    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "keep.txt").write_text("kept")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(workdir / "s.sock"))
        task = make_task("sock", ["true"], workdir=str(workdir),
                         criteria=[{"type": "file_contains", "path": "keep.txt",
                                    "includes": ["kept"]}])
        result = run(ledger, tmp_path, task)
        done = completed(result, ledger, task)
        assert done.final_status == FinalStatus.SUCCESS, done.error_message
    finally:
        sock.close()


# -- processes that leave their process group ----------------------------------------------

ESCAPE = """
import os, sys, time
pidfile, keep_stdout = sys.argv[1], sys.argv[2] == "keep"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if not keep_stdout:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        time.sleep(120)  # longer than any wait for it to be gone
    os._exit(0)
while not os.path.exists(pidfile):
    time.sleep(0.01)
print("leader done", flush=True)
"""


def test_a_setsid_daemon_does_not_survive_the_batch(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: a command that double-forks and calls setsid() (any daemon: ssh-agent, a
    dev server started with setsid/nohup-style helpers) leaves its process group;
    killpg never reaches it and it outlives the task and the batch. The runner could
    be a child subreaper (PR_SET_CHILD_SUBREAPER) or use a cgroup to find it."""
    pidfile = tmp_path / "daemon.pid"
    task = make_task("daemon", script(tmp_path, "daemon", ESCAPE, str(pidfile), "null"))
    try:
        result = run(ledger, tmp_path, task)
        assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
        assert wait_gone(int(pidfile.read_text()), NEVER), "the daemon outlived the batch"
    finally:
        kill_pids_in(pidfile)


def test_a_setsid_daemon_holding_stdout_does_not_turn_success_into_timeout(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: the same daemon keeping the inherited stdout open: the command exits 0 at
    once, but the runner reads its pipe until EOF, which never comes, so the task is
    TIMEOUT after its full timeout (exit code 0, criteria passed) and the daemon
    survives."""
    pidfile = tmp_path / "daemon.pid"
    task = make_task("daemonout", script(tmp_path, "daemonout", ESCAPE, str(pidfile), "keep"),
                     timeout=NEVER)
    try:
        result = run(ledger, tmp_path, task)
        done = completed(result, ledger, task)
        assert done.final_status == FinalStatus.SUCCESS, done.error_message
        assert done.duration_seconds < QUICK  # the daemon was hunted down, not waited out
        assert wait_gone(int(pidfile.read_text()), NEVER), "the daemon outlived the batch"
    finally:
        kill_pids_in(pidfile)


def test_a_run_command_criterion_whose_daemon_holds_the_pipe(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: a run_command criterion that exits 0 but leaves a setsid() daemon holding
    its stdout fails as "timed out after 30s", and the daemon survives."""
    pidfile = tmp_path / "crit.pid"
    escape = tmp_path / "escape.py"
    escape.write_text(textwrap.dedent(ESCAPE))
    task = make_task(
        "critdaemon", ["true"],
        criteria=[{"type": "run_command", "command": [PY, str(escape), str(pidfile), "keep"],
                   "timeout": NEVER}],
        timeout=NEVER,
    )
    try:
        result = run(ledger, tmp_path, task)
        done = completed(result, ledger, task)
        assert done.criteria[0].passed, done.criteria[0].detail
        assert done.duration_seconds < QUICK
        assert wait_gone(int(pidfile.read_text()), NEVER), "the criterion's daemon survived"
    finally:
        kill_pids_in(pidfile)


# -- timeouts ------------------------------------------------------------------------------


def test_the_task_timeout_covers_its_criteria(ledger: Ledger, tmp_path: Path) -> None:
    """Bug (spec reading): SPEC §3 says ``timeout`` is "seconds, wall clock, whole
    task", but only the command is timed: a task with timeout 0.5 whose run_command
    criterion takes 2 s runs 2 s and is SUCCESS. A user setting a wall-clock limit
    expects the task to be stopped (TIMEOUT) when it is spent."""
    task = make_task("slowcrit", ["true"], timeout=1,
                     criteria=[{"type": "run_command", "command": "sleep 60", "timeout": NEVER}])
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert [c.detail for c in done.criteria] == [CUT_OFF]  # started in time, then cut off
    assert 1 <= done.duration_seconds < QUICK, done.duration_seconds


def test_a_tiny_timeout_is_a_timeout(ledger: Ledger, tmp_path: Path) -> None:
    task = make_task("tiny", ["sleep", "60"], timeout=0.001)
    result = run(ledger, tmp_path, task)
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert done.duration_seconds < QUICK  # not the command's 60 s


# -- batches -------------------------------------------------------------------------------


def test_the_same_task_key_twice_in_one_batch(ledger: Ledger, tmp_path: Path) -> None:
    """Regression (API only: load_tasks never makes duplicate keys): run_batch with the
    same task twice and max_parallel > 1 died with "RuntimeError: this borrower is
    already holding one of this CapacityLimiter's tokens" mid-batch, the run recorded
    as interrupted. Duplicates are refused up front: ValueError, nothing recorded."""
    task = make_task("dup", ["true"])
    config = BatchConfig(run_id=RUN_ID,
                         options=RunOptions(out=str(tmp_path / "out"), kill_grace=0.5))
    with pytest.raises(ValueError, match="unique") as info:
        trio.run(run_batch, ledger, [task, task, task], config)
    assert task.task_key in str(info.value)
    assert list(ledger.events(RUN_ID)) == []


# -- task files ----------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_task_file_is_skipped_not_a_traceback(tmp_path: Path) -> None:
    r"""Regression: ``prompt: "a\ud800b"`` (any string field: description, env, includes) is
    loaded, then content_hash() raises UnicodeEncodeError while fingerprinting the
    run: the CLI prints an exception-group traceback and no task runs. Such a file
    should be task.skipped with a reason, and the rest of the batch run."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "bad.yaml").write_text(
        'command: "true"\nprompt: "a\\ud800b"\nsuccess_criteria: [{type: exit_code}]\n'
    )
    (suite / "good.yaml").write_text('command: "true"\nsuccess_criteria: [{type: exit_code}]\n')
    done = evalledger(tmp_path, tmp_path / "l.db", "run", str(suite))
    assert "Traceback" not in done.stderr, done.stderr[-800:]
    # The good task succeeded; the bad one is skipped, which fails the run (said so).
    assert done.returncode == 1, done
    assert "1 task file(s) skipped" in done.stdout
    with Ledger(tmp_path / "l.db", read_only=True) as ledger:
        events = list(ledger.events())
    [skipped] = [e for e in events if e.type == "task.skipped"]
    assert Path(skipped.path).name == "bad.yaml"
    assert "surrogates not allowed" in skipped.reason
    [finished] = [e for e in events if e.type == "task.completed"]
    assert finished.task_key == "default/good/00"


# -- garbage that is handled ---------------------------------------------------------------


def test_a_json_number_past_float_range_in_an_event_is_kept(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Checked, fine: big numbers in task.event data do not break the ledger or verify."""
    body = """
    print('{"v": 1%s}' % ("0" * 100), flush=True)
    print('{"type": "x", "v": 1e400}', flush=True)
    """
    task = make_task("bignum", script(tmp_path, "bignum", body))
    result = run(ledger, tmp_path, task)
    assert completed(result, ledger, task).final_status == FinalStatus.SUCCESS
    data = [e.data for e in task_events(ledger, task, "task.event")
            if isinstance(e, TaskEmitted)]
    assert data[0] == {"v": 10**100}


def test_a_timed_out_task_keeps_its_criteria_results(ledger: Ledger, tmp_path: Path) -> None:
    """Regression: with the deadline covering criteria, a command that timed out had
    every criterion cancelled: no results, score 0. Checks of what it left still run;
    only a run_command is not started past the deadline."""
    task = make_task("late", "touch out; sleep 60", [
        {"type": "file_exists", "path": "out"},
        {"type": "exit_code", "equals": 0},
        {"type": "run_command", "command": "true"},
    ], timeout=1)
    done = completed(run(ledger, tmp_path, task), ledger, task)
    assert done.final_status == FinalStatus.TIMEOUT
    assert [(c.type, c.passed) for c in done.criteria] == [
        ("file_exists", True), ("exit_code", False), ("run_command", False)]
    assert "timeout had passed" in done.criteria[2].detail
    assert done.weighted_score == pytest.approx(1 / 3)


DAEMON = """
import os, sys, time
pidfile, mode = sys.argv[1], sys.argv[2]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        if mode == "flood":
            block = (b"x" * 80 + b"\\n") * 800
            while True:
                os.write(1, block)
        os.execvpe("sleep", ["sleep", "120"], {})  # no marker left to find it by
    os._exit(0)
while not os.path.exists(pidfile):
    time.sleep(0.01)
sys.stdout.write("verdict: PASS")  # no newline
sys.stdout.flush()
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_flooding_daemon_is_killed_at_once(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the hunt for escaped processes waited for the readers to be idle,
    which a daemon flooding the pipe never lets them be: the task ran until reading
    gave up (MAX_DRAIN, 60 s). Killed at once, it takes the escape grace (1 s) and the
    time the ledger needs for what the flood wrote meanwhile: a few seconds."""
    # A small writer channel: less of the flood piles up in it for the ledger to take
    # (half the test's time); the readers are just as busy, never idle.
    monkeypatch.setattr(_writer, "CHANNEL_CAPACITY", 16)
    pidfile = tmp_path / "flood.pid"
    task = make_task("flood", script(tmp_path, "flood", DAEMON, str(pidfile), "flood"),
                     timeout=NEVER)
    try:
        done = completed(run(ledger, tmp_path, task), ledger, task)
        assert done.final_status == FinalStatus.SUCCESS, done.error_message
        assert done.duration_seconds < NEVER  # half of MAX_DRAIN
        assert wait_gone(int(pidfile.read_text()), NEVER)
    finally:
        kill_pids_in(pidfile)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_last_line_without_newline_survives_a_pipe_held_open(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Regression: when reading had to stop (a daemon that cleared its environment holds
    the pipe), the unterminated last line in the splitter was dropped."""
    pidfile = tmp_path / "quiet.pid"
    task = make_task("quiet", script(tmp_path, "quiet", DAEMON, str(pidfile), "hold"),
                     [{"type": "output_contains", "includes": ["verdict: PASS"]}])
    try:
        done = completed(run(ledger, tmp_path, task), ledger, task)
        assert done.final_status == FinalStatus.SUCCESS, done.error_message
        assert lines(ledger, task) == ["verdict: PASS"]
    finally:
        kill_pids_in(pidfile)


# Prints lines one read at a time until the runner's reader is held up (the test says
# so), then the rest in one write, which stays in the pipe; notes when it started and
# how many bytes it left unread when it exited. argv: the folder for the signals.
HELD = """
import fcntl, os, sys, termios, time
from pathlib import Path

signals = Path(sys.argv[1])
give_up = time.monotonic() + 60

def note(name, text):
    (signals / (name + ".tmp")).write_text(text)
    os.replace(signals / (name + ".tmp"), signals / name)

def wait(done):
    while not done():
        if time.monotonic() > give_up:
            sys.exit("the test never gave the signal")
        time.sleep(0.0005)

def unread():
    return int.from_bytes(fcntl.ioctl(1, termios.FIONREAD, bytes(4)), sys.byteorder)

held_up = (signals / "held-up").exists
note("started", repr(time.monotonic()))
wait((signals / "locked").exists)
lines = [f"line {i}\\n".encode() for i in range(1, 1002)]
sent = 0
while sent < len(lines) and not held_up():
    os.write(1, lines[sent])
    sent += 1
    wait(lambda: unread() == 0 or held_up())
os.write(1, b"".join(lines[sent:]))
note("exited", str(unread()))
"""

# Another process: takes the ledger's write lock once the command has started, keeps it
# until the test says "release". argv: the ledger, the folder for the signals.
HOLDER = """
import sqlite3, sys, time
from pathlib import Path

signals = Path(sys.argv[2])
give_up = time.monotonic() + 60

def wait_for(name):
    while not (signals / name).exists():
        if time.monotonic() > give_up:
            sys.exit(f"never saw {name}")
        time.sleep(0.0005)

conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
(signals / "holder-ready").touch()
wait_for("started")
conn.execute("BEGIN IMMEDIATE")
(signals / "locked").touch()
wait_for("release")
conn.execute("COMMIT")
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("timeout", [2, NEVER], ids=["past-the-timeout", "past-the-grace"])
def test_output_held_up_by_a_locked_ledger_is_not_dropped(
    ledger: Ledger, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    timeout: float,
) -> None:
    """Regressions: output a command wrote before exiting, still in its pipe because the
    writer waited for a ledger another process had locked, was dropped: the readers
    were cancelled once the task's deadline passed (the task then TIMEOUT), or once
    the pipes had been open a grace period after the command exited (taken for pipes
    an escaped daemon holds).

    Every step waits for the one before: the lock is taken once the command runs; the
    command prints until the reader is held up behind the full channel of the ledger
    writer, then exits with the rest in its pipe; the lock is released only once the
    task's deadline (2 s) has passed, or the runner has waited two escape graces for
    the pipes (the hunt, then the first check whether reading is stuck)."""
    signals = tmp_path / "signals"
    signals.mkdir()
    # A small channel: a few dozen reads fill it (its size changes nothing else), so the
    # command is done well before its 2 s deadline however loaded the machine.
    monkeypatch.setattr(_writer, "CHANNEL_CAPACITY", 16)
    # Each read handed over at once (no linger): the command's line-a-read fills the
    # channel then, as an agent's would only after 16 lingers.
    monkeypatch.setattr(_runner, "LINGER", 0.0)
    writers: list[_writer.LedgerWriter] = []
    open_writer = _batch.open_writer

    @contextlib.asynccontextmanager
    async def spied_writer(*args: Any, **kwargs: Any) -> AsyncIterator[_writer.LedgerWriter]:
        async with open_writer(*args, **kwargs) as writer:
            writers.append(writer)
            yield writer

    monkeypatch.setattr(_batch, "open_writer", spied_writer)
    waiting_for_pipes: list[float] = []  # when the runner began to (time.monotonic)
    release_pipes = _runner.release_pipes

    async def spied_release(*args: Any, **kwargs: Any) -> bool:
        waiting_for_pipes.append(time.monotonic())
        return await release_pipes(*args, **kwargs)

    monkeypatch.setattr(_runner, "release_pipes", spied_release)

    def held_up() -> bool:  # the reader waits to hand its lines to the writer
        return bool(writers) and writers[0]._send.statistics().tasks_waiting_send > 0

    async def until(check: Callable[[], object], what: str) -> None:
        with trio.move_on_after(NEVER):
            while not check():
                await trio.sleep(0.002)
            return
        pytest.fail(f"timed out waiting for {what}")

    async def conduct() -> None:
        await until(held_up, "the reader to be held up")
        (signals / "held-up").touch()
        await until(lambda: (signals / "exited").exists() and waiting_for_pipes,
                    "the command to exit")
        if timeout == NEVER:
            release_at = waiting_for_pipes[0] + 2 * ESCAPE_GRACE
        else:  # the attempt's deadline is at most this: the command started after it began
            release_at = float((signals / "started").read_text()) + timeout
        await trio.sleep(max(0.0, release_at + 0.25 - time.monotonic()))
        (signals / "release").touch()

    task = make_task("held", script(tmp_path, "held", HELD, str(signals)), timeout=timeout)
    config = BatchConfig(run_id=RUN_ID,
                         options=RunOptions(out=str(tmp_path / "out"), kill_grace=0.5))

    async def main() -> BatchResult:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conduct)
            return await run_batch(ledger, [task], config)

    def holder_ready() -> bool:
        assert holder.poll() is None, "the lock holder exited before it was ready"
        return (signals / "holder-ready").exists()

    holder = subprocess.Popen([PY, "-c", HOLDER, str(db_path), str(signals)])
    try:
        wait_until(holder_ready, "the lock holder", timeout=NEVER, every=0.002)
        result = trio.run(main)
        assert holder.wait(timeout=NEVER) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    done = completed(result, ledger, task)
    assert done.final_status == FinalStatus.SUCCESS, done.error_message
    assert int((signals / "exited").read_text()) > 0  # it exited with lines in its pipe
    assert done.duration_seconds > (timeout if timeout != NEVER else 2 * ESCAPE_GRACE)
    assert lines(ledger, task) == [f"line {i}" for i in range(1, 1002)]
    assert verify(ledger).ok
