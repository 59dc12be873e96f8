"""Running the CLI from tests: in-process by default, as a real process where that matters.

``evalledger(...)`` runs a command in this process through click's ``CliRunner``
(about 10 ms, against ~0.5 s of CPU for a new interpreter). A real process
(``spawn``) is only for what needs one: a real signal, a crash, two processes
racing on one ledger, the console script itself. ``EntryPoint`` runs the entry
point in real processes forked from a server that imported the package once.

Waiting is always for an event (a row in the ledger, a file, a line of output)
with a generous deadline, never a fixed sleep: ``wait_until`` (tests/waiting.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import click
import yaml
from click.testing import CliRunner

from evalledger.cli import cli
from evalledger.ledger import AnyEvent, Ledger, LedgerError
from tests.waiting import PATIENCE, wait_until

COMMAND = [sys.executable, "-m", "evalledger.cli"]
# A task key as the CLI prints it (no experiment: variant "default").
TASK_KEY = re.compile(r"default/[a-z0-9][a-z0-9._-]*/\d{2}\b")
RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")
# A count may say how it met the tasks' `expect` ("2 failed as expected").
_AS_EXPECTED = r"(?: as expected| \(\d+ as expected\))?"
SUMMARY = re.compile(
    r"^run (?P<run_id>\S+) (?P<status>\w+): (?P<run>\d+) of (?P<planned>\d+) tasks run, "
    r"(?P<succeeded>\d+) succeeded(?: \(\d+ unexpectedly\))?, "
    rf"(?P<failed>\d+) failed{_AS_EXPECTED}, (?P<error>\d+) error{_AS_EXPECTED}; cost "
)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""

    @property
    def out_lines(self) -> list[str]:
        return self.stdout.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.stderr.splitlines()


def _env(**extra: str) -> dict[str, str]:
    """This process's environment (so TMPDIR, pointed into the test's folder, too),
    without a ledger from the environment."""
    env = {k: v for k, v in os.environ.items() if k != "EVALLEDGER_LEDGER"}
    env.update(extra)
    return env


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def evalledger(
    cwd: Path, db: Path | None, *args: str, env: dict[str, str] | None = None
) -> Result:
    """``evalledger [--ledger DB] ARGS...`` run from ``cwd``, in this process.

    As from a real process: the exit code (``sys.exit`` included), stdout and
    stderr apart, and an exception that escaped the CLI shows as a traceback on
    stderr with exit code 1. ``env`` is added to the environment for the call;
    ``EVALLEDGER_LEDGER`` is unset unless ``env`` sets it.
    """
    ledger_args = ["--ledger", str(db)] if db is not None else []
    overrides: dict[str, str | None] = {"EVALLEDGER_LEDGER": None, **(env or {})}
    with working_directory(cwd):
        result = CliRunner().invoke(cli, [*ledger_args, *args], prog_name="evalledger",
                                    env=overrides)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(result.exception)
        )
    return Result(result.exit_code, result.stdout, stderr, result.stdout_bytes)


def spawn(cwd: Path, db: Path, *args: str, command: Sequence[str] = COMMAND,
          **popen: Any) -> subprocess.Popen[str]:
    """``evalledger --ledger DB ARGS...`` started as a real process (text mode);
    ``env``: added to this process's environment."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(
        [*command, "--ledger", str(db), *args], cwd=cwd, env=_env(**popen.pop("env", {})),
        text=True, **popen
    )


def assert_one_line_error(result: Result) -> str:
    """Exit 2, no traceback, and exactly one ``Error:`` line, the last on stderr."""
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.err_lines if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert result.err_lines[-1] == errors[0], result.stderr
    return errors[0]


def events(db: Path, run_id: str) -> list[AnyEvent]:
    """The run's facts: its snapshots (derived, after run.finished) left out."""
    with Ledger(db, read_only=True) as ledger:
        return [e for e in ledger.events(run_id) if e.type != "run.snapshot"]


def of_type(evs: Sequence[AnyEvent], type_: str) -> list[AnyEvent]:
    return [e for e in evs if e.type == type_]


def run_json(cwd: Path, run_id: str) -> dict:
    return json.loads((cwd / "runs" / run_id / "run.json").read_text(encoding="utf-8"))


def edited_by_hand(db: Path, sql: str, *params: object) -> None:
    """``sql`` run on the ledger's file past its append-only trigger: what an editor of
    the file could do, and nothing evalledger writes."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("DROP TRIGGER IF EXISTS events_no_update")
        conn.execute(sql, params)
    finally:
        conn.close()


def write_task(
    path: Path, command: str | list[str], *, tags: Sequence[str] = (),
    env: dict[str, str] | None = None, timeout: float = 20, criteria: list[dict] | None = None,
) -> Path:
    data: dict = {"command": command, "timeout": timeout}
    if tags:
        data["tags"] = list(tags)
    if env:
        data["env"] = env
    data["success_criteria"] = criteria or [{"type": "exit_code", "equals": 0}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_tasks(folder: Path, tasks: Mapping[str, Mapping[str, object]]) -> Path:
    """A tasks folder: one ``<name>.yaml`` per entry, holding its fields as written."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, fields in tasks.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(dict(fields)), encoding="utf-8")
    return folder


def count_events(db: Path, run_id: str, type_: str) -> int:
    """How many events of one type the run has committed (0 while there is no ledger)."""
    try:
        with Ledger(db, read_only=True) as ledger:
            return sum(1 for _ in ledger.events(run_id, types={type_}))
    except LedgerError:
        return 0  # not created or not migrated yet


def wait_for_events(db: Path, run_id: str, type_: str, at_least: int = 1,
                    proc: subprocess.Popen[Any] | None = None) -> None:
    """Until the run has committed ``at_least`` events of ``type_``; with ``proc``, fail
    at once if that process ended first."""

    def reached() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (exit {proc.returncode}) before "
                                 f"{at_least} {type_} of run {run_id}")
        return count_events(db, run_id, type_) >= at_least

    wait_until(reached, f"{at_least} {type_} of run {run_id}")


def wait_for_start(db: Path, run_id: str, proc: subprocess.Popen[Any] | None = None) -> None:
    """Until the run has started a task (the file may exist before it is a ledger)."""
    wait_for_events(db, run_id, "task.started", proc=proc)


class Hung(Exception):
    """An in-process command ran past the deadline of ``no_hang``."""


@contextlib.contextmanager
def no_hang(seconds: float = PATIENCE) -> Iterator[None]:
    """Raise ``Hung`` in this (the main) thread if the block is still running after
    ``seconds``: a regression that loops forever fails instead of hanging the suite."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the entry point in real processes, without a new interpreter each time ------------------

_FORK_SERVER = """\
import importlib, json, os, sys, tempfile, traceback
from evalledger.cli import main  # imported once; every child starts from here
from evalledger.cli._main import COMMANDS

# What the commands load when they run, loaded once here too: a call costs its own work.
for name in {"evalledger.cli." + m.split(":")[0] for m in COMMANDS.values()} | {
        "evalledger.ledger._verify", "evalledger.ledger._events", "evalledger.ledger._lite",
        "evalledger.app._snapshot_check", "evalledger.app._repository", "evalledger.app"}:
    importlib.import_module(name)

def exit_code(code):
    # What the interpreter makes of a SystemExit code when it exits.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            tempfile.tempdir = None  # TMPDIR as the request has it
            for fd, path, flags in (
                (0, os.devnull, os.O_RDONLY),
                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            ):
                opened = os.open(path, flags, 0o600)
                os.dup2(opened, fd)
                os.close(opened)
            sys.argv = ["evalledger", *request["args"]]
            try:
                main()
                code = 0
            except SystemExit as e:
                code = exit_code(e.code)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class EntryPoint:
    """``evalledger``'s entry point (``evalledger.cli.main``), each call in a process of
    its own: a real exit status, real stdout and stderr files, its own cwd and
    environment. The processes are forked from one server that imported the package
    once, so a call costs a fork (milliseconds), not an interpreter start (~0.5 s).
    Interpreter start-up itself is covered where it matters (``COMMAND``, the
    console script).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._calls = 0
        self._pending = b""
        self._pid: int | None = None
        self._exit: int | None = None
        self._server = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER], cwd=folder, env=_env(TMPDIR=str(folder)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )

    def __call__(self, *args: str, cwd: Path, env: dict[str, str]) -> Result:
        self.start(*args, cwd=cwd, env=env)
        return self.wait()

    def start(self, *args: str, cwd: Path, env: dict[str, str]) -> int:
        """Start a call and return its pid at once; ``poll``/``wait`` end it (one call
        at a time)."""
        assert self._server.stdin is not None
        assert self._exit is None and self._pid is None, "a call is still running"
        self._calls += 1
        out, err = (self.folder / f"{self._calls}.{name}" for name in ("out", "err"))
        request = {"args": list(args), "cwd": str(cwd), "env": env,
                   "stdout": str(out), "stderr": str(err)}
        self._server.stdin.write(json.dumps(request).encode() + b"\n")
        self._server.stdin.flush()
        self._pid = self._reply("the entry point's fork server to start a call")["pid"]
        return self._pid

    def poll(self) -> int | None:
        """The started call's exit code once it has ended, else None."""
        if self._exit is None and (b"\n" in self._pending or self._readable(0.0)):
            self._exit = self._reply(f"evalledger (pid {self._pid}) to end")["exit"]
        return self._exit

    def wait(self) -> Result:
        """The started call's result, once it ends (failing after ``PATIENCE``)."""
        assert self._pid is not None, "no call was started"
        try:
            code = self._exit if self._exit is not None else self._reply(
                f"evalledger (pid {self._pid}) to end")["exit"]
        except AssertionError:  # it did not end in time, or the server died
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self.close()
            raise
        finally:
            self._pid = self._exit = None
        # A call killed at once may not have opened its files yet.
        out, err = (_take(self.folder / f"{self._calls}.{name}") for name in ("out", "err"))
        return Result(code, out.decode(), err.decode(), out)

    def _readable(self, timeout: float) -> bool:
        assert self._server.stdout is not None
        ready, _, _ = select.select([self._server.stdout.fileno()], [], [], timeout)
        return bool(ready)

    def _reply(self, what: str) -> dict[str, int]:
        """The server's next line, read from its pipe unbuffered (select sees it all);
        fail naming ``what`` was awaited if none comes in ``PATIENCE``."""
        assert self._server.stdout is not None
        pipe = self._server.stdout.fileno()

        def a_line() -> bool:
            if b"\n" not in self._pending and self._readable(0.1):
                chunk = os.read(pipe, 65536)
                assert chunk, "the entry point's fork server died"
                self._pending += chunk
            return b"\n" in self._pending

        wait_until(a_line, what, every=0)
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.kill()
        self._server.communicate()


def _take(path: Path) -> bytes:
    """A file's bytes, the file removed; nothing if there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    path.unlink()
    return data


def command_paths(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command under ``group``, nested groups included."""
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append((*path, name))
        if isinstance(command, click.Group):
            found += command_paths(command, (*path, name))
    return found
