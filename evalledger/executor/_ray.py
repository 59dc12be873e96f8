"""Attempts on a Ray cluster, with this process the only ledger writer (``--executor ray``).

The driver (the ``evalledger`` process) dispatches each attempt as a Ray task and
stays the one writer of the ledger. On the worker, the attempt runs through the
same ``run_task`` as locally (sandbox, process group, env, prompt, timeout, live
budgets, criteria, final status) under its own trio loop in a thread; its events
are encoded there and streamed back through a Ray generator in batches (one
``yield`` costs ~0.2 ms, so a batch is whatever queued since the last one). The
driver appends each batch to its writer, in order, and commits ``task.completed``
last: after the sandbox came back to ``--out``, before the task counts as done.

What is shipped, and how often:

- a task's ``workdir``: packed once per distinct folder (a tar with normalised
  owners and times), put in the object store once, named by the hash of its
  content; each node unpacks a content once and copies it per attempt;
- the sandbox, on the way back (move-on-write, direct-write): a tar of at most
  ``MAX_ARTIFACTS_BYTES``; a larger one stays behind (removed) and a warning says so.

Nothing outlives the batch on any node: a worker process watches itself with the
same watchdog as a local batch (its attempts carry ``<batch token>-<pid>-`` marks,
killed when the worker dies); the batch ends with a sweep on every live node that
kills whatever carries the batch's mark and removes the batch's folders. A local Ray
started for the run carries a mark of its own (``ray_mark``): no sweep of attempts
touches it, ``ray.shutdown`` ends it, and should this process be killed the batch's
watchdog does. A lost worker or node ends its attempt as ``task.interrupted("worker
lost: ...")``, and the batch goes on. No retries: a retried task whose node is gone can
wait forever.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import itertools
import logging
import os
import queue
import re
import socket
import tarfile
import tempfile
import threading
import time
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
    TaskInterrupted,
    TaskUsage,
)
from evalledger.options import PreservationMode
from evalledger.pricing import RateCard
from evalledger.suite import ResolvedTask

from ._marks import MARKER_VAR, batch_mark, kill_marked, marked, ray_mark
from ._runner import RunContext, run_task
from ._sandbox import BuildFailed, remove_tree
from ._watchdog import Watchdog, make_folder, proven

log = logging.getLogger("evalledger.executor")

INSTALL_HINT = "--executor ray needs Ray: pip install 'evalledger[ray]'"
# A sandbox brought back to --out travels whole through the object store.
MAX_ARTIFACTS_BYTES = 512 * 1024 * 1024
# Rows handed back per yield at most, and unconsumed yields a worker may run ahead by.
MAX_BATCH_ROWS = 5000
BACKPRESSURE_YIELDS = 64
# Seconds between looks at a stop flag while waiting on Ray (never a blocking wait:
# a blocking next() makes Ctrl-C wait for the next item).
POLL = 0.2
# Every ray.get has a deadline: a result that is ready arrives in milliseconds.
GET_TIMEOUT = 120.0
SWEEP_TIMEOUT = 60.0
CONNECT_TIMEOUT = 5.0


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise Unavailable(INSTALL_HINT) from None
    return ray


# -------------------------------------------------------------------------- worker side


@dataclass(frozen=True)
class WorkerSpec:
    """What every attempt of one batch needs on a worker."""

    run_id: str
    batch_token: str
    preservation_mode: PreservationMode
    kill_grace: float
    rates: RateCard


# What the driver ships for a task's workdir: its content's hash and object, or why it
# could not (the worker's sandbox then fails BUILD_FAILED, as it would locally).
Shipped = tuple[str, Any] | tuple[None, str]


@dataclass
class _Session:
    """One worker process's part of one batch: its folders and its watchdog."""

    base: Path  # the batch's folder on this node (unpacked workdirs, worker folders)
    root: Path  # this worker's sandboxes and artifacts
    token: str  # ``<batch token>-<pid>``: the start of this worker's attempt marks
    watchdog: Watchdog
    # One count for all the attempts this worker runs: every attempt's mark is its own.
    attempts: Iterator[int] = field(default_factory=itertools.count)

    def locate(self, shipped: Shipped | None, workdir: str) -> str:
        """Where to copy ``workdir`` from on this node (blocking): the node's copy of
        what the driver shipped, unpacked on first use by any worker of the node."""
        if shipped is None:
            return workdir
        digest, ref = shipped
        if digest is None:
            raise BuildFailed(ref)
        target = self.base / "workdirs" / digest
        if not target.is_dir():
            try:
                self._unpack(ref, target)
            except Exception as e:  # a full disk, a lost object: the sandbox's failure
                raise BuildFailed(f"cannot prepare the sandbox from {workdir}: "
                                  f"{_first_line(e)}") from e
        return str(target)

    @staticmethod
    def _unpack(ref: Any, target: Path) -> None:
        blob: bytes = import_ray().get(ref, timeout=GET_TIMEOUT)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name[:12]}-", dir=target.parent))
        with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
            archive.extractall(staging, filter="tar")
        try:
            staging.rename(target)
        except OSError:  # another worker of this node was first: same content
            remove_tree(staging, ignore_errors=True)


_sessions: dict[str, _Session] = {}
_sessions_lock = threading.Lock()
WORKER_FOLDER = "worker-"


def _session(spec: WorkerSpec) -> _Session:
    with _sessions_lock:
        session = _sessions.get(spec.batch_token)
        if session is None:
            base = Path(tempfile.gettempdir()) / f"evalledger-ray-{spec.batch_token}"
            # Each folder holds its proof (a marker naming its token) before anything
            # else: the node's batch folder, shared by its workers, names the batch's.
            make_folder(base, spec.batch_token, shared=True)
            (base / "workdirs").mkdir(exist_ok=True, mode=0o700)
            token = f"{spec.batch_token}-{os.getpid()}"
            root = base / f"{WORKER_FOLDER}{os.getpid()}"
            # The watchdog first, then the folder (as for a local batch). Should this
            # worker die, it removes the batch's folder too once no worker is left in it.
            watchdog = Watchdog(token, root, shared=(base, WORKER_FOLDER))
            make_folder(root, token, shared=True)
            session = _sessions[spec.batch_token] = _Session(base, root, token, watchdog)
        return session


class _Forward:
    """The runner's event sink on a worker: rows queued for the generator to yield.

    The queue is bounded: when the driver falls behind (Ray holds the generator at
    ``yield``), the attempt waits here, its pipes fill and the command slows down,
    as a local attempt waits on the writer's channel. Nothing piles up in memory.
    """

    def __init__(self, out: queue.Queue[Any], node: dict[str, str],
                 abandoned: threading.Event) -> None:
        self._out = out
        self._node = node
        self._abandoned = abandoned

    async def append(self, *events: AnyEvent | EventRow) -> None:
        await self._put([_row(e) for e in events])

    async def append_durable(self, event: AnyEvent) -> int:
        # The driver commits it; what ran it is said where the run's summary looks.
        if isinstance(event, TaskCompleted):
            # Validated again, not copied: the model sorts the merged object's keys, as
            # canonical payloads need.
            event = TaskCompleted.model_validate(
                {**dict(event), "environment_info": {**event.environment_info, **self._node}})
        await self._put([_row(event)])
        return 0

    async def _put(self, rows: list[tuple[Any, ...]]) -> None:
        try:
            self._out.put_nowait(rows)
        except queue.Full:
            # Not abandoned on cancel: a put given up on could land later, after events
            # queued since. The thread looks for the cancellation itself instead.
            await trio.to_thread.run_sync(put_unless, self._out, rows, self._abandoned,
                                          trio.from_thread.check_cancelled)


def put_unless(out: queue.Queue[Any], item: object, abandoned: threading.Event,
               check: Callable[[], None] | None = None) -> None:
    """``out.put(item)``, unless nobody will ever take it (blocking). ``check`` raises
    to give up (a cancelled trio caller), before the item is put, never after."""
    while not abandoned.is_set():
        if check is not None:
            check()
        try:
            out.put(item, timeout=POLL)
            return
        except queue.Full:
            continue


def _row(event: AnyEvent | EventRow) -> tuple[Any, ...]:
    # The stored form without seq and hash (the driver's ledger assigns them).
    return tuple(EventRow.of(event)[:6])


_DONE = object()
QUEUED_BATCHES = 256


@dataclass
class _WorkerAttempt:
    task: ResolvedTask
    spec: WorkerSpec
    attempt: int
    session: _Session
    shipped: Shipped | None
    out: queue.Queue[Any] = field(default_factory=lambda: queue.Queue(QUEUED_BATCHES))
    # Set when the generator stops taking: puts give up instead of blocking for good.
    abandoned: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    _scope: trio.CancelScope | None = None
    _token: trio.lowlevel.TrioToken | None = None

    def run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as e:  # reported to the driver by the generator
            self.error = e
        finally:
            put_unless(self.out, _DONE, self.abandoned)

    async def _main(self) -> None:
        import ray

        self._token = trio.lowlevel.current_trio_token()
        context = ray.get_runtime_context()
        node = {"ray_node_id": context.get_node_id(), "hostname": socket.gethostname()}
        ctx = RunContext(
            run_id=self.spec.run_id,
            writer=_Forward(self.out, node, self.abandoned),
            artifacts_root=self.session.root / "artifacts",
            sandbox_root=self.session.root,
            preservation_mode=self.spec.preservation_mode,
            kill_grace=self.spec.kill_grace,
            rates=self.spec.rates,
            batch_token=self.session.token,
            locate_workdir=functools.partial(self.session.locate, self.shipped),
            _attempts=self.session.attempts,
        )
        with trio.CancelScope() as self._scope:
            # Stopped before the scope existed: ``cancel`` found nothing to cancel.
            if self.abandoned.is_set():
                self._scope.cancel()
            await run_task(self.task, ctx, self.attempt)

    def cancel(self) -> None:
        """Stop the attempt as Ctrl-C stops a local one (its process group ended)."""
        scope, token = self._scope, self._token
        if scope is not None and token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)


def attempt_on_worker(
    task: ResolvedTask, spec: WorkerSpec, attempt: int, shipped: Shipped | None,
) -> Iterator[tuple[str, Any]]:
    """The Ray task: run one attempt here, yield ``("events", rows)`` batches as they
    come, then ``("artifacts", tar bytes)`` when the sandbox is kept."""
    session = _session(spec)
    work = _WorkerAttempt(task, spec, attempt, session, shipped)
    thread = threading.Thread(target=work.run, name="evalledger-attempt", daemon=True)
    thread.start()
    try:
        done = False
        while not done:
            try:
                first = work.out.get(timeout=POLL)
            except queue.Empty:
                continue
            if first is _DONE:
                break
            rows = list(first)
            while len(rows) < MAX_BATCH_ROWS:
                try:
                    more = work.out.get_nowait()
                except queue.Empty:
                    break
                if more is _DONE:
                    done = True
                    break
                rows += more
            yield ("events", rows)
        thread.join()
        if work.error is not None:
            raise work.error
        artifacts = session.root / "artifacts" / task.task_key
        if spec.preservation_mode != "none" and artifacts.exists():
            yield ("artifacts", _pack_artifacts(artifacts))
    finally:
        work.abandoned.set()
        # Cancelled by the driver (or abandoned): end the attempt's processes here,
        # with their grace period, as a local Ctrl-C does.
        if thread.is_alive():
            work.cancel()
            thread.join(spec.kill_grace + 10)


def _pack_artifacts(folder: Path) -> bytes | int:
    """The kept sandbox as a tar, or its size in bytes when over the limit; removed here."""
    try:
        blob = _pack(folder, MAX_ARTIFACTS_BYTES)
        return blob if blob is not None else _size(folder)
    finally:
        remove_tree(folder, ignore_errors=True)


def sweep_node(batch_token: str, patience: float) -> tuple[str, int]:
    """End of a batch, on one node: give what carries its mark ``patience`` seconds to
    end (attempts being stopped end their own process groups, grace period included),
    kill the rest, remove the batch's folders."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline and marked(batch_mark(batch_token)):
        time.sleep(0.05)
    killed = kill_marked(batch_mark(batch_token), prefix=True)
    folder = Path(tempfile.gettempdir()) / f"evalledger-ray-{batch_token}"
    # The token is the live driver's, not a ledger's; still, removed only with its proof.
    if proven(str(folder), batch_token, tempfile.gettempdir()):
        remove_tree(folder, ignore_errors=True)
    return socket.gethostname(), len(killed)


# ---------------------------------------------------------------------------- packing


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The same content gives the same bytes, hence the same name in the object store.
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _pack(folder: Path, limit: int | None = None) -> bytes | None:
    """A tar of the folder's contents (symlinks kept), or None past ``limit`` bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for top, folders, files in os.walk(folder):
            folders.sort()
            for name in [*folders, *sorted(files)]:
                path = Path(top, name)
                if not (path.is_symlink() or path.is_dir() or path.is_file()):
                    continue  # sockets, fifos: nothing a copy can hold
                archive.add(path, arcname=str(path.relative_to(folder)), recursive=False,
                            filter=_normalised)
                if limit is not None and buffer.tell() > limit:
                    return None
    return buffer.getvalue()


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and
               not f.is_symlink())


def _unpack_artifacts(blob: bytes, target: Path) -> None:
    if target.exists():
        remove_tree(target)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
        archive.extractall(target, filter="tar")


# -------------------------------------------------------------------------- driver side


_END = object()


def _next_batch(generator: Any, stop: threading.Event) -> Any:
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
        self._cancelled: list[Any] = []
        self._submitters: dict[str, Any] = {}
        self._spec_ref: Any = None
        # Leaving Ray waits for a hurried sweep in flight; no sweep starts after it.
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
            raise Unavailable(f"cannot start Ray ({where}): {_first_line(e)}") from e
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

    def hurry(self) -> None:
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
                log.warning("could not end the batch's processes at once: %s", _first_line(e))

    def close(self, *, hurry: bool = False) -> None:
        """Sweep every live node (giving stopped attempts their grace period unless
        ``hurry``) and leave Ray (blocking). Never raises: it runs on the way out of a
        batch, and what it could not do is a warning. A ``hurry`` call may run meanwhile,
        from another thread; Ray is left only once it is done."""
        ray = self._ray
        try:
            if ray.is_initialized():
                patience = 0.0 if hurry or not self._cancelled else self.spec.kill_grace + 5
                self._sweep(patience)
        except Exception as e:
            log.warning("the end-of-batch sweep failed: %s", _first_line(e))
        finally:
            with self._leaving:
                self._left = True
                with contextlib.suppress(Exception):
                    ray.shutdown()

    def _sweep(self, patience: float) -> None:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        sweep = ray.remote(max_retries=0, num_cpus=0)(sweep_node)
        refs = [
            sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(self.spec.batch_token, patience)
            for node in ray.nodes() if node.get("Alive")
        ]
        try:
            ray.get(refs, timeout=SWEEP_TIMEOUT + patience)
        except Exception as e:  # a node going away meanwhile: its workers' watchdogs clean
            log.warning("the end-of-batch sweep did not reach every node: %s", _first_line(e))

    async def _workdir(self, workdir: str | None) -> Shipped | None:
        """What to ship for a workdir: packed and put once per folder."""
        if workdir is None:
            return None
        lock = self._packing.setdefault(workdir, trio.Lock())
        async with lock:
            if workdir not in self._workdirs:
                self._workdirs[workdir] = await trio.to_thread.run_sync(self._put, workdir)
        return self._workdirs[workdir]

    def _put(self, workdir: str) -> Shipped:
        # The messages are the local sandbox's: the attempt fails BUILD_FAILED the same way.
        if not Path(workdir).is_dir():
            return None, f"workdir {workdir} is not a folder"
        try:
            blob = _pack(Path(workdir))
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
    ) -> TaskCompleted | None:
        """Run one attempt remotely; return its committed ``task.completed``, or None
        when the worker was lost (``task.interrupted`` recorded; the batch goes on).

        Raises:
            BaseException: the batch's cancellation, after ``task.interrupted`` (or the
                ``task.completed`` that had already arrived).
        """
        ray = self._ray
        stop = threading.Event()
        started = False
        completed: TaskCompleted | None = None
        generator: Any = None
        try:
            try:
                shipped = await self._workdir(task.workdir)
                generator = self._submitter(task).remote(
                    task, self._spec_ref, attempt, shipped,
                )
                while True:
                    item = await trio.to_thread.run_sync(
                        _next_batch, generator, stop, abandon_on_cancel=True,
                        limiter=self._threads,
                    )
                    if item is _END:
                        break
                    kind, value = item
                    if kind == "events":
                        started = True
                        completed = await self._events(ctx, value) or completed
                    else:
                        await self._artifacts(task, ctx, value)
            except (ray.exceptions.RayError, ValueError, TypeError) as e:
                if isinstance(e, ray.exceptions.TaskCancelledError):
                    raise
                stop.set()
                if generator is not None:  # the worker may live on: stop what it runs
                    self._cancelled.append(generator)
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(_cancel_quietly, ray, generator)
                if completed is None:
                    await self._lost(task, ctx, started, e)
                    return None
                # Lost on the way back with the sandbox: the result stands.
                log.warning("%s: the sandbox did not come back (%s)", task.task_key,
                            _first_line(e))
        except BaseException:
            stop.set()
            with trio.CancelScope(shield=True):
                if generator is not None:
                    self._cancelled.append(generator)
                    await trio.to_thread.run_sync(_cancel_quietly, ray, generator)
                if completed is not None:
                    # It ended before the cancel: what it recorded stands, as locally.
                    await ctx.writer.append_durable(completed)
                elif started:
                    await ctx.writer.append_durable(
                        TaskInterrupted(run_id=ctx.run_id, task_key=task.task_key,
                                        reason="cancelled"))
            raise
        finally:
            if release is not None:
                release()
        if completed is None:
            # The stream ended without one: count it as a lost worker, not a result.
            await self._lost(task, ctx, started,
                             RuntimeError("the attempt ended without a result"))
            return None
        with trio.CancelScope(shield=True):
            await ctx.writer.append_durable(completed)
        return completed

    async def _lost(self, task: ResolvedTask, ctx: RunContext, started: bool,
                    error: BaseException) -> None:
        """The attempt cannot finish: ``task.interrupted`` if it had started (``resume``
        runs it again), else nothing was recorded and ``resume`` runs it as new."""
        reason = f"worker lost: {_first_line(error)}"
        if started:
            # Shielded: a cancel now must not add a second task.interrupted.
            with trio.CancelScope(shield=True):
                await ctx.writer.append_durable(
                    TaskInterrupted(run_id=ctx.run_id, task_key=task.task_key, reason=reason))
            log.warning("%s: %s", task.task_key, reason)
        else:
            log.warning("%s: not started (%s); resume runs it", task.task_key, reason)

    async def _events(self, ctx: RunContext, rows: list[tuple[Any, ...]]) -> TaskCompleted | None:
        """Append a batch; hold back a ``task.completed`` (committed last) and return it.

        Output lines stay rows, as the local runner hands them over; every other
        event is typed again, for the batch's callbacks and live projections.
        """
        events: list[AnyEvent | EventRow] = []
        for row in rows:
            stored = EventRow(*row)
            events.append(stored if stored.type == EventType.TASK_OUTPUT else stored.decode())
        completed = events.pop() if isinstance(events[-1], TaskCompleted) else None
        assert completed is None or isinstance(completed, TaskCompleted)
        assert not any(isinstance(e, TaskCompleted) for e in events), "one per attempt, last"
        if events:
            await ctx.writer.append(*events)
        for sent in events:
            if isinstance(sent, TaskUsage):
                ctx.spent_usd += sent.cost_usd or 0.0
            elif ctx.on_output is not None and sent.type != EventType.TASK_STARTED:
                ctx.notify_output(sent.decode() if isinstance(sent, EventRow) else sent)
        return completed

    async def _artifacts(self, task: ResolvedTask, ctx: RunContext, blob: bytes | int) -> None:
        if isinstance(blob, int):
            log.warning("the sandbox of %s (%d bytes) is over the %d bytes brought back; "
                        "not kept", task.task_key, blob, MAX_ARTIFACTS_BYTES)
            return
        target = ctx.artifacts_root / task.task_key
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(_unpack_artifacts, blob, target)
            except (OSError, tarfile.TarError) as e:
                log.warning("could not keep the sandbox of %s: %s", task.task_key, e)


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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(error: BaseException) -> str:
    """One line naming what went wrong: for an error raised on a worker, its cause."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and type(error).__name__ == "RayTaskError":
        error = cause
    lines = _ANSI.sub("", str(error)).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def _ask(options: dict[str, Any]) -> str:
    parts = [f"{k}={v:g}" for k, v in options.items() if k != "resources" and v]
    parts += [f"{k}={v:g}" for k, v in options.get("resources", {}).items()]
    return ", ".join(parts) or "nothing"


__all__ = ["INSTALL_HINT", "RayExecutor", "WorkerSpec", "import_ray"]
