"""The driver's side of ``--executor ray``: this process, the one writer of the ledger.

``RayExecutor.run`` is the batch's way to run an attempt (``_batch.Attempts``) on the
cluster: it ships the task's workdir once, submits ``attempt_on_worker``, appends each
batch of rows the worker streams back, in order, and hands the attempt's end to
``run_attempt``, the same protocol as a local attempt's: the ``task.completed`` the
worker sent last is committed after the sandbox came back to ``--out``, before the task
counts as done. A lost worker or node ends its attempt as ``task.interrupted("worker
lost: ...")``, and the batch goes on. No retries: a retried task whose node is gone
can wait forever.

``close`` ends the batch with a sweep on every live node (``sweep_node``). A local Ray
started for the run carries a mark of its own (``ray_mark``): no sweep of attempts
touches it, ``ray.shutdown`` ends it, and should this process be killed the batch's
watchdog does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import socket
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from evalledger.errors import Unavailable
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    EventType,
    TaskCompleted,
    TaskEmitted,
    TaskStarted,
    TaskUsage,
    as_lines,
    utc_now,
)
from evalledger.pricing import RateCard
from evalledger.suite import ResolvedTask

from .._attempt import WORKER_LOST, AttemptOutcome, run_attempt
from .._marks import MARKER_VAR, ray_mark
from .._runner import RunContext
from .._sandbox import remove_tree
from .._usage import UsageMeter, meter_for
from ._common import GET_TIMEOUT, POLL, first_line, import_ray
from ._packing import pack, unpack
from ._worker import MAX_ARTIFACTS_BYTES, Shipped, WorkerSpec, attempt_on_worker, sweep_node

log = logging.getLogger("evalledger.executor")

# Unconsumed yields a worker may run ahead by.
BACKPRESSURE_YIELDS = 64
SWEEP_TIMEOUT = 60.0
CONNECT_TIMEOUT = 5.0

_END = object()


def _next_item(generator: Any, stop: threading.Event) -> Any:
    """The generator's next item, or ``_END``; gives up when ``stop`` is set."""
    ray = import_ray()
    while not stop.is_set():
        ready, _ = ray.wait([generator], timeout=POLL)
        if ready:
            try:
                ref = next(generator)
            except StopIteration:
                return _END
            return ray.get(ref, timeout=GET_TIMEOUT)
    return _END


@dataclass
class _RemoteAttempt:
    """What the driver knows of one attempt running on the cluster."""

    generator: Any = None  # the Ray task's stream, once submitted
    # Set when the driver gives up on the stream: its waiting thread stops too.
    stop: threading.Event = field(default_factory=threading.Event)
    started: bool = False  # its task.started arrived (and is recorded)
    completed: TaskCompleted | None = None  # held back, committed as its end
    # The attempt's JSON lines as recorded, read as the worker's meter read them: what it
    # owes if the worker is lost before it booked its estimate (``booked``).
    meter: UsageMeter | None = None
    booked: bool = False


class RayExecutor:
    """Runs a batch's attempts on a Ray cluster; ``close`` leaves nothing on any node."""

    def __init__(self, spec: WorkerSpec, max_parallel: int, address: str | None) -> None:
        self.spec = spec
        self._ray = import_ray()
        self._address = address
        self._max_parallel = max_parallel
        self._remote: Any = None
        self._workdirs: dict[str, Shipped] = {}
        self._packing: dict[str, trio.Lock] = {}
        self._threads = trio.CapacityLimiter(max_parallel + 2)
        # Some attempt was stopped on its worker: the end-of-batch sweep gives it its
        # grace period.
        self._stopped_some = False
        self._submitters: dict[str, Any] = {}
        self._spec_ref: Any = None
        # Leaving Ray waits for a kill_now sweep in flight; no sweep starts after it.
        self._leaving = threading.Lock()
        self._left = False

    def start(self) -> None:
        """Start or join Ray (blocking: seconds). Raises ``Unavailable`` in one line."""
        ray = self._ray
        settings: dict[str, Any] = {
            "include_dashboard": False, "log_to_driver": False, "configure_logging": False,
        }
        if self._address is None:
            # A local Ray offers as many CPUs as -j: -j means the same as without Ray.
            settings.update(address="local",
                            num_cpus=max(os.cpu_count() or 1, self._max_parallel))
        else:
            _reachable(self._address)
            settings["address"] = self._address
        # Ray's own chatter (it started, it runs off the main thread) is not the user's
        # business; its logs stay in its session folder.
        logging.getLogger("ray").setLevel(logging.ERROR)
        try:
            with self._marked_if_local():
                ray.init(**settings)
        except Exception as e:  # ConnectionError, RuntimeError, ValueError: said in one line
            where = self._address or "a local Ray"
            raise Unavailable(f"cannot start Ray ({where}): {first_line(e)}") from e
        self._remote = ray.remote(
            max_retries=0, _generator_backpressure_num_objects=BACKPRESSURE_YIELDS,
        )(attempt_on_worker)
        # Put once: serialising arguments was a fifth of the driver's time per task.
        self._spec_ref = ray.put(self.spec)

    @contextlib.contextmanager
    def _marked_if_local(self) -> Iterator[None]:
        """A local Ray's processes carry the batch's mark: should this process be killed,
        the batch's watchdog ends them with the attempts (Ray leaves its agents behind)."""
        if self._address is not None:
            yield
            return
        # And it does not report usage to Ray's makers: the user did not start it.
        settings = {MARKER_VAR: ray_mark(self.spec.batch_token).partition("=")[2],
                    "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0")}
        before = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        try:
            yield
        finally:
            for name, value in before.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value

    def kill_now(self) -> None:
        """A second Ctrl-C: SIGKILL what the batch runs on every node now, not after the
        grace period (a sweep without patience; a sweep still waiting then sees nothing
        left). Blocking; never raises; does nothing once ``close`` has left Ray."""
        with self._leaving:
            if self._left:
                return
            try:
                self._sweep(0.0)
            # SystemExit: what Ray raises in a waiting thread when it is shut down.
            except (Exception, SystemExit) as e:
                log.warning("could not end the batch's processes at once: %s", first_line(e))

    def close(self, *, kill_now: bool = False) -> None:
        """Sweep every live node (giving stopped attempts their grace period unless
        ``kill_now``) and leave Ray (blocking). Never raises: it runs on the way out of a
        batch, and what it could not do is a warning. A ``kill_now`` call may run
        meanwhile, from another thread; Ray is left only once it is done."""
        ray = self._ray
        try:
            if ray.is_initialized():
                gently = self._stopped_some and not kill_now
                self._sweep(self.spec.kill_grace + 5 if gently else 0.0,
                            self.spec.kill_grace if gently else 0.0)
        except Exception as e:
            log.warning("the end-of-batch sweep failed: %s", first_line(e))
        finally:
            with self._leaving:
                self._left = True
                with contextlib.suppress(Exception):
                    ray.shutdown()

    def _sweep(self, patience: float, grace: float = 0.0) -> None:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        sweep = ray.remote(max_retries=0, num_cpus=0)(sweep_node)
        refs = [
            sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(self.spec.batch_token, patience, grace)
            for node in ray.nodes() if node.get("Alive")
        ]
        try:
            ray.get(refs, timeout=SWEEP_TIMEOUT + patience + grace)
        except Exception as e:  # a node going away meanwhile: its workers' watchdogs clean
            log.warning("the end-of-batch sweep did not reach every node: %s", first_line(e))

    async def _shipped(self, workdir: str | None) -> Shipped | None:
        """What to ship for a workdir: packed and put once per folder."""
        if workdir is None:
            return None
        lock = self._packing.setdefault(workdir, trio.Lock())
        async with lock:
            if workdir not in self._workdirs:
                self._workdirs[workdir] = await trio.to_thread.run_sync(self._ship, workdir)
        return self._workdirs[workdir]

    def _ship(self, workdir: str) -> Shipped:
        # The messages are the local sandbox's: the attempt fails BUILD_FAILED the same way.
        if not Path(workdir).is_dir():
            return None, f"workdir {workdir} is not a folder"
        try:
            blob = pack(Path(workdir))
        except (OSError, RecursionError) as e:
            return None, f"cannot prepare the sandbox from {workdir}: {e}"
        assert blob is not None
        return hashlib.sha256(blob).hexdigest(), self._ray.put(blob)

    def _submitter(self, task: ResolvedTask) -> Any:
        """The remote function with the task's resources, made once per distinct ask."""
        wants = task.ray
        key = wants.model_dump_json()
        if (submit := self._submitters.get(key)) is None:
            options: dict[str, Any] = {"num_cpus": wants.num_cpus, "num_gpus": wants.num_gpus}
            if wants.memory is not None:
                options["memory"] = wants.memory
            if wants.resources:
                options["resources"] = dict(wants.resources)
            submit = self._submitters[key] = self._remote.options(**options)
            if not self._fits_a_node(options):
                log.warning("no node of the cluster has %s now: tasks asking for it (%s "
                            "first) wait until one joins; Ctrl-C stops", _ask(options),
                            task.task_key)
        return submit

    def _fits_a_node(self, options: dict[str, Any]) -> bool:
        ask = {"CPU": options["num_cpus"], "GPU": options["num_gpus"],
               "memory": options.get("memory", 0), **options.get("resources", {})}
        try:
            nodes = [n["Resources"] for n in self._ray.nodes() if n.get("Alive")]
        except Exception:  # only a warning hangs on it
            return True
        return any(all(has.get(name, 0) >= need for name, need in ask.items() if need)
                   for has in nodes)

    async def run(
        self, task: ResolvedTask, ctx: RunContext, attempt: int,
        release: Callable[[], None] | None = None,
    ) -> AttemptOutcome:
        """Run one attempt remotely; return how it ended once that is committed: its
        ``task.completed``, or ``task.interrupted`` when its worker was lost (the batch
        goes on).

        Raises:
            BaseException: the batch's cancellation, after ``task.interrupted`` (or the
                ``task.completed`` that had already arrived).
        """
        remote = _RemoteAttempt()
        try:
            return await run_attempt(
                ctx.writer, ctx.run_id, task.task_key,
                functools.partial(self._follow, task, ctx, attempt, remote),
                functools.partial(self._interrupted, remote),
            )
        finally:
            # The slot is freed once the attempt is stopped on its worker too, as the
            # driver did before the protocol was shared: a remote attempt holds its slot
            # until it has been told to stop.
            if release is not None:
                release()

    async def _follow(self, task: ResolvedTask, ctx: RunContext, attempt: int,
                      remote: _RemoteAttempt) -> AttemptOutcome:
        """Submit the attempt and record what it streams back, to its end."""
        ray = self._ray
        try:
            shipped = await self._shipped(task.workdir)
            remote.generator = self._submitter(task).remote(
                task, self._spec_ref, attempt, shipped,
            )
            while (item := await trio.to_thread.run_sync(
                    _next_item, remote.generator, remote.stop, abandon_on_cancel=True,
                    limiter=self._threads)) is not _END:
                kind, value = item
                if kind == "events":
                    remote.started = True
                    remote.completed = (await _append_rows(ctx, value, remote)
                                        or remote.completed)
                else:
                    await _keep_artifacts(task, ctx, value)
        except (ray.exceptions.RayError, ValueError, TypeError) as e:
            if isinstance(e, ray.exceptions.TaskCancelledError):
                raise
            await self._stop(remote)  # the worker may live on: stop what it runs
            if remote.completed is None:
                return await _lost_booked(task, ctx, remote, e)
            # Lost on the way back with the sandbox: the result stands.
            log.warning("%s: the sandbox did not come back (%s)", task.task_key,
                        first_line(e))
        if remote.completed is None:
            # The stream ended without one: count it as a lost worker, not a result.
            return await _lost_booked(task, ctx, remote,
                                      RuntimeError("the attempt ended without a result"))
        return AttemptOutcome(remote.completed)

    async def _interrupted(self, remote: _RemoteAttempt, reason: str) -> AttemptOutcome:
        """A cancelled attempt, stopped on its worker: it ends interrupted, unless its
        result had arrived (then that stands, as locally)."""
        await self._stop(remote)
        if remote.completed is not None:
            return AttemptOutcome(remote.completed)
        return AttemptOutcome(interrupted=reason, started=remote.started)

    async def _stop(self, remote: _RemoteAttempt) -> None:
        remote.stop.set()
        if remote.generator is not None:
            self._stopped_some = True
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_cancel_quietly, self._ray, remote.generator)


def _lost(task: ResolvedTask, started: bool, error: BaseException) -> AttemptOutcome:
    """The attempt cannot finish: ``task.interrupted`` if it had started (``resume``
    runs it again), else nothing was recorded and ``resume`` runs it as new."""
    reason = f"{WORKER_LOST}: {first_line(error)}"
    if started:
        log.warning("%s: %s", task.task_key, reason)
    else:
        log.warning("%s: not started (%s); resume runs it", task.task_key, reason)
    return AttemptOutcome(interrupted=reason, started=started)


async def _lost_booked(task: ResolvedTask, ctx: RunContext, remote: _RemoteAttempt,
                       error: BaseException) -> AttemptOutcome:
    """``_lost``, after booking what the attempt's recorded lines show it spent and its
    worker never booked (its running estimate, a floor), as an interrupted attempt
    here books it."""
    owed = (remote.meter.finish() if remote.started and not remote.booked
            and remote.meter is not None else ())
    if owed:
        ts = utc_now()
        await ctx.writer.append(*(u.event(ctx.run_id, task.task_key, ts) for u in owed))
    return _lost(task, remote.started, error)


async def _append_rows(ctx: RunContext, rows: list[tuple[Any, ...]],
                       remote: _RemoteAttempt | None = None) -> TaskCompleted | None:
    """Append a batch of the worker's rows; hold back a ``task.completed`` (the attempt's
    end, committed last by ``run_attempt``) and return it.

    Output lines stay rows, as the local runner hands them over; every other event is
    typed again, for the batch's callbacks and live projections.
    """
    events = [_typed(EventRow(*row)) for row in rows]
    completed = events[-1] if isinstance(events[-1], TaskCompleted) else None
    if completed is not None:
        events.pop()
    assert not any(isinstance(e, TaskCompleted) for e in events), "one per attempt, last"
    if events:
        await ctx.writer.append(*events)
    # A chunk (a read's lines, made by the worker's runner): each line as the ledger
    # gives it back, a JSON event typed for the meter.
    for sent in as_lines(events):
        if type(sent) is EventRow and sent.type == EventType.TASK_EVENT:
            sent = sent.decode()
        if remote is not None:
            _meter(remote, sent, ctx.rates)
        if isinstance(sent, TaskUsage):
            ctx.spent_usd += sent.cost_usd or 0.0
        elif ctx.on_output is not None and sent.type != EventType.TASK_STARTED:
            ctx.notify_output(sent.decode() if isinstance(sent, EventRow) else sent)
    return completed


def _meter(remote: _RemoteAttempt, sent: AnyEvent | EventRow, rates: RateCard) -> None:
    """Read one recorded event of the attempt as its worker's meter did."""
    if isinstance(sent, TaskStarted):
        remote.meter = meter_for(sent.definition, rates)
    elif isinstance(sent, TaskEmitted) and isinstance(sent.data, dict) and remote.meter:
        remote.meter.observe(sent.data)  # what it reports was booked by the worker
    elif isinstance(sent, TaskUsage) and sent.estimate:
        remote.booked = True


def _typed(row: EventRow) -> AnyEvent | EventRow:
    return row if row.type in _AS_ROWS else row.decode()


# Kept in stored form on the way to the writer: output lines and chunks of lines.
_AS_ROWS = frozenset({EventType.TASK_OUTPUT, EventType.TASK_LINES})


async def _keep_artifacts(task: ResolvedTask, ctx: RunContext, blob: bytes | int) -> None:
    """Unpack the sandbox the worker sent back into ``--out`` (or say it was too big)."""
    if isinstance(blob, int):
        log.warning("the sandbox of %s (%d bytes) is over the %d bytes brought back; "
                    "not kept", task.task_key, blob, MAX_ARTIFACTS_BYTES)
        return
    target = ctx.artifacts_root / task.task_key
    with trio.CancelScope(shield=True):
        try:
            await trio.to_thread.run_sync(_replace_with, blob, target)
        except (OSError, tarfile.TarError) as e:
            log.warning("could not keep the sandbox of %s: %s", task.task_key, e)


def _replace_with(blob: bytes, target: Path) -> None:
    if target.exists():
        remove_tree(target)
    target.mkdir(parents=True)
    unpack(blob, target)


def _cancel_quietly(ray: Any, generator: Any) -> None:
    with contextlib.suppress(Exception):
        ray.cancel(generator)


def _reachable(address: str) -> None:
    """Fail in seconds on a ``host:port`` nobody answers on: Ray itself keeps trying
    for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return  # `auto`, or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise Unavailable(f"cannot start Ray ({address}): nothing answers there "
                          f"({e.strerror or e}); is the head node up?") from None


def _ask(options: dict[str, Any]) -> str:
    parts = [f"{k}={v:g}" for k, v in options.items() if k != "resources" and v]
    parts += [f"{k}={v:g}" for k, v in options.get("resources", {}).items()]
    return ", ".join(parts) or "nothing"
