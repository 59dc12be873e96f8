"""The batch executor: run resolved tasks with a concurrency limit, record everything.

``run_batch`` opens the ledger writer, records ``run.started`` (or ``run.resumed``
for an existing run), dispatches tasks through a ``CapacityLimiter`` and records
``run.finished`` with how the batch ended. Tasks are dispatched one at a time as
slots free up, so a 10,000-task batch does not start 10,000 trio tasks at once,
and a run-level cost budget can stop dispatching between two tasks.

Cancelling the surrounding scope (Ctrl-C in the CLI) stops dispatching, ends the
running process groups, records ``task.interrupted`` for each running task and
``run.finished(interrupted)``, flushes the writer, then re-raises.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from evalledger.hosts import host_info
from evalledger.ledger import (
    AnyEvent,
    EventRow,
    Ledger,
    RunFinished,
    RunResumed,
    RunStarted,
    Signer,
    TaskCompleted,
    TaskSkipped,
    as_lines,
)
from evalledger.options import PreservationMode, RunOptions
from evalledger.pricing import DEFAULT_RATES, RateCard, prices_source
from evalledger.projections import fingerprint
from evalledger.statuses import FailureClass, RunStatus
from evalledger.suite import ResolvedTask, Skipped

from ._access import watch
from ._attempt import WORKER_LOST, AttemptOutcome
from ._limits import enforcement, pool
from ._marks import batch_mark, kill_marked
from ._runner import RunContext, run_task
from ._sandbox import SandboxPool, private_folder, remove_tree
from ._watchdog import Watchdog, make_folder, sweep_dead_batches
from ._writer import WriterStats, open_writer
from .isolation import DOCKER_MARK, remove_containers

if TYPE_CHECKING:
    from ._egress import Egress
    from ._gateway import Gateway
    from .ray import RayExecutor

log = logging.getLogger("evalledger.executor")


@dataclass(frozen=True)
class BatchConfig:
    """How to run a batch.

    ``options`` is recorded in ``run.started`` and fingerprinted, and it is the one
    source of every knob it has (``kill_grace``, ``max_parallel``, ``out``,
    ``preservation_mode``, ``max_cost_usd``, ``pricing``, ``executor``, ``ray_address``):
    the properties below read it, so what a run records is what it does. The other
    fields are what options cannot hold: the run's name, its experiment's id, the
    models its tasks name that have no price, and a rate card already read.

    Raises:
        PricingError: ``options.pricing`` names a rate card that cannot be read (only
            when ``rates`` is not given).
    """

    run_id: str
    options: RunOptions = field(default_factory=RunOptions)
    experiment_id: str | None = None
    unpriced_models: Sequence[str] = ()
    # What prices usage that carries no cost of its own. None: the built-in card plus
    # the rates of ``options.pricing``, read once here (the app reads that file before
    # anything runs, to name the models it leaves unpriced, and hands the card in).
    rates: RateCard | None = None
    _card: RateCard = field(init=False, repr=False, compare=False, default=DEFAULT_RATES)

    def __post_init__(self) -> None:
        card = self.rates
        if card is None:
            pricing = self.options.pricing
            card = DEFAULT_RATES.with_file(pricing) if pricing else DEFAULT_RATES
        object.__setattr__(self, "_card", card)  # frozen: set once, here

    @property
    def rate_card(self) -> RateCard:
        """The card the batch prices with: ``rates``, or the one ``options.pricing`` gives."""
        return self._card

    @property
    def kill_grace(self) -> float:
        return self.options.kill_grace

    @property
    def allow_unconfined(self) -> bool:
        """Whether a task whose isolation cannot run here runs with none."""
        return self.options.allow_unconfined and not self.options.require_isolation

    @property
    def max_parallel(self) -> int:
        return self.options.max_parallel

    @property
    def out_dir(self) -> Path:
        return Path(self.options.out)

    @property
    def preservation_mode(self) -> PreservationMode:
        return self.options.preservation_mode

    @property
    def max_cost_usd(self) -> float | None:
        return self.options.max_cost_usd


@dataclass
class Callbacks:
    """Hooks for progress displays. An exception in one is logged and ignored."""

    on_batch_start: Callable[[int], None] | None = None
    on_task_start: Callable[[ResolvedTask], None] | None = None
    on_task_complete: Callable[[TaskCompleted], None] | None = None
    on_output: Callable[[AnyEvent], None] | None = None
    # Every committed event, in ledger order (output lines as EventRow rows):
    # feed a projection from here and it sees exactly what a rebuild would.
    on_event: Callable[[AnyEvent | EventRow], None] | None = None


class Resume(Protocol):
    """A resume of an existing run, as the batch reads it. ``projections.ResumePlan``
    (what ``plan_resume`` decided) is one: the plan runs as it was made, with no copy
    of its fields in between."""

    @property
    def skip(self) -> AbstractSet[str]:
        """Keys not to run."""

    @property
    def attempts(self) -> Mapping[str, int]:
        """Per key, its latest attempt number so far (the next one is one more)."""

    @property
    def drift_record(self) -> Mapping[str, Any]:
        """The drift ``run.resumed`` records."""

    @property
    def spent_usd(self) -> float:
        """What the run spent before this resume: a run-level max_cost_usd covers it."""

    @property
    def boundary_seq(self) -> int | None:
        """The seq of the run.started / run.resumed the resume was planned from: if
        another process resumed the run since, this one is refused (RunConflict). None:
        no check."""

    @property
    def added(self) -> Sequence[str]:
        """Keys new since the run began (recorded in run.resumed)."""

    @property
    def rerun(self) -> Sequence[str]:
        """Patterns of finished keys asked to run again (recorded)."""

    @property
    def rerun_failed(self) -> bool:
        """Whether keys in the failed category were asked to run again (recorded)."""

    @property
    def retry_errors(self) -> bool:
        """Whether keys in the error category were asked to run again (recorded)."""


@dataclass
class BatchResult:
    run_id: str
    status: RunStatus
    completed: list[TaskCompleted]
    writer: WriterStats


# One attempt, run here (``run_task``) or on a cluster (``RayExecutor.run``), both by
# ``run_attempt``'s protocol: how it ended, once recorded (its committed task.completed,
# or task.interrupted when it could not finish).
Attempts = Callable[
    [ResolvedTask, RunContext, int, Callable[[], None] | None],
    Awaitable[AttemptOutcome],
]


def _call(callback: Callable[..., None] | None, *args: Any) -> None:
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:
        log.exception("callback %s failed; ignored", getattr(callback, "__name__", callback))


async def run_batch(
    ledger: Ledger,
    tasks: Sequence[ResolvedTask],
    config: BatchConfig,
    callbacks: Callbacks | None = None,
    *,
    skipped: Sequence[Skipped] = (),
    resume: Resume | None = None,
    kill_now: trio.Event | None = None,
    signer: Signer | None = None,
) -> BatchResult:
    """Run ``tasks`` and record the whole batch in ``ledger``.

    Args:
        ledger: a read-write ledger; the batch's writer appends to it from a thread.
        tasks: resolved tasks; keys in ``resume.skip`` are not run.
        config: run id, concurrency, output folder, budgets.
        callbacks: progress hooks.
        skipped: task files that failed to load, recorded as ``task.skipped``.
        resume: run an existing run's remaining keys and record ``run.resumed``.
        kill_now: when set (a second Ctrl-C), running process groups are killed at
            once instead of after their grace period.
        signer: the batch's key, which seals what it writes (``ledger._signing``); a
            new one when not given (the caller passes its own to seal more afterwards).

    Raises:
        ValueError: two tasks have the same key.
        BaseException: when the surrounding scope is cancelled, its cancellation
            (usually inside an exception group from the nurseries it crossed); the
            ledger records the interruption first.
    """
    callbacks = callbacks or Callbacks()
    keys = [t.task_key for t in tasks]
    if len(set(keys)) != len(keys):
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"task keys must be unique in a batch: {', '.join(repeated[:5])}")
    to_run = [t for t in tasks if resume is None or t.task_key not in resume.skip]
    # What batches of this host that died (SIGKILL, the OOM killer) left behind.
    await trio.to_thread.run_sync(sweep_dead_batches, ledger)
    token = secrets.token_hex(8)
    sandbox_root = Path(tempfile.gettempdir()) / f"evalledger-{config.run_id}-{token}"
    # From here, should this process die, the watchdog kills what the batch started and
    # removes the folder. The watchdog first, then the folder: a runner killed between
    # the two leaves nothing behind (the other way round it left an empty folder). The
    # folder holds its proof (a marker naming the token) before anything else: nothing
    # removes a folder without it.
    watchdog = Watchdog(token, sandbox_root)
    try:
        make_folder(sandbox_root, token)
    except BaseException:
        watchdog.done()
        raise
    sandboxes = SandboxPool(sandbox_root, ahead=4 * max(1, config.max_parallel))
    cluster = None
    try:
        attempts: Attempts = run_task
        if config.options.executor == "ray" and to_run:  # nothing to run: no cluster
            cluster = await trio.to_thread.run_sync(_join_cluster, config, token)
            attempts = cluster.run
        return await _run(ledger, tasks, to_run, config, callbacks, skipped, resume, kill_now,
                          sandboxes, token, attempts, signer or Signer(config.run_id))
    finally:
        if cluster is not None:
            with trio.CancelScope(shield=True):
                await _leave_cluster(cluster, kill_now)
        # Nothing a task started outlives the batch, daemons that left their process
        # group included: they still carry the batch's token in their environment.
        kill_marked(batch_mark(token), prefix=True)
        with trio.CancelScope(shield=True):
            if (sandbox_root / DOCKER_MARK).exists():  # and its containers, by label
                await trio.to_thread.run_sync(remove_containers, token)
            await trio.to_thread.run_sync(sandboxes.close)
        remove_tree(sandbox_root, ignore_errors=True)
        watchdog.done()


def _join_cluster(config: BatchConfig, token: str) -> RayExecutor:
    from .ray import RayExecutor, WorkerSpec

    spec = WorkerSpec(run_id=config.run_id, batch_token=token,
                      preservation_mode=config.preservation_mode,
                      kill_grace=config.kill_grace, rates=config.rate_card,
                      no_grade=config.options.no_grade,
                      allow_unconfined=config.allow_unconfined)
    cluster = RayExecutor(spec, config.max_parallel, config.options.ray_address)
    cluster.start()
    return cluster


async def _leave_cluster(cluster: RayExecutor, kill_now: trio.Event | None) -> None:
    """Close the cluster's side of the batch; a second Ctrl-C meanwhile cuts the grace
    period short there too."""
    if kill_now is None:
        kill_now = trio.Event()
    async with trio.open_nursery() as nursery:

        async def on_kill_now() -> None:
            await kill_now.wait()
            await trio.to_thread.run_sync(cluster.kill_now)

        nursery.start_soon(on_kill_now)
        await trio.to_thread.run_sync(functools.partial(cluster.close, kill_now=kill_now.is_set()))
        nursery.cancel_scope.cancel()


async def _run(
    ledger: Ledger,
    tasks: Sequence[ResolvedTask],
    to_run: list[ResolvedTask],
    config: BatchConfig,
    callbacks: Callbacks,
    skipped: Sequence[Skipped],
    resume: Resume | None,
    kill_now: trio.Event | None,
    sandboxes: SandboxPool,
    token: str,
    attempts: Attempts,
    signer: Signer,
) -> BatchResult:
    completed: list[TaskCompleted] = []
    on_committed = None
    if callbacks.on_event is not None:
        on_event = callbacks.on_event

        def on_committed(events: Sequence[AnyEvent | EventRow]) -> None:
            for event in as_lines(events):  # a chunk: its lines, as a reader gets them
                on_event(event)

    async with open_writer(ledger, on_committed, signer) as writer, \
            _gateway_for(to_run, sandboxes.root) as (gateway, egress):
        ctx = RunContext(
            run_id=config.run_id,
            writer=writer,
            # Absolute: commands see it (direct-write) from their own cwd.
            artifacts_root=(config.out_dir / config.run_id / "artifacts").resolve(),
            sandbox_root=sandboxes.root,
            sandboxes=sandboxes,
            batch_token=token,
            kill_now=kill_now if kill_now is not None else trio.Event(),
            preservation_mode=config.preservation_mode,
            kill_grace=config.kill_grace,
            no_grade=config.options.no_grade,
            allow_unconfined=config.allow_unconfined,
            on_output=callbacks.on_output,
            rates=config.rate_card,
            spent_usd=resume.spent_usd if resume else 0.0,
            ledger_path=str(Path(ledger.path).resolve()),
            gateway=gateway,
            egress=egress,
            max_cost_usd=config.max_cost_usd,
        )
        if to_run and config.preservation_mode != "none":
            await trio.to_thread.run_sync(private_folder, ctx.artifacts_root)
        status = RunStatus.COMPLETED
        limiter = trio.CapacityLimiter(max(1, config.max_parallel))

        breaker = _Breaker(config.options.max_infra_failures)

        async def one(task: ResolvedTask) -> None:
            attempt = (resume.attempts.get(task.task_key, 0) if resume else 0) + 1
            for retry in range(task.retries + 1):
                if retry:  # an infrastructure failure: again, after the backoff, in a slot
                    await trio.sleep(config.options.retry_backoff * 2 ** (retry - 1))
                    await limiter.acquire_on_behalf_of(task.task_key)
                    if breaker.tripped or _over_budget(ctx, config):
                        limiter.release_on_behalf_of(task.task_key)
                        return
                    _call(callbacks.on_task_start, task)
                with breaker.ending() as ends:
                    outcome = await attempts(
                        task, ctx, attempt,
                        lambda: ends.release(limiter.release_on_behalf_of, task.task_key))
                    ends.count(_infra(outcome))
                # An attempt lost before its task.started left no number behind.
                attempt += outcome.started
                if outcome.completed is not None:  # else its Ray worker was lost
                    completed.append(outcome.completed)
                    _call(callbacks.on_task_complete, outcome.completed)
                if not _infra(outcome) or breaker.tripped:
                    return

        # Written directly (the writer is idle until now), under the write lock, only
        # if no other process started or resumed this run since it was read.
        opening = _opening(config, tasks, to_run, resume, token, sandboxes.root,
                           ledger.ledger_id, signer.public_key)
        guard: tuple[str, int] | None = (config.run_id, 0)  # a new run: nobody started it
        if resume is not None:
            boundary = resume.boundary_seq
            guard = None if boundary is None else (config.run_id, boundary)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(
                functools.partial(ledger.append, signer.sealed([EventRow.of(opening)]),
                                  if_run_at=guard)
            )
        _call(on_committed, [opening])  # a failing callback is logged, as in the writer
        # Invariant: from the moment run.started is committed, every way out of this
        # block records a run.finished.
        try:
            for skip in skipped:
                await writer.append(
                    TaskSkipped(run_id=config.run_id, path=skip.path, reason=skip.reason,
                                deliberate=skip.deliberate)
                )
            _call(callbacks.on_batch_start, len(to_run))
            async with trio.open_nursery() as nursery:
                for task in to_run:
                    await limiter.acquire_on_behalf_of(task.task_key)
                    if _over_budget(ctx, config):
                        limiter.release_on_behalf_of(task.task_key)
                        status = RunStatus.BUDGET_STOPPED
                        break
                    # With a breaker: the attempts that freed a slot are counted first,
                    # so that N in a row stop dispatching at once.
                    await breaker.settled()
                    if breaker.tripped:
                        limiter.release_on_behalf_of(task.task_key)
                        status = RunStatus.INFRA_STOPPED
                        break
                    _call(callbacks.on_task_start, task)
                    nursery.start_soon(one, task)
        except BaseException:
            with trio.CancelScope(shield=True):
                await writer.append_durable(
                    RunFinished(run_id=config.run_id, status=RunStatus.INTERRUPTED)
                )
            raise
        # Shielded: a cancel landing after the last task must not leave the run unended.
        with trio.CancelScope(shield=True):
            await writer.append_durable(RunFinished(run_id=config.run_id, status=status))
    return BatchResult(config.run_id, status, completed, writer.stats)


@contextlib.asynccontextmanager
async def _gateway_for(tasks: Sequence[ResolvedTask], root: Path,
                       ) -> AsyncIterator[tuple[Gateway | None, Egress | None]]:
    """The batch's model gateway, when one of its tasks calls through it (none else:
    its HTTP and h11 are not even imported); its unix socket in the batch's private
    folder (``root``), for sandboxes of ``network: gateway``; and the egress proxy's
    there, when one of those has ``allow_domains``."""
    if not any(task.gateway for task in tasks):
        yield None, None
        return
    import os

    from ._gateway import open_gateway

    if not any(task.network == "gateway" for task in tasks):
        async with open_gateway(dict(os.environ)) as gateway:
            yield gateway, None
        return
    from ._egress import open_egress

    with _socket_folder(root) as folder:
        async with open_gateway(dict(os.environ), folder / "gateway.sock") as gateway:
            if not any(task.allow_domains for task in tasks):
                yield gateway, None
                return
            async with open_egress(folder / "egress.sock") as egress:
                yield gateway, egress


@contextlib.contextmanager
def _socket_folder(root: Path) -> Iterator[Path]:
    """Where the gateway's unix socket goes: the batch's private folder, unless its path
    would pass what a unix socket's may hold (108 bytes: a deep ``TMPDIR``); then a
    private folder of its own in /tmp, removed after."""
    if len(str(root / "egress.sock").encode()) < 100:
        yield root
        return
    folder = Path(tempfile.mkdtemp(prefix="evalledger-gw-", dir="/tmp"))
    try:
        yield folder
    finally:
        remove_tree(folder, ignore_errors=True)


def _host(config: BatchConfig) -> dict[str, str]:
    """The session's host: how the batch's attempts are held to their limits
    (docs/isolation.md, "Limits": here, as this machine allows; on Ray, as each
    worker's does), and whether reads of task folders are watched (only here)."""
    prices = {"prices": prices_source()}  # the maintained rate card the batch priced by
    if config.options.executor == "ray":
        return {**host_info(), "limits": "per worker", **prices}
    watched = {"folder_reads": "fanotify"} if pool() is not None and watch() else {}
    return {**host_info(), "limits": enforcement(), **watched, **prices}


def _opening(
    config: BatchConfig,
    tasks: Sequence[ResolvedTask],
    to_run: Sequence[ResolvedTask],
    resume: Resume | None,
    token: str,
    sandbox_root: Path,
    ledger_id: str,
    public_key: str,
) -> AnyEvent:
    measured = fingerprint(config.options, tasks)  # what the next resume's drift compares
    if resume is not None:
        return RunResumed(
            run_id=config.run_id, fingerprint=measured, drift=dict(resume.drift_record),
            host=_host(config),
            to_run=[t.task_key for t in to_run], max_parallel=config.max_parallel,
            batch_token=token, sandbox_root=str(sandbox_root), added=list(resume.added),
            rerun=list(resume.rerun), rerun_failed=resume.rerun_failed,
            retry_errors=resume.retry_errors, public_key=public_key,
        )
    return RunStarted(
        run_id=config.run_id,
        experiment_id=config.experiment_id,
        config=config.options,
        fingerprint=measured,
        planned=[t.task_key for t in tasks],
        host=_host(config),
        max_parallel=config.max_parallel,
        unpriced_models=list(config.unpriced_models),
        batch_token=token,
        sandbox_root=str(sandbox_root),
        ledger_id=ledger_id or None,
        public_key=public_key,
    )


class _Breaker:
    """The run's circuit breaker: ``limit`` infrastructure failures in a row (in the order
    attempts end) trip it, and the batch stops dispatching (``infra_stopped``): when the
    sandbox, the API or the cluster is broken, the rest of the suite would fail the same
    way. None: never.

    An attempt frees its slot before its end is committed (the next task starts
    meanwhile), so it is counted a little later: with a limit, dispatching waits for
    the ends of the attempts that freed a slot (``settled``)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.in_a_row = 0
        self._uncounted = 0
        self._counted = trio.Event()

    @property
    def tripped(self) -> bool:
        return self.limit is not None and self.in_a_row >= self.limit

    @contextlib.contextmanager
    def ending(self) -> Iterator[_Ending]:
        """One attempt: its slot freed through ``release``, its end given to ``count``
        (an attempt that raised counts as no infrastructure failure)."""
        ends = _Ending(self)
        try:
            yield ends
        finally:
            ends.count(False)

    def _released(self) -> None:
        self._uncounted += 1

    def _count(self, infra: bool, released: bool) -> None:
        self.in_a_row = self.in_a_row + 1 if infra else 0
        if released:
            self._uncounted -= 1
            if not self._uncounted:
                self._counted.set()
                self._counted = trio.Event()

    async def settled(self) -> None:
        """Wait until every attempt that freed a slot has been counted (with a limit)."""
        while self.limit is not None and self._uncounted:
            await self._counted.wait()


class _Ending:
    """One attempt's end, as the breaker counts it: once."""

    def __init__(self, breaker: _Breaker) -> None:
        self._breaker = breaker
        self._released = False
        self._counted = False

    def release(self, free: Callable[[str], None], key: str) -> None:
        self._released = True
        self._breaker._released()
        free(key)

    def count(self, infra: bool) -> None:
        if not self._counted:
            self._counted = True
            self._breaker._count(infra, self._released)


def _infra(outcome: AttemptOutcome) -> bool:
    """Whether an attempt failed for its infrastructure's sake: its class says so, or its
    Ray worker (or node) was lost under it."""
    if outcome.completed is not None:
        return outcome.completed.failure_class == FailureClass.INFRA
    return (outcome.interrupted or "").startswith(WORKER_LOST)


def _over_budget(ctx: RunContext, config: BatchConfig) -> bool:
    return config.max_cost_usd is not None and ctx.spent_usd > config.max_cost_usd

