"""Child processes in their own process group, and how to end the whole group.

Every command runs as the leader of a new session (``start_new_session=True``),
so its pid is its process group id and ``killpg`` reaches everything it
spawned, grandchildren included. Ending a group: SIGTERM, a grace period, then
SIGKILL; and always a final SIGKILL to the group, because the leader exiting
does not take its children with it and they would keep our pipes open.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import trio

from ._marks import kill_marked

DEFAULT_KILL_GRACE = 2.0


async def spawn(
    command: str | list[str], *, cwd: str, env: Mapping[str, str], stdin: bool = True,
) -> trio.Process:
    """Start ``command`` (a string: ``/bin/sh -c``; a list: argv) with piped streams."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    return await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal every process in the group led by ``pid``; quietly, if none is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in the process group ``pgid``.

    Zombies do not count: a member orphaned by the leader's death is reaped by
    init, and an init that reaps slowly (as in some containers) would otherwise
    make every stop wait out the whole grace period.
    """
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: signal 0 is all there is
        return True
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def end_group(
    process: trio.Process, grace: float = DEFAULT_KILL_GRACE, hurry: trio.Event | None = None
) -> None:
    """Stop the leader and everything in its group; return once the leader is reaped.

    SIGTERM to the whole group, then SIGKILL once ``grace`` seconds pass or
    ``hurry`` is set (a second Ctrl-C), whichever comes first. The grace period
    waits for the *group*, not just the leader: ``/bin/sh -c "python agent.py"``
    dies on SIGTERM at once while the agent it forked is still cleaning up.
    Callers in a cancelled context shield it:
    ``with trio.CancelScope(shield=True): await end_group(p)``.
    """
    if process.returncode is None or group_alive(process.pid):
        kill_group(process.pid, signal.SIGTERM)
        with trio.move_on_after(grace) as waiting:
            async with trio.open_nursery() as nursery:
                if hurry is not None:
                    nursery.start_soon(_cancel_when_set, hurry, waiting)
                await process.wait()
                while group_alive(process.pid):
                    await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
    kill_group(process.pid, signal.SIGKILL)
    await process.wait()


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


# How long the pipes may stay open once the command's group is gone before the
# attempt's escaped descendants are hunted down; then, how long they may sit idle
# before reading stops; and at most how long a flood may keep it going.
ESCAPE_GRACE = 1.0
MAX_DRAIN = 60.0


async def release_pipes(
    pipes_closed: trio.Event, marker: str | None, stuck: Callable[[], bool] = lambda: True,
    grace: float = ESCAPE_GRACE,
) -> bool:
    """Once the command's group is dead, wait for its pipes to close; True if they did.

    A descendant that escaped the group (``setsid``) and kept the pipes would hold
    the attempt until its timeout. After ``grace`` with the pipes open, the
    attempt's processes are killed by their ``marker`` (bytes already in a pipe
    stay readable when its writer dies: nothing is lost). Then reading goes on as
    long as output keeps coming or the readers are busy handing it to the ledger,
    and stops (False) only when ``stuck()`` says nothing came for a whole ``grace``
    with every reader waiting, or after ``MAX_DRAIN`` of a flood from something
    that could not be ended (it rewrote its environment).
    """
    await trio.lowlevel.checkpoint()  # the readers' turn: usually they hit EOF now
    if pipes_closed.is_set():
        return True
    with trio.move_on_after(grace):
        await pipes_closed.wait()
    if pipes_closed.is_set():
        return True
    if marker is not None:
        await trio.to_thread.run_sync(kill_marked, marker)
    give_up = trio.current_time() + MAX_DRAIN
    stuck()  # from now on
    while True:
        with trio.move_on_after(grace):
            await pipes_closed.wait()
        if pipes_closed.is_set():
            return True
        if stuck() or trio.current_time() >= give_up:
            return False
