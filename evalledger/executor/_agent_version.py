"""``agent_version_command``: the agent's version, asked once per batch.

An agent whose stream names no version (Codex, OpenCode) is asked by a command the
task gives (``codex --version``). It runs on this machine, in the task's folder, with
the task's environment, at most ``PROBE_TIMEOUT`` seconds, before the attempt's clock
starts; its first line of output (stdout, else stderr) is the version. Asked once per
batch for each command, folder and environment (different ones are asked side by
side): every attempt it covers records the same answer, so a version that changes
between batches (or between variants) shows as version drift. A command that fails is
recorded as what it said (``unknown: exit 127: codex: not found``), never skipped: an
unknown version is a fact about the attempt too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

import trio

from evalledger.suite import ResolvedTask

PROBE_TIMEOUT = 30.0
# The longest version recorded: a command printing a screenful is not a version.
MAX_VERSION = 200

_Key = tuple[str, str, tuple[tuple[str, str], ...]]


class AgentVersions:
    """The versions asked in one batch, by command, folder and environment."""

    def __init__(self) -> None:
        self._known: dict[_Key, str] = {}
        # One per question: attempts asking the same wait for one answer; others ask
        # side by side.
        self._asking: dict[_Key, trio.Lock] = {}

    async def version(self, task: ResolvedTask, base_env: Mapping[str, str]) -> str | None:
        """The version ``task``'s ``agent_version_command`` prints (None: it has none)."""
        command = task.agent_version_command
        if command is None:
            return None
        folder = str(Path(task.source).parent)
        env = {**base_env, **task.env, **task.binds, "EVALLEDGER_TASK_DIR": folder}
        key = (command, folder, tuple(sorted(env.items())))
        async with self._asking.setdefault(key, trio.Lock()):
            if key not in self._known:
                self._known[key] = await _ask(command, folder, env)
            return self._known[key]


async def _ask(command: str, folder: str, env: dict[str, str]) -> str:
    with trio.move_on_after(PROBE_TIMEOUT):
        try:
            done = await trio.run_process(
                ["/bin/sh", "-c", command], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                capture_stdout=True, capture_stderr=True, check=False,
                start_new_session=True, deliver_cancel=_kill_group)
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            return f"unknown: {e.strerror or e}{where}"[:MAX_VERSION]
        except (ValueError, TypeError) as e:  # a NUL in the command or the environment
            return f"unknown: {e}"[:MAX_VERSION]
        said = _first_line(done.stdout) or _first_line(done.stderr)
        if done.returncode != 0:
            return f"unknown: exit {done.returncode}: {said}"[:MAX_VERSION]
        return said[:MAX_VERSION] or "unknown: printed nothing"
    return f"unknown: no answer in {PROBE_TIMEOUT:g}s"


async def _kill_group(process: trio.Process) -> None:
    # Its own session: what the shell started goes with it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _first_line(output: bytes) -> str:
    for line in output.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    return ""
