"""``evalledger run``, ``resume`` and ``report`` end to end.

Every scenario runs the CLI in a temporary folder, against a copy of
``examples/smoke`` or small task files written here, and checks what a user sees
(stdout, stderr, exit code, report files) and what lands in the ledger. Commands
run in-process (``helpers.evalledger``); a real ``evalledger`` process is started
only where a real signal is the point (Ctrl-C, SIGTERM). Timeouts are short so the
whole file stays fast: the smoke suite's stalling task gets one second, and the
task that must still be running when Ctrl-C arrives sleeps only on its first
attempt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
import yaml

from evalledger.ledger import Ledger
from tests.processes import alive, still_alive
from tests.smoke import SMOKE_KEYS, copy_smoke

from .helpers import (
    COMMAND,
    PATIENCE,
    RUN_ID,
    SUMMARY,
    TASK_KEY,
    Result,
    assert_one_line_error,
    evalledger,
    events,
    of_type,
    run_json,
    spawn,
    wait_until,
    write_task,
)

GREEN = ("add-numbers", "reverse-string")  # the smoke tasks that succeed


# -- building suites -------------------------------------------------------------------------


# A task that sleeps (with a grandchild) on its first attempt only: it records both
# pids for the test, and a marker outside the sandbox tells later attempts to finish.
SLEEPER = """\
import os, signal, subprocess, sys, time
state = os.environ["SLEEPER_STATE"]
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild too
if os.environ.get("CLEAN_UP"):
    def clean_up(signum, frame):
        time.sleep(0.3)  # well within the kill grace period
        open(os.path.join(state, "cleaned-up"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, clean_up)
marker = os.path.join(state, "slept")
if os.path.exists(marker):
    print("second attempt: done", flush=True)
    sys.exit(0)
open(marker, "w").close()
child = subprocess.Popen(["sleep", "600"])
with open(os.path.join(state, "pids.tmp"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}\\n")
os.rename(os.path.join(state, "pids.tmp"), os.path.join(state, "pids"))
print("sleeping", flush=True)
time.sleep(600)
"""

FAST = "default/a-fast/00"
SLEEPY = "default/b-sleep/00"
PENDING = "default/c-fast/00"


@dataclass
class SleepSuite:
    root: Path
    tasks: Path
    state: Path
    db: Path

    @property
    def pids_file(self) -> Path:
        return self.state / "pids"

    def pids(self) -> list[int]:
        if not self.pids_file.exists():
            return []
        return [int(p) for p in self.pids_file.read_text().split()]


def make_sleep_suite(
    tmp_path: Path, *, argv: bool = False, **flags: bool
) -> SleepSuite:
    """Three tasks run one at a time: a fast one, the sleeper, another fast one.

    ``argv``: the sleeper's command is a list (python is the process group's
    leader) rather than a string run by ``/bin/sh -c``. ``flags``: IGNORE_TERM,
    CLEAN_UP, set in the sleeper's environment.
    """
    tasks = tmp_path / "suite"
    state = tmp_path / "state"  # outside every sandbox
    state.mkdir()
    (tasks / "sleeper.py").parent.mkdir(parents=True)
    (tasks / "sleeper.py").write_text(SLEEPER, encoding="utf-8")
    write_task(tasks / "a-fast.yaml", "echo fast-a")
    script = tasks / "sleeper.py"
    write_task(
        tasks / "b-sleep.yaml",
        ["python3", str(script)] if argv else 'python3 "$EVALLEDGER_TASK_DIR/sleeper.py"',
        env={"SLEEPER_STATE": str(state), **{k: "1" for k, on in flags.items() if on}},
        timeout=1200,
    )
    write_task(tasks / "c-fast.yaml", "echo fast-c")
    return SleepSuite(tmp_path, tasks, state, tmp_path / "l.db")


@dataclass
class Interrupted:
    returncode: int
    stdout_lines: list[str]
    stderr: str
    seconds_to_exit: float  # from the last signal sent
    pids: list[int] = field(default_factory=list)


class _Lines:
    """The lines of one stream of a process, read by a thread as they come."""

    def __init__(self, stream: IO[str] | None) -> None:
        assert stream is not None
        self.lines: list[str] = []
        self.ended = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
        self.ended = True

    def wait_for(self, check: Callable[[list[str]], bool], what: str) -> None:
        """Until ``check(lines)`` is true; fail if the stream ends first."""

        def reached() -> bool:
            if check(list(self.lines)):
                return True
            assert not self.ended, f"the stream ended before {what}: {self.lines}"
            return False

        wait_until(reached, what)

    def join(self) -> list[str]:
        self._thread.join(timeout=PATIENCE)
        return self.lines


# A second signal is sent once the first one's "interrupted: stopping tasks" is out.
INTERRUPTED = "interrupted: stopping tasks"


def run_and_interrupt(
    suite: SleepSuite, *extra: str, sig: int = signal.SIGINT, again: bool = False,
    command: Sequence[str] = COMMAND,
) -> Interrupted:
    """Start ``evalledger run`` on the suite, signal it once the sleeper is running.

    With ``again``, a second signal follows once the first one has been handled
    (the run said so on stderr), and the process must still be running then.
    """
    proc = spawn(suite.root, suite.db, "run", str(suite.tasks), "-j", "1", *extra,
                 command=command)
    out, err = _Lines(proc.stdout), _Lines(proc.stderr)
    try:
        # The run id, then at least one finished task's line.
        out.wait_for(lambda lines: len(lines) >= 2, "the run id and a finished task")
        wait_until(lambda: suite.pids_file.exists() or proc.poll() is not None,
                   "the sleeper to start")
        assert proc.poll() is None, f"evalledger ended before the sleeper started: {err.lines}"
        proc.send_signal(sig)
        if again:
            err.wait_for(lambda lines: INTERRUPTED in "\n".join(lines), "the first signal")
            assert proc.poll() is None, "gone before the second signal"
            proc.send_signal(sig)
        sent = time.monotonic()
        returncode = proc.wait(timeout=PATIENCE)
        seconds = time.monotonic() - sent
        return Interrupted(returncode, out.join(), "\n".join(err.join()) + "\n", seconds,
                           suite.pids())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in suite.pids():  # never leave our sleepers behind, whatever happened
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# -- the smoke suite, run once for several tests ---------------------------------------------


@dataclass
class SmokeRun:
    cwd: Path
    db: Path
    run_id: str
    result: Result


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    cwd = tmp_path_factory.mktemp("smoke-run")
    root = copy_smoke(cwd)
    db = cwd / "l.db"
    # Set up before any test's private temp folder: the run's sandboxes get their own.
    sandboxes = cwd / "tmp"
    sandboxes.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(sandboxes))
        patch.setattr(tempfile, "tempdir", str(sandboxes))
        result = evalledger(cwd, db, "run", str(root / "tasks"))
    run_id = result.out_lines[0] if result.out_lines else ""
    return SmokeRun(cwd, db, run_id, result)


def test_run_prints_run_id_task_lines_and_summary(smoke_run: SmokeRun) -> None:
    result = smoke_run.result
    # fizzbuzz fails, hard-problem times out: both as their `expect` says.
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr
    lines = result.out_lines
    assert RUN_ID.match(lines[0]), lines
    run_id = lines[0]
    task_lines = [line for line in lines[1:] if TASK_KEY.search(line)]
    assert len(task_lines) == len(SMOKE_KEYS), lines
    seen = {}
    for line in task_lines:
        keys = TASK_KEY.findall(line)
        assert len(keys) == 1, line
        seen[keys[0]] = line.split()[0]
    assert seen == SMOKE_KEYS
    summary = [m for line in lines if (m := SUMMARY.match(line))]
    assert len(summary) == 1, lines
    assert summary[0].groupdict() == {
        "run_id": run_id, "status": "completed", "run": "4", "planned": "4",
        "succeeded": "2", "failed": "2", "error": "0",
    }
    # The summary comes after every task line; only the reports' paths follow it.
    at = lines.index(summary[0].string)
    assert all(lines.index(line) < at for line in task_lines)
    assert len(lines[at + 1:]) == 1, lines
    assert lines[-1].startswith("reports: ")
    assert f"{run_id}/run.md" in lines[-1] and f"{run_id}/run.json" in lines[-1]


def test_run_writes_reports(smoke_run: SmokeRun) -> None:
    folder = smoke_run.cwd / "runs" / smoke_run.run_id
    assert (folder / "run.md").is_file()
    report = run_json(smoke_run.cwd, smoke_run.run_id)
    assert report["run_id"] == smoke_run.run_id
    assert report["status"] == "completed"
    assert (report["tasks_planned"], report["tasks_run"]) == (4, 4)
    assert (report["tasks_succeeded"], report["tasks_failed"], report["tasks_error"]) == (2, 2, 0)
    assert {row["task_key"]: row["final_status"] for row in report["tasks"]} == SMOKE_KEYS
    assert f"# Run {smoke_run.run_id}" in (folder / "run.md").read_text(encoding="utf-8")


def test_run_ledger_verifies(smoke_run: SmokeRun) -> None:
    result = evalledger(smoke_run.cwd, smoke_run.db, "verify")
    assert result.returncode == 0, result
    assert result.out_lines[0].startswith("OK")
    evs = events(smoke_run.db, smoke_run.run_id)
    assert evs[0].type == "run.started"
    assert evs[-1].type == "run.finished"
    assert evs[-1].status == "completed"
    assert {e.task_key for e in of_type(evs, "task.completed")} == set(SMOKE_KEYS)


def test_ledger_from_environment(smoke_run: SmokeRun) -> None:
    result = evalledger(
        smoke_run.cwd, None, "report", "latest", "--format", "json",
        env={"EVALLEDGER_LEDGER": str(smoke_run.db)},
    )
    assert result.returncode == 0, result
    assert json.loads(result.stdout)["run_id"] == smoke_run.run_id


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("fmt", ["json", "md"])
@pytest.mark.parametrize("spec", ["id", "prefix", "latest"])
@pytest.mark.parametrize("to_file", [False, True], ids=["stdout", "file"])
def test_report_rebuild_is_byte_identical(
    smoke_run: SmokeRun, tmp_path: Path, fmt: str, spec: str, to_file: bool
) -> None:
    run_id = smoke_run.run_id
    name = {"id": run_id, "prefix": run_id[:-3], "latest": "latest"}[spec]
    written = (smoke_run.cwd / "runs" / run_id / f"run.{fmt}").read_bytes()
    args = ["report", name, "--format", fmt]
    if to_file:
        target = tmp_path / f"rebuilt.{fmt}"
        result = evalledger(tmp_path, smoke_run.db, *args, "-o", str(target))
        assert result.returncode == 0, result
        assert result.stdout == ""
        assert target.read_bytes() == written
    else:
        done = evalledger(tmp_path, smoke_run.db, *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout_bytes == written


def test_report_names_runs_by_id_prefix_and_latest(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    tasks = tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "echo ok")
    for run_id in ("abc-1", "abc-2"):
        result = evalledger(tmp_path, db, "run", str(tasks), "--run-id", run_id)
        assert result.returncode == 0, result
        assert result.out_lines[0] == run_id

    ambiguous = assert_one_line_error(evalledger(tmp_path, db, "report", "abc"))
    assert "abc-1" in ambiguous and "abc-2" in ambiguous
    unknown = assert_one_line_error(evalledger(tmp_path, db, "report", "zzz"))
    assert "zzz" in unknown

    for spec, run_id in (("abc-1", "abc-1"), ("abc-2", "abc-2"), ("latest", "abc-2")):
        result = evalledger(tmp_path, db, "report", spec, "--format", "json")
        assert result.returncode == 0, result
        assert result.stdout == (tmp_path / "runs" / run_id / "run.json").read_text("utf-8")

    again = assert_one_line_error(
        evalledger(tmp_path, db, "run", str(tasks), "--run-id", "abc-1")
    )
    assert "already exists" in again
    assert len(of_type(events(db, "abc-1"), "run.started")) == 1  # the refused run wrote nothing


def test_report_to_unwritable_file_is_a_one_line_error(
    smoke_run: SmokeRun, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    result = evalledger(
        tmp_path, smoke_run.db, "report", "latest", "-o", str(tmp_path / "a-file" / "run.json")
    )
    assert "a-file" in assert_one_line_error(result)


def test_report_without_a_ledger_is_a_one_line_error(tmp_path: Path) -> None:
    error = assert_one_line_error(evalledger(tmp_path, tmp_path / "none.db", "report", "latest"))
    assert "none.db" in error


# -- what gets run ---------------------------------------------------------------------------


def _tag_green(root: Path) -> None:
    for name in GREEN:
        path = root / "tasks" / f"{name}.yaml"
        text = path.read_text(encoding="utf-8")
        assert "tags: [smoke, python]\n" in text
        path.write_text(text.replace("tags: [smoke, python]\n", "tags: [smoke, python, green]\n"),
                        encoding="utf-8")


@pytest.mark.parametrize("how", ["tag", "files"])
def test_all_succeed_exits_0(tmp_path: Path, how: str) -> None:
    root = copy_smoke(tmp_path)
    if how == "tag":
        _tag_green(root)
        args = [str(root / "tasks"), "--tag", "green"]
    else:
        args = [str(root / "tasks" / f"{name}.yaml") for name in GREEN]
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", *args)
    assert result.returncode == 0, result
    run_id = result.out_lines[0]
    expected = {f"default/{name}/00" for name in GREEN}
    assert {k for line in result.out_lines for k in TASK_KEY.findall(line)} == expected
    assert not [line for line in result.out_lines if line.startswith("[")]  # no --stream
    assert SUMMARY.match(result.out_lines[-2])["succeeded"] == "2"
    started = of_type(events(db, run_id), "run.started")[0]
    assert set(started.planned) == expected


@pytest.mark.parametrize("what", ["missing path", "empty folder", "no paths", "bad run id"])
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, what: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a task\n")
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    args = {
        "missing path": ["run", str(tmp_path / "missing")],
        "empty folder": ["run", str(tmp_path / "empty")],
        "no paths": ["run"],
        "bad run id": ["run", str(tmp_path / "tasks"), "--run-id", "no spaces"],
    }[what]
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, *args)
    assert_one_line_error(result)
    assert result.stdout == ""
    if what == "missing path":
        assert "missing" in result.stderr
    if db.exists():
        with Ledger(db, read_only=True) as ledger:
            assert ledger.count() == 0


def test_malformed_task_file_is_skipped_and_recorded(tmp_path: Path) -> None:
    root = copy_smoke(tmp_path)
    mixed = root / "mixed"  # beside tasks/, so ../agent.py and ../fixtures still resolve
    mixed.mkdir()
    for name in GREEN:
        shutil.copy(root / "tasks" / f"{name}.yaml", mixed)
    bogus = mixed / "bogus.yaml"
    bogus.write_text(
        (root / "tasks" / "reverse-string.yaml").read_text(encoding="utf-8") + "bogus: 1\n",
        encoding="utf-8",
    )
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", str(mixed))
    # Not fatal: the rest ran; but said, and the exit code is 1 (unless --allow-skipped).
    assert result.returncode == 1, result
    assert "1 task file(s) skipped" in result.stdout
    assert [line for line in result.err_lines if line.startswith("skipped ")] == [
        f"skipped {bogus}: unknown key 'bogus'"
    ]
    run_id = result.out_lines[0]
    evs = events(db, run_id)
    skipped = of_type(evs, "task.skipped")
    assert [(Path(e.path).name, e.reason) for e in skipped] == [
        ("bogus.yaml", "unknown key 'bogus'")
    ]
    completed = of_type(evs, "task.completed")
    assert {e.task_key: e.final_status for e in completed} == {
        f"default/{name}/00": "SUCCESS" for name in GREEN
    }
    report = run_json(tmp_path, run_id)
    assert [s["reason"] for s in report["skipped_tasks"]] == ["unknown key 'bogus'"]
    assert evalledger(tmp_path, db, "verify").returncode == 0


def test_only_malformed_files_is_a_one_line_error(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    bad = tmp_path / "tasks" / "ok.yaml"
    bad.write_text(bad.read_text() + "bogus: 1\n")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", str(tmp_path / "tasks"))
    error = assert_one_line_error(result)
    assert "skipped" in error
    assert any("unknown key 'bogus'" in line for line in result.err_lines)


# -- Ctrl-C, resume and drift ----------------------------------------------------------------


@pytest.fixture
def sleep_suite(tmp_path: Path) -> Iterator[SleepSuite]:
    suite = make_sleep_suite(tmp_path)
    yield suite
    for pid in suite.pids():
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _assert_dead(pids: Sequence[int]) -> None:
    assert not still_alive(pids, timeout=PATIENCE), "a process of the interrupted task survived"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_ctrl_c_interrupts_and_resume_finishes(sleep_suite: SleepSuite) -> None:
    suite = sleep_suite
    stopped = run_and_interrupt(suite)
    assert stopped.returncode == 130, stopped
    # Long before the sleeper's 600 s were up: the interruption ended it.
    assert stopped.seconds_to_exit < PATIENCE, stopped
    assert "; resume with: evalledger --ledger " in stopped.stderr
    assert "Traceback" not in stopped.stderr
    run_id = stopped.stdout_lines[0]
    assert RUN_ID.match(run_id)
    assert any(FAST in line and line.startswith("SUCCESS") for line in stopped.stdout_lines)
    assert len(stopped.pids) == 2  # the sleeper and its grandchild
    _assert_dead(stopped.pids)

    assert evalledger(suite.root, suite.db, "verify").returncode == 0
    evs = events(suite.db, run_id)
    assert [e.task_key for e in of_type(evs, "task.interrupted")] == [SLEEPY]
    assert [e.task_key for e in of_type(evs, "task.completed")] == [FAST]
    assert [e.task_key for e in of_type(evs, "task.started")] == [FAST, SLEEPY]
    assert evs[-1].type == "run.finished"
    assert evs[-1].status == "interrupted"
    report = run_json(suite.root, run_id)
    assert report["status"] == "interrupted"
    assert (report["tasks_planned"], report["tasks_run"], report["tasks_unfinished"]) == (3, 1, 2)
    rebuilt = evalledger(suite.root, suite.db, "report", run_id, "--format", "json")
    assert rebuilt.stdout == (suite.root / "runs" / run_id / "run.json").read_text("utf-8")

    planned = set(of_type(evs, "run.started")[0].planned)
    unfinished = planned - {e.task_key for e in of_type(evs, "task.completed")}
    assert unfinished == {SLEEPY, PENDING}

    resumed = evalledger(suite.root, suite.db, "resume", "latest")
    assert resumed.returncode == 0, resumed
    assert resumed.out_lines[0] == run_id
    assert not [line for line in resumed.err_lines if line.startswith("drift:")]
    assert "resuming 2 task(s), keeping 1" in resumed.stderr

    after = events(suite.db, run_id)
    at = max(i for i, e in enumerate(after) if e.type == "run.resumed")
    assert after[at].to_run == [SLEEPY, PENDING]
    new_starts = {e.task_key: e.attempt for e in after[at:] if e.type == "task.started"}
    # The interrupted task runs as its second attempt; the one never started, as its first.
    assert new_starts == {SLEEPY: 2, PENDING: 1}
    assert set(new_starts) == unfinished
    assert after[-1].type == "run.finished"
    assert after[-1].status == "completed"

    report = run_json(suite.root, run_id)
    assert report["status"] == "completed"
    assert (report["tasks_planned"], report["tasks_run"], report["tasks_unfinished"]) == (3, 3, 0)
    assert {row["task_key"]: (row["final_status"], row["attempts"]) for row in report["tasks"]} \
        == {FAST: ("SUCCESS", 1), SLEEPY: ("SUCCESS", 2), PENDING: ("SUCCESS", 1)}
    rebuilt = evalledger(suite.root, suite.db, "report", "latest", "--format", "json")
    assert rebuilt.stdout == (suite.root / "runs" / run_id / "run.json").read_text("utf-8")
    assert evalledger(suite.root, suite.db, "verify").returncode == 0

    again = evalledger(suite.root, suite.db, "resume", run_id)
    assert again.returncode == 0, again
    assert "nothing to resume" in again.stdout


def _assert_recorded_interruption(suite: SleepSuite, stopped: Interrupted) -> None:
    assert stopped.returncode == 130, stopped
    assert "; resume with: evalledger --ledger " in stopped.stderr
    assert "Traceback" not in stopped.stderr
    _assert_dead(stopped.pids)
    assert evalledger(suite.root, suite.db, "verify").returncode == 0
    evs = events(suite.db, stopped.stdout_lines[0])
    assert [e.task_key for e in of_type(evs, "task.interrupted")] == [SLEEPY]
    assert (evs[-1].type, evs[-1].status) == ("run.finished", "interrupted")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_sigterm_is_handled_like_ctrl_c(sleep_suite: SleepSuite) -> None:
    stopped = run_and_interrupt(sleep_suite, sig=signal.SIGTERM)
    _assert_recorded_interruption(sleep_suite, stopped)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_second_ctrl_c_kills_at_once(tmp_path: Path) -> None:
    # The task ignores SIGTERM, so the first Ctrl-C alone would wait out the kill
    # grace period (made 120 s here, 2 s by default) before SIGKILL; the second one
    # must not wait: the run ends long before the grace period would.
    suite = make_sleep_suite(tmp_path, argv=True, IGNORE_TERM=True)
    try:
        stopped = run_and_interrupt(suite, "--kill-grace", "120", again=True)
        assert stopped.seconds_to_exit < PATIENCE, stopped
        _assert_recorded_interruption(suite, stopped)
    finally:
        for pid in suite.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _edit_command(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["command"] += "  # edited"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def _edit_env(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["env"] = {"MODE": "changed"}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("edit", [_edit_command, _edit_env], ids=["command", "env"])
def test_resume_reports_drift_of_exactly_the_edited_task(
    sleep_suite: SleepSuite, edit
) -> None:
    suite = sleep_suite
    stopped = run_and_interrupt(suite)
    assert stopped.returncode == 130, stopped
    run_id = stopped.stdout_lines[0]
    edit(suite.tasks / "a-fast.yaml")
    with Ledger(suite.db, read_only=True) as ledger:
        before = ledger.count()

    strict = evalledger(suite.root, suite.db, "resume", run_id, "--strict")
    error = assert_one_line_error(strict)
    assert run_id in error and "--strict" in error
    drift = [line for line in strict.err_lines if line.startswith("drift:")]
    assert drift, strict.stderr
    assert set(TASK_KEY.findall(strict.stderr)) == {FAST}
    with Ledger(suite.db, read_only=True) as ledger:
        assert ledger.count() == before  # a refused resume records nothing

    resumed = evalledger(suite.root, suite.db, "resume", run_id)
    assert resumed.returncode == 0, resumed
    assert [line for line in resumed.err_lines if line.startswith("drift:")] == drift
    assert set(TASK_KEY.findall(resumed.stderr)) == {FAST}
    evs = events(suite.db, run_id)
    at = max(i for i, e in enumerate(evs) if e.type == "run.resumed")
    assert evs[at].drift["lines"] == [line.removeprefix("drift: ") for line in drift]
    # The drifted task had finished: it is kept, not re-run.
    assert {e.task_key for e in evs[at:] if e.type == "task.started"} == {SLEEPY, PENDING}
    report = run_json(suite.root, run_id)
    assert report["tasks_run"] == 3
    assert report["fingerprint_drift"][0]["lines"] == evs[at].drift["lines"]


# -- streaming and budgets -------------------------------------------------------------------


def test_stream_prefixes_task_output(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    write_task(
        tasks / "echo.yaml",
        'echo hello; echo oops >&2; echo \'{"type": "note", "x": 1}\'; echo bye',
    )
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", str(tasks), "--stream")
    assert result.returncode == 0, result
    key = "default/echo/00"
    out = result.out_lines
    assert f"[{key}] hello" in out
    assert f"[{key}] bye" in out
    assert [line for line in out if line.startswith(f"[{key}] ") and "note" in line]
    assert f"[{key}] oops" in result.err_lines
    done = next(i for i, line in enumerate(out) if line.startswith("SUCCESS"))
    assert out.index(f"[{key}] bye") < done

    quiet = evalledger(tmp_path, db, "run", str(tasks))
    assert quiet.returncode == 0, quiet
    assert not [line for line in quiet.out_lines + quiet.err_lines if line.startswith("[")]


def test_max_cost_stops_dispatching(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    usage = json.dumps({"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 10,
                        "output_tokens": 5, "cost_usd": 0.6})
    for name in ("cost-1", "cost-2", "cost-3"):
        write_task(tasks / f"{name}.yaml", f"echo '{usage}'; echo done")
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", str(tasks), "-j", "1", "--max-cost", "1.0")
    # 0.6 spent after the first task (under 1.0), 1.2 after the second: the third never starts.
    assert result.returncode == 1, result  # not every planned task succeeded
    run_id = result.out_lines[0]
    summary = SUMMARY.match(result.out_lines[-2])
    assert summary is not None, result.out_lines
    assert summary["status"] == "budget_stopped"
    assert (summary["run"], summary["planned"], summary["succeeded"]) == ("2", "3", "2")
    evs = events(db, run_id)
    assert [e.task_key for e in of_type(evs, "task.started")] == [
        "default/cost-1/00", "default/cost-2/00"
    ]
    assert evs[-1].type == "run.finished"
    assert evs[-1].status == "budget_stopped"
    report = run_json(tmp_path, run_id)
    assert report["status"] == "budget_stopped"
    assert report["total_cost_usd"] == pytest.approx(1.2)
    assert report["tasks_unfinished"] == 1
    assert evalledger(tmp_path, db, "verify").returncode == 0


# -- known bugs --------------------------------------------------------------------------------


def test_run_with_unwritable_out_is_a_one_line_error(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    (tmp_path / "a-file").write_text("")
    result = evalledger(
        tmp_path, tmp_path / "l.db", "run", str(tmp_path / "tasks"),
        "--out", str(tmp_path / "a-file" / "runs"),
    )
    assert_one_line_error(result)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_shell_command_gets_the_grace_period(tmp_path: Path) -> None:
    # The grace period is made long (120 s, not 2 s) so that a loaded machine cannot
    # run it out: only a wait that ends with the sh leader would miss the clean-up.
    suite = make_sleep_suite(tmp_path, argv=False, CLEAN_UP=True)
    try:
        stopped = run_and_interrupt(suite, "--kill-grace", "120")
        assert stopped.returncode == 130, stopped
        # The sleeper's SIGTERM handler needs 0.3 s of the grace period.
        assert (suite.state / "cleaned-up").exists()
    finally:
        for pid in suite.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_argv_command_gets_the_grace_period(tmp_path: Path) -> None:
    # The same as above with python as the group's leader: the grace period works.
    suite = make_sleep_suite(tmp_path, argv=True, CLEAN_UP=True)
    try:
        stopped = run_and_interrupt(suite, "--kill-grace", "120")
        _assert_recorded_interruption(suite, stopped)
        assert (suite.state / "cleaned-up").exists()
    finally:
        for pid in suite.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
