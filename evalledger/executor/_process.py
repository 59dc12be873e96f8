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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import trio

# RunOptions' own default, re-exported: the executor's helpers fall back to it.
from evalledger.options import DEFAULT_KILL_GRACE as DEFAULT_KILL_GRACE

from ._marks import kill_marked


class Child:
    """A command started by ``spawn``: what the runner uses of a ``trio.Process`` (its
    pid, its pipes as trio streams, its exit), for a process started on the loop thread.

    ``trio.lowlevel.open_process`` starts every process from a worker thread, to keep a
    slow ``fork`` off the event loop. With ``vfork`` (what CPython uses here: no
    ``preexec_fn``) the parent is held only until the child calls ``exec``, and the hop
    to a thread and back cost more than that: about 470 us of CPU per task
    (bench/executor.py). The exit is awaited on a pidfd, as trio does.
    """

    # Whether nothing of its group can be left once it is reaped (see ``Confined``).
    ends_its_group = False

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int,
                 stdin: trio.lowlevel.FdStream | None, stdout: trio.lowlevel.FdStream,
                 stderr: trio.lowlevel.FdStream) -> None:
        self._popen = popen
        self._pidfd: int | None = pidfd
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        if self._popen.returncode is None:
            assert self._pidfd is not None
            await trio.lowlevel.wait_readable(self._pidfd)
            self._popen.wait()  # exited: this reaps it at once
            self._close_pidfd()
        return self._popen.returncode

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def terminate(self) -> None:
        """Ask the command and everything in its group to stop (SIGTERM)."""
        kill_group(self.pid, signal.SIGTERM)

    def __del__(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)


class Confined(Child):
    """A command started under bubblewrap (``_isolation``), in a pid namespace of its own.

    bwrap does not forward SIGTERM, and a signal that reaches bwrap itself ends the
    namespace at once (its init dies, the kernel SIGKILLs the rest): ``terminate``
    signals the processes inside instead, every one but the namespace's init, wherever
    they moved (``setsid``) within it. bwrap reports a command killed by signal N as
    exit 128+N: once the runner has sent N inside, that exit is reported as -N, as a
    command run without isolation would be (a SIGKILL of the group kills bwrap itself:
    -9 already); any other exit code is reported as bwrap gave it (bwrap cannot tell a
    command's own ``exit 143`` from a death by SIGTERM).
    """

    _sent: frozenset[int] = frozenset()
    # Every process of the attempt is in the namespace, and the kernel kills and reaps
    # them all before its init's exit lets bwrap exit. What is left of the group is the
    # init's zombie, reparented to pid 1: where pid 1 reaps it late (some containers'
    # inits), looking for live members would scan /proc for nothing at every attempt.
    ends_its_group = True

    def terminate(self) -> None:
        self._sent |= {signal.SIGTERM}
        signal_namespace(self.pid, signal.SIGTERM)

    @property
    def returncode(self) -> int | None:
        code = self._popen.returncode
        if code is not None and code > 128 and code - 128 in self._sent:
            return 128 - code
        return code


class Contained(Confined):
    """A ``docker run`` client (``_isolation``): it proxies the signals it gets to its
    container (``--init`` hands them to the command), so SIGTERM goes to the client's
    group as without isolation. Its exit code is the container's (128+N for a signal,
    reported as ``Confined`` does). A container outlives a killed client: the runner
    removes it by name afterwards."""

    ends_its_group = False  # its group is the client's own: a helper it ran may be left

    def terminate(self) -> None:
        self._sent |= {signal.SIGTERM}
        kill_group(self.pid, signal.SIGTERM)


async def spawn(
    command: str | list[str], *, cwd: str, env: Mapping[str, str], stdin: bool = True,
    pass_fds: Sequence[int] = (), kind: type[Child] | None = None,
) -> Child | trio.Process:
    """Start ``command`` (a string: ``/bin/sh -c``; a list: argv) with piped streams, in a
    new session (its pid is its process group); ``kind``: what to return for it (a
    ``Confined`` for a bwrap command line, a ``Contained`` for ``docker run``; Linux
    only). ``pass_fds`` stay open in the child."""
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if not _HAS_PIDFD:
        # Not Linux: trio's way (a worker thread, its own waiting); no isolation there.
        assert kind is None and not pass_fds, "isolation is Linux only"
        return await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=dict(env),
            start_new_session=True,
        )
    await trio.lowlevel.checkpoint()
    ends: list[int] = []  # the child's ends: closed here once it has them
    ours: list[trio.lowlevel.FdStream] = []
    try:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        ends.append(out_w)
        ours.append(trio.lowlevel.FdStream(out_r))
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ends.append(err_w)
        ours.append(trio.lowlevel.FdStream(err_r))
        child_stdin: int = subprocess.DEVNULL
        if stdin:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            ends.append(in_r)
            ours.append(trio.lowlevel.FdStream(in_w))
            child_stdin = in_r
        popen = subprocess.Popen(argv, stdin=child_stdin, stdout=out_w, stderr=err_w, cwd=cwd,
                                 env=dict(env), start_new_session=True, pass_fds=pass_fds)
    except BaseException:
        for stream in ours:
            stream.close()
        raise
    finally:
        for fd in ends:
            os.close(fd)
    try:
        pidfd = os.pidfd_open(popen.pid)
    except BaseException:
        popen.kill()
        popen.wait()
        for stream in ours:
            stream.close()
        raise
    return (kind or Child)(popen, pidfd, ours[2] if stdin else None, ours[0], ours[1])


_HAS_PIDFD = hasattr(os, "pidfd_open") and hasattr(os, "pipe2")


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal every process in the group led by ``pid``; quietly, if none is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stat_fields(pid: str) -> list[bytes] | None:
    """``/proc/PID/stat`` after the command name (state first), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    return stat[stat.rfind(b")") + 2 :].split()


def signal_namespace(bwrap_pid: int, sig: int) -> None:
    """Signal every process in the pid namespace bwrap ``bwrap_pid`` made, but its init
    (bwrap's child, whose death would end the namespace at once)."""
    pids = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    init = next((p for p in pids if (f := _stat_fields(p)) and int(f[1]) == bwrap_pid), None)
    if init is None:
        return
    try:
        namespace = os.readlink(f"/proc/{init}/ns/pid")
    except OSError:
        return
    for pid in pids:
        if pid == init:
            continue
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                os.kill(int(pid), sig)


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
        fields = _stat_fields(entry.name)
        if fields is not None and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def end_group(
    process: Child | trio.Process, grace: float = DEFAULT_KILL_GRACE,
    kill_now: trio.Event | None = None,
) -> None:
    """Stop the leader and everything in its group; return once the leader is reaped.

    SIGTERM to the whole group, then SIGKILL once ``grace`` seconds pass or
    ``kill_now`` is set (a second Ctrl-C), whichever comes first. The grace period
    waits for the *group*, not just the leader: ``/bin/sh -c "python agent.py"``
    dies on SIGTERM at once while the agent it forked is still cleaning up.
    Callers in a cancelled context shield it:
    ``with trio.CancelScope(shield=True): await end_group(p)``.
    """
    def left() -> bool:
        ended = isinstance(process, Child) and process.ends_its_group
        return not ended and group_alive(process.pid)

    if process.returncode is None or left():
        if isinstance(process, Child):
            process.terminate()
        else:
            kill_group(process.pid, signal.SIGTERM)
        with trio.move_on_after(grace) as waiting:
            async with trio.open_nursery() as nursery:
                if kill_now is not None:
                    nursery.start_soon(_cancel_when_set, kill_now, waiting)
                await process.wait()
                while left():
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
