"""An attempt's confinement (docs/isolation.md): the backend its task asks for, the jail
its commands run in, the model gateway bridged in, and the probes its prelude reports
before the command starts, recorded as its ``task.isolation``.

Split from ``_runner`` (which runs the attempt): what makes the sandbox a boundary, and
checks that it is one, reads apart from what streams and books the attempt.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from evalledger.ledger import TaskIsolation
from evalledger.suite import AgentJudge, ResolvedTask, RunCommand

from . import _limits
from . import isolation as _isolation
from ._process import Child, Confined, Contained, spawn

if TYPE_CHECKING:
    from ._runner import RunContext, _Streams

# How an attempt's commands are confined: bubblewrap's jail or a container.
Jail = _isolation.Jail | _isolation.Container

class IsolationLeak(Exception):
    """A task would hand its confined command what isolation hides, or its isolation
    cannot run here (its message says which): the attempt is ERROR, and the command
    never runs."""


async def confine(task: ResolvedTask, ctx: RunContext, sandbox: Path,
                   attempt: int) -> Jail | None:
    """How the attempt's commands are confined (None: not at all). An isolation that
    cannot run here fails the attempt (an infrastructure ERROR: the runner saw it);
    with ``allow_unconfined`` it runs as none, and its ``task.isolation`` says so.

    Raises:
        IsolationLeak: the task would hand its command what isolation hides, or its
            isolation cannot run here (and running unconfined was not allowed).
    """
    if task.isolation == "none":
        return None
    try:
        backend, image = await isolation_backend(task)
    except _isolation.IsolationUnavailable as e:
        await ctx.writer.append(TaskIsolation(
            run_id=ctx.run_id, task_key=task.task_key, attempt=attempt,
            backend="none" if ctx.allow_unconfined else _asked_backend(task),
            asked=task.isolation, reason=str(e), network="host", uid=os.getuid()))
        if not ctx.allow_unconfined:
            raise IsolationLeak(f"isolation {task.isolation} is not available here: {e} "
                                "(--allow-unconfined runs it with none)") from e
        return None
    graders = [b for c in task.success_criteria if isinstance(c, RunCommand | AgentJudge)
               for b in c.binds]
    if exposed := _isolation.exposed(task.source, ctx.ledger_path, task.workdir,
                                     task.dockerfile, (*task.binds.values(), *graders),
                                     str(ctx.artifacts_root.parent.parent),
                                     str(ctx.sandbox_root)):
        reason = f"isolation leaked: {', '.join(exposed)}"
        await ctx.writer.append(TaskIsolation(
            run_id=ctx.run_id, task_key=task.task_key, attempt=attempt,
            backend=_asked_backend(task), network=task.network, reason=reason,
            uid=os.getuid()))
        raise IsolationLeak(reason)
    if ctx.canary is None:
        ctx.canary = await trio.to_thread.run_sync(_isolation.make_canary, ctx.sandbox_root)
    return await make_jail(task, backend, image, sandbox, ctx.canary, ctx.sandbox_root,
                           ctx.batch_token, ctx.base_env, _bridge(task, ctx))


def _bridge(task: ResolvedTask, ctx: RunContext) -> _isolation.Bridge | None:
    """What ``network: gateway`` binds in: the gateway's socket (and the egress proxy's,
    with ``allow_domains``) and this interpreter."""
    if task.network != "gateway":
        return None
    if ctx.gateway is None or ctx.gateway.socket_path is None:
        raise IsolationLeak("network: gateway, and the batch has no gateway socket")
    egress = None
    if task.allow_domains:
        if ctx.egress is None:
            raise IsolationLeak("allow_domains, and the batch has no egress proxy")
        egress = (str(ctx.egress.socket_path), egress_port(ctx.gateway.port))
    import sys

    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return _isolation.Bridge(str(ctx.gateway.socket_path), ctx.gateway.port, python,
                             sys.base_prefix, egress)


def _asked_backend(task: ResolvedTask) -> str:
    """The backend a task's isolation asks for: ``auto`` is bubblewrap (docker would
    need an image the task does not name)."""
    return "bwrap" if task.isolation == "auto" else task.isolation


def egress_port(gateway_port: int) -> int:
    """The egress proxy's port inside the sandbox: any but the gateway's."""
    from ._egress import PORT

    return PORT if gateway_port != PORT else PORT + 1


async def isolation_backend(
    task: ResolvedTask,
) -> tuple[_isolation.Bwrap | _isolation.Docker, str]:
    """The backend ``task.isolation`` names (``auto``: bwrap), found here (each tried
    once per process), and with docker the id of the task's image ("" with bwrap).

    Raises:
        IsolationUnavailable: it cannot run here.
    """
    if task.isolation in ("bwrap", "auto"):
        found = _isolation.known_bwrap()
        if not isinstance(found, _isolation.Bwrap):
            found = await trio.to_thread.run_sync(_isolation.bwrap)
        return found, ""
    daemon = _isolation.known_docker()
    if not isinstance(daemon, _isolation.Docker):
        daemon = await trio.to_thread.run_sync(_isolation.docker)
    image = await trio.to_thread.run_sync(_isolation.image_id, daemon, task.image,
                                          task.dockerfile)
    return daemon, image


async def make_jail(task: ResolvedTask, backend: _isolation.Bwrap | _isolation.Docker,
                    image: str, sandbox: Path, canary: str, sandbox_root: Path, token: str,
                    base_env: dict[str, str], bridge: _isolation.Bridge | None = None,
                    ) -> Jail:
    """The confinement of one attempt's commands on ``sandbox`` (``isolation_backend``'s);
    ``bridge``: the gateway, bridged in (``network: gateway``)."""
    binds = tuple(sorted(set(task.binds.values())))
    if isinstance(backend, _isolation.Bwrap):
        return _isolation.Jail(backend, sandbox, task.network, binds, canary, task.limits.tmp,
                               asked=task.isolation if task.isolation == "auto" else None,
                               bridge=bridge)
    mark = sandbox_root / _isolation.DOCKER_MARK
    if not mark.exists():  # the watchdog's cue: this batch has containers to remove
        await trio.to_thread.run_sync(mark.touch)
    return _isolation.Container(backend, image, sandbox, task.network, binds, canary, token,
                                _isolation.cli_settings(base_env),
                                tuple(_limits.docker_flags(task.limits)), task.limits.tmp,
                                bridge)


class Probe:
    """A confined start: the channel its prelude reports on, and what it leaves to clean
    up. bwrap: a pipe the command inherits (its fd given to the prelude, which closes it
    before the command starts). docker: no fd crosses into a container, so two named
    pipes in the batch's folder are bound into it: the prelude writes its report to one,
    then waits on the other until this side, having read the report, writes ``go``:
    the command cannot take the report or write its own. This side opens both
    read-write, so neither open blocks nor a read sees EOF before the prelude writes.
    A container outlives a killed ``docker run``: removed by name here."""

    def __init__(self, jail: Jail, ctx: RunContext, marker: str) -> None:
        self.jail = jail
        self.name = f"evalledger-{marker.partition('=')[2]}"
        self.hidden = [ctx.ledger_path or ""]
        self._fds: list[int] = []
        self._fifos: list[Path] = []
        self._go: int | None = None
        # network: gateway under docker: the forwarder entered into the container.
        self._forwarder: subprocess.Popen[str] | None = None
        self.said = b""  # what the prelude reported, as read so far
        try:
            if isinstance(jail, _isolation.Jail):
                read, self._write = os.pipe2(os.O_CLOEXEC)
                self._fds += [read, self._write]
            else:
                for kind in ("probe", "go"):
                    fifo = ctx.sandbox_root / f"{kind}-{marker.partition('=')[2]}"
                    os.mkfifo(fifo, 0o600)
                    self._fifos.append(fifo)
                    self._fds.append(os.open(fifo, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC))
                read, self._go = self._fds
            self._fds.remove(read)
            self.stream = trio.lowlevel.FdStream(read)
        except BaseException:
            self._release()
            raise

    async def start(self, task: ResolvedTask, env: dict[str, str],
                    bounds: str = "") -> Child | trio.Process:
        """Start the command confined (bwrap: behind ``bounds``, ``_limits.prefix``'s
        lines, which bwrap and all it starts inherit)."""
        hidden = [*self.hidden, task.source]
        if isinstance(self.jail, _isolation.Jail):
            argv = _limits.wrap(self.jail.agent(task.command, hidden, self._write), bounds)
            try:
                return await spawn(argv, cwd=str(self.jail.workspace), env=env,
                                   stdin=bool(task.prompt), pass_fds=(self._write,),
                                   kind=Confined)
            finally:  # the command holds its own copy now
                self._fds.remove(self._write)
                os.close(self._write)
        report, go = (str(f) for f in self._fifos)
        argv = self.jail.agent(self.name, task.command, hidden, report, go,
                               stdin=bool(task.prompt), env=list(env))
        return await spawn(argv, cwd=str(self.jail.workspace), env=self.jail.client_env(env),
                           stdin=bool(task.prompt), kind=Contained)

    async def bridge_in(self, bridge: _isolation.Bridge) -> None:
        """The gateway into the container's network namespace: a forwarder on the host,
        entered there, listening once this returns (ended with the probe).

        Raises:
            OSError: it could not be started or did not listen (saying why).
        """
        assert isinstance(self.jail, _isolation.Container)
        done = await trio.to_thread.run_sync(
            self.jail.docker.run, "inspect", "--format", "{{.State.Pid}}", self.name)
        pid = done.stdout.strip()
        if done.returncode or not pid.isdigit() or pid == "0":
            raise OSError(f"no process of container {self.name}: {done.stderr.strip()}")
        self._forwarder = subprocess.Popen(bridge.enter(int(pid)), stdout=subprocess.PIPE,
                                           stdin=subprocess.DEVNULL, text=True)
        stdout = self._forwarder.stdout
        assert stdout is not None
        with trio.move_on_after(30):
            said = await trio.to_thread.run_sync(stdout.readline, abandon_on_cancel=True)
            if said.strip() == "ready":
                return
            raise OSError(f"its forwarder did not start: {said.strip() or 'no word'}")
        raise OSError("its forwarder did not listen within 30 s")

    def go(self) -> None:
        """The report is read: let the command start (docker; bwrap's needs no word)."""
        if self._go is not None:
            with contextlib.suppress(OSError):  # gone: the container ended meanwhile
                os.write(self._go, b"go\n")

    def read_enough(self) -> bool:
        """Whether the report's line (or all a report can be) was read."""
        return b"\n" in self.said or len(self.said) >= 4096

    def drain(self) -> None:
        """Read what is in the report's pipe now, without waiting."""
        with contextlib.suppress(OSError):  # BlockingIOError: nothing (more) there
            while not self.read_enough() and (chunk := os.read(self.stream.fileno(), 4096)):
                self.said += chunk

    def close(self) -> None:
        self.stream.close()
        self._release()
        if self._forwarder is not None:
            self._forwarder.kill()
            self._forwarder.wait()
            if self._forwarder.stdout is not None:
                self._forwarder.stdout.close()
            self._forwarder = None

    def _release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        self._go = None
        for fifo in self._fifos:
            with contextlib.suppress(OSError):
                fifo.unlink()

    async def remove_container(self, returncode: int | None) -> bool:
        """The agent's container removed (``docker run`` keeps it once it exited; it runs
        on if the client was killed); True if the kernel had killed a process of it for
        its memory limit (asked of one that failed: a child killed leaves the shell
        above it to exit 1, not 137).

        One the client saw exit is removed off the attempt's path (the batch's last
        sweep removes what is left); one it did not see end (the client was killed, or
        could not talk to its daemon: 125) is removed before the attempt goes on, so
        nothing of it writes to the workspace while it is graded."""
        if not isinstance(self.jail, _isolation.Container):
            return False
        docker, name = self.jail.docker, self.name
        unseen = returncode is None or returncode < 0 or returncode == 125
        oom = False
        # The daemon may mark the kill after it reported the exit (two events, handled
        # apart: seen under two copies of the suite, more than 0.6 s apart): a failed
        # container is asked again, one killed by SIGKILL (137: the kernel, or the agent
        # itself) for longer.
        # 125: the client lost its daemon under load (the container may have been killed).
        waits = ((0.0, 0.2, 0.4, 0.8, 1.6, 2.0) if returncode in (125, 137)
                 else (0.0,) if unseen else (0.0, 0.2, 0.4) if returncode != 0 else ())
        for wait in waits:
            await trio.sleep(wait)
            state = await trio.to_thread.run_sync(
                docker.run, "inspect", "--format", "{{.State.OOMKilled}}", name)
            oom = state.stdout.strip() == "true"
            if oom or state.returncode != 0:
                break
        if unseen:
            await trio.to_thread.run_sync(docker.run, "rm", "-f", name)
        else:
            threading.Thread(target=docker.run, args=("rm", "-f", name), daemon=True,
                             name=f"remove {name}").start()
        return oom


async def read_probes(probe: Probe, jail: Jail,
                       task: ResolvedTask, ctx: RunContext, state: _Streams, attempt: int,
                       stop: trio.CancelScope) -> None:
    """Read the prelude's one line and record it as the attempt's ``task.isolation``; a
    leak stops the command (the attempt is ERROR)."""
    # The first line only: what a command might write there later is not the prelude's.
    while not probe.read_enough() and (chunk := await probe.stream.receive_some(4096)):
        probe.said += chunk
    if isinstance(jail, _isolation.Container) and jail.bridge is not None:
        try:  # before the command starts: its first call finds the gateway
            await probe.bridge_in(jail.bridge)
        except OSError as e:
            state.isolation_error = f"network: gateway: {e}"
            stop.cancel()
            return
    probe.go()
    await record_probes(probe, jail, task, ctx, state, attempt, stop)


async def record_probes(probe: Probe, jail: Jail, task: ResolvedTask, ctx: RunContext,
                         state: _Streams, attempt: int, stop: trio.CancelScope) -> None:
    """Record the prelude's report as the attempt's ``task.isolation``, if one was read;
    a leak stops the command (the attempt is ERROR)."""
    line = probe.said.partition(b"\n")[0].decode("utf-8", "replace")
    probes = _isolation.read_probes(line)
    if probes is None:
        return  # never started (or killed before it reported): said after the exit
    state.probed = True
    leaks = _isolation.leaks(probes, jail.network)
    reason = f"isolation leaked: {', '.join(leaks)}" if leaks else None
    with trio.CancelScope(shield=True):  # read is recorded: the reading may end meanwhile
        await ctx.writer.append(TaskIsolation(
            run_id=ctx.run_id, task_key=task.task_key, attempt=attempt, probes=probes,
            reason=reason, **jail.record()))
    if reason is not None:
        state.isolation_error = reason
        stop.cancel()
