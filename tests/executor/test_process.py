"""Process groups: who counts as alive, and how long ending a group takes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from evalledger.executor._process import end_group, group_alive, spawn

from ..waiting import PATIENCE, wait_until


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0]


def test_group_alive_ignores_zombies() -> None:
    # A group whose only member is a zombie (exited, not yet reaped) is not alive:
    # waiting for it would wait out the whole grace period for nothing.
    child = subprocess.Popen(["true"], start_new_session=True)
    try:
        wait_until(lambda: _state(child.pid) == b"Z", "the child to exit", every=0.005)
        os.killpg(child.pid, 0)  # the kernel still has the group...
        assert not group_alive(child.pid)  # ...but nobody in it is running
    finally:
        child.wait()
    assert not group_alive(child.pid)


def test_group_alive_sees_a_member_that_outlived_its_leader() -> None:
    leader = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    leader.wait()
    leader.stdout.close()
    try:
        assert group_alive(leader.pid)
    finally:
        os.kill(grandchild, signal.SIGKILL)


async def _ready(process: trio.Process) -> None:
    """Wait for the line ``ready`` on the process's stdout."""
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(PATIENCE):
        while b"ready\n" not in seen:
            chunk = await process.stdout.receive_some(100)
            assert chunk, f"stdout closed before 'ready': {seen!r}"
            seen += chunk


def test_end_group_returns_as_soon_as_a_shell_and_its_program_are_gone(tmp_path: Path) -> None:
    # /bin/sh -c forks the program (dash does not exec a command followed by another):
    # both die on SIGTERM, and the stop must not sit out the grace period.
    grace = 30.0

    async def main() -> float:
        program = f"{sys.executable} -c 'import time; print(\"ready\", flush=True); time.sleep(60)'"
        process = await spawn(f"{program}; true", cwd=str(tmp_path), env=os.environ, stdin=False)
        await _ready(process)  # the program runs, forked by the shell
        start = time.monotonic()
        await end_group(process, grace=grace)
        return time.monotonic() - start

    assert trio.run(main) < grace / 2


def test_end_group_gives_a_terminating_program_its_grace_period(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned-up"
    script = tmp_path / "slow_exit.py"
    script.write_text(
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    time.sleep(0.3); open({str(marker)!r}, 'w').close(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )

    async def main() -> None:
        process = await spawn(f"{sys.executable} {script}", cwd=str(tmp_path), env=os.environ,
                              stdin=False)
        await _ready(process)  # the handler is installed
        await end_group(process, grace=PATIENCE)  # returns once the group is gone

    trio.run(main)
    assert marker.exists()
