"""The worker's side of ``--executor ray``: one attempt per Ray task, streamed back.

``attempt_on_worker`` is the Ray task. It runs the attempt through the same
``run_task`` as locally, under its own trio loop in a thread, with an event sink
(``_ForwardToDriver``) that queues the attempt's rows, encoded here, for the generator
to yield in batches (one ``yield`` costs ~0.2 ms, so a batch is whatever queued since
the last one). Its ``task.completed`` is forwarded like any event, last: the driver
commits it. Then comes the kept sandbox, as a tar.

Nothing outlives the batch on a node: each worker process keeps its folders under the
node's batch folder and watches itself with the same watchdog as a local batch (its
attempts carry ``<batch token>-<pid>-`` marks, killed when the worker dies);
``sweep_node`` ends the batch there. A worker whose driver died exits within
``JOB_POLL`` seconds even when Ray does not end it (``_end_with_the_driver``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import queue
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from evalledger.hosts import static_environment
from evalledger.ledger import AnyEvent, EventRow, TaskCompleted
from evalledger.options import PreservationMode
from evalledger.pricing import RateCard
from evalledger.suite import ResolvedTask

from .._marks import batch_mark, kill_marked, marked
from .._runner import RunContext, run_task
from .._sandbox import BuildFailed, remove_tree
from .._watchdog import Watchdog, make_folder, proven
from ..isolation import DOCKER_MARK, remove_containers
from ._common import GET_TIMEOUT, POLL, first_line, import_ray
from ._packing import folder_size, pack, unpack

# A sandbox brought back to --out travels whole through the object store.
MAX_ARTIFACTS_BYTES = 512 * 1024 * 1024
# Rows handed back per yield at most, and batches of rows an attempt may queue ahead of
# the generator (then it waits, as a local attempt waits on the writer's channel).
MAX_BATCH_ROWS = 5000
QUEUED_BATCHES = 256
WORKER_FOLDER = "worker-"
# How often a worker asks whether its driver is still there.
JOB_POLL = 2.0


@dataclass(frozen=True)
class WorkerSpec:
    """What every attempt of one batch needs on a worker."""

    run_id: str
    batch_token: str
    preservation_mode: PreservationMode
    kill_grace: float
    rates: RateCard
    no_grade: bool = False
    allow_unconfined: bool = False


# What the driver ships for a task's workdir: its content's hash and object, or why it
# could not (the worker's sandbox then fails BUILD_FAILED, as it would locally).
Shipped = tuple[str, Any] | tuple[None, str]


def batch_folder(batch_token: str) -> Path:
    """The batch's folder on a node (unpacked workdirs, one folder per worker)."""
    return Path(tempfile.gettempdir()) / f"evalledger-ray-{batch_token}"


@dataclass
class _Session:
    """One worker process's part of one batch: its folders and its watchdog."""

    base: Path  # the batch's folder on this node
    root: Path  # this worker's sandboxes and artifacts
    token: str  # ``<batch token>-<pid>``: the start of this worker's attempt marks
    watchdog: Watchdog
    # One count for all the attempts this worker runs: every attempt's mark is its own.
    marks_made: Iterator[int] = field(default_factory=itertools.count)

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
                                  f"{first_line(e)}") from e
        return str(target)

    @staticmethod
    def _unpack(ref: Any, target: Path) -> None:
        blob: bytes = import_ray().get(ref, timeout=GET_TIMEOUT)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name[:12]}-", dir=target.parent))
        unpack(blob, staging)
        try:
            staging.rename(target)
        except OSError:  # another worker of this node was first: same content
            remove_tree(staging, ignore_errors=True)


_sessions: dict[str, _Session] = {}
_sessions_lock = threading.Lock()
_watching_the_driver = False  # under _sessions_lock


def _end_with_the_driver() -> None:
    """Exit this worker process once the GCS says its job (its driver) is dead.

    Ray ends the workers of a driver that died on two notifications, each pushed once
    (the owner's death, the job's end); a worker that misses both, or sits idle since
    its attempt ended and is then missed, lives on and keeps its node's batch folder,
    and on a machine other than the driver's, its attempts too. Exiting hands the
    cleanup to the worker's watchdog, as any death of a worker does. One GCS call per
    ``JOB_POLL``, answered from the GCS's memory (1-5 ms)."""
    ray = import_ray()
    try:
        gcs = ray._private.worker.global_worker.gcs_client
        job = ray.get_runtime_context().get_job_id()
    except Exception:  # a Ray without these: its own notifications are all there is
        return

    def poll() -> None:
        while True:
            time.sleep(JOB_POLL)
            if job_is_dead(gcs, job):
                os._exit(1)

    threading.Thread(target=poll, name="evalledger-driver-watch", daemon=True).start()


def job_is_dead(gcs: Any, job: str) -> bool:
    """Whether the GCS (``gcs``: a connected process's GCS client) says the job of id
    ``job`` (hex) has ended; False when it cannot tell."""
    try:
        jobs = gcs.get_all_job_info(job_or_submission_id=job,
                                    skip_submission_job_info_field=True,
                                    skip_is_running_tasks_field=True, timeout=5).values()
    except Exception:  # a GCS not answering says nothing of the job
        return False
    return bool(jobs) and all(info.is_dead for info in jobs)


def _session(spec: WorkerSpec) -> _Session:
    global _watching_the_driver
    with _sessions_lock:
        if not _watching_the_driver:
            _end_with_the_driver()
            _watching_the_driver = True
        session = _sessions.get(spec.batch_token)
        if session is None:
            base = batch_folder(spec.batch_token)
            token = f"{spec.batch_token}-{os.getpid()}"
            root = base / f"{WORKER_FOLDER}{os.getpid()}"
            # The watchdog first (detached before it returns), then the folders, as for a
            # local batch. Should this worker die, it removes the worker's folder, and the
            # node's batch folder too once no worker is left in it.
            watchdog = Watchdog(token, root, shared=(base, WORKER_FOLDER))
            # Each folder holds its proof (a marker naming its token) before anything
            # else: the node's batch folder, shared by its workers, names the batch's.
            make_folder(base, spec.batch_token, shared=True)
            (base / "workdirs").mkdir(exist_ok=True, mode=0o700)
            make_folder(root, token, shared=True)
            session = _sessions[spec.batch_token] = _Session(base, root, token, watchdog)
        return session


class _ForwardToDriver:
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

    async def append_durable(self, event: AnyEvent | EventRow) -> int:
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


@dataclass
class _WorkerAttempt:
    """One attempt, run by ``run_task`` on its own trio loop in a thread."""

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
        """The thread's body: the attempt, then ``_DONE`` (its error kept for the
        generator to raise)."""
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
        # The attempt ran here, not in the driver's session: its own versions with it.
        node = {"ray_node_id": context.get_node_id(), "hostname": socket.gethostname(),
                **static_environment()}
        ctx = RunContext(
            run_id=self.spec.run_id,
            writer=_ForwardToDriver(self.out, node, self.abandoned),
            artifacts_root=self.session.root / "artifacts",
            sandbox_root=self.session.root,
            preservation_mode=self.spec.preservation_mode,
            kill_grace=self.spec.kill_grace,
            no_grade=self.spec.no_grade,
            allow_unconfined=self.spec.allow_unconfined,
            rates=self.spec.rates,
            batch_token=self.session.token,
            locate_workdir=functools.partial(self.session.locate, self.shipped),
            _marks_made=self.session.marks_made,
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
        for rows in _batches(work.out):
            yield ("events", rows)
        thread.join()
        if work.error is not None:
            raise work.error
        artifacts = session.root / "artifacts" / task.task_key
        if spec.preservation_mode != "none" and artifacts.exists():
            yield ("artifacts", pack_artifacts(artifacts))
    finally:
        work.abandoned.set()
        # Cancelled by the driver (or abandoned): end the attempt's processes here,
        # with their grace period, as a local Ctrl-C does.
        if thread.is_alive():
            work.cancel()
            thread.join(spec.kill_grace + 10)


def _batches(out: queue.Queue[Any]) -> Iterator[list[tuple[Any, ...]]]:
    """The rows queued, one batch per item: whatever queued since the last one (up to
    ``MAX_BATCH_ROWS``), until the attempt is done."""
    while True:
        try:
            first = out.get(timeout=POLL)
        except queue.Empty:
            continue
        if first is _DONE:
            return
        rows = list(first)
        while len(rows) < MAX_BATCH_ROWS:
            try:
                more = out.get_nowait()
            except queue.Empty:
                break
            if more is _DONE:
                yield rows
                return
            rows += more
        yield rows


def pack_artifacts(folder: Path) -> bytes | int:
    """The kept sandbox as a tar, or its size in bytes when over the limit; removed here."""
    try:
        blob = pack(folder, MAX_ARTIFACTS_BYTES)
        return blob if blob is not None else folder_size(folder)
    finally:
        remove_tree(folder, ignore_errors=True)


def sweep_node(batch_token: str, patience: float, grace: float = 0.0) -> tuple[str, int]:
    """End of a batch, on one node: give what carries its mark ``patience`` seconds to
    end (attempts being stopped end their own process groups, grace period included);
    then SIGTERM what is left and give it ``grace`` seconds; kill the rest; remove the
    batch's folders. The SIGTERM keeps the grace period when the worker's own stop
    comes late (Ray delivers a cancel when it can) or never (a worker gone)."""
    mark = batch_mark(batch_token)

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and marked(mark):
            time.sleep(0.05)

    wait(patience)
    if grace > 0 and kill_marked(mark, prefix=True, sig=signal.SIGTERM):
        wait(grace)
    killed = len(kill_marked(mark, prefix=True))
    folder = batch_folder(batch_token)
    # The token is the live driver's, not a ledger's; still, removed only with its proof.
    if proven(str(folder), batch_token, tempfile.gettempdir()):
        # A worker that started containers (isolation: docker) says so in its folder; they
        # outlive the `docker run` clients just killed, labelled with its token.
        for worker in folder.glob(f"{WORKER_FOLDER}*/{DOCKER_MARK}"):
            pid = worker.parent.name.removeprefix(WORKER_FOLDER)
            killed += remove_containers(f"{batch_token}-{pid}")
        remove_tree(folder, ignore_errors=True)
    return socket.gethostname(), killed
