"""Process groups: who counts as alive, and how long ending a group takes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import trio

from evalledger.executor._process import end_group, group_alive, spawn


def test_group_alive_ignores_zombies() -> None:
    # A group whose only member is a zombie (exited, not yet reaped) is not alive:
    # waiting for it would wait out the whole grace period for nothing.
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
    try:
        os.killpg(child.pid, 0)  # the kernel still has the group...
        assert not group_alive(child.pid)  # ...but nobody in it is running
    finally:
        child.wait()
    assert not group_alive(child.pid)


def test_group_alive_sees_a_member_that_outlived_its_leader() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen(['sleep', '30']); print(p.pid)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    grandchild = int(leader.stdout.readline())  # type: ignore[union-attr]
    leader.wait()
    try:
        assert group_alive(leader.pid)
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_end_group_returns_as_soon_as_a_shell_and_its_program_are_gone(tmp_path) -> None:
    # /bin/sh -c forks the program (dash does not exec the last command): both die
    # on SIGTERM, and the stop must not sit out the 5 s grace period.
    async def main() -> float:
        process = await spawn(f"{sys.executable} -c 'import time; time.sleep(60)'; true",
                              cwd=str(tmp_path), env=os.environ, stdin=False)
        await trio.sleep(0.3)
        start = time.monotonic()
        await end_group(process, grace=5.0)
        return time.monotonic() - start

    assert trio.run(main) < 2.0


def test_end_group_gives_a_terminating_program_its_grace_period(tmp_path) -> None:
    marker = tmp_path / "cleaned-up"
    script = tmp_path / "slow_exit.py"
    script.write_text(
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    time.sleep(0.4); open({str(marker)!r}, 'w').close(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )

    async def main() -> None:
        process = await spawn(f"{sys.executable} {script}", cwd=str(tmp_path), env=os.environ,
                              stdin=False)
        assert process.stdout is not None
        assert b"ready" in await process.stdout.receive_some(100)
        await end_group(process, grace=5.0)

    trio.run(main)
    assert marker.exists()
