"""Running one task attempt: sandbox, command, streams, budgets, criteria.

The runner appends as it goes: ``task.started``, then every line (``task.output``
/ ``task.event``) and usage report (``task.usage``) as it arrives; how the attempt
ends (``task.completed``, committed before ``run_task`` returns, or ``task.interrupted``
when the batch is cancelled) is ``run_attempt``'s protocol (``_attempt``), and its
final status ``final_status``'s rule (``_status``).

Invariant: spend is never dropped. However an attempt ends (its result, a timeout, a
budget stop, an error, cancellation), the usage meter's running estimate (what a
claude-code transcript's messages used since its last result line) is recorded as
``task.usage`` before the attempt's last event: before ``task.completed``, or, shielded
and committed with it, before ``task.interrupted``.

Any exception inside the runner becomes final status ERROR with its message; it
never takes down the batch. Cancellation is not an exception in that sense: it
is recorded and re-raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import itertools
import logging
import math
import os
import secrets
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from evalledger._workspace_diff import WorkspaceUnfit
from evalledger.agents import api_health
from evalledger.ledger import (
    AnyEvent,
    CriterionResult,
    EventRow,
    EventType,
    TaskCompleted,
    TaskEgress,
    TaskEmitted,
    TaskIsolation,
    TaskOutput,
    TaskOutputTruncated,
    TaskStalled,
    TaskStarted,
    TaskUsage,
    TokenCounts,
    as_lines,
    chunked,
    new_event_ids,
    utc_now,
)
from evalledger.options import DEFAULT_PRESERVATION_MODE, PreservationMode
from evalledger.pricing import DEFAULT_RATES, RateCard
from evalledger.statuses import FinalStatus
from evalledger.suite import AgentJudge, ResolvedTask, RunCommand

from . import _access, _limits, _sandbox
from . import isolation as _isolation
from ._agent_version import AgentVersions
from ._attempt import AttemptOutcome, run_attempt
from ._confinement import (
    IsolationLeak,
    Jail,
    Probe,
    confine,
    egress_port,
    read_probes,
    record_probes,
)
from ._criteria import Evidence, evaluate
from ._judges import Judging
from ._lines import LineSplitter, parse_json_object
from ._marks import MARKER_VAR
from ._process import (
    DEFAULT_KILL_GRACE,
    end_group,
    kill_group,
    release_pipes,
    spawn,
)
from ._status import AttemptFacts, BudgetStop, final_status
from ._usage import Usage, UsageMeter
from ._writer import EventSink, WriterFailed

if TYPE_CHECKING:
    from ._egress import Egress, EgressAttempt
    from ._gateway import Gateway, GatewayAttempt

log = logging.getLogger("evalledger.executor")

# Linux refuses one environment string over 128 KiB (MAX_ARG_STRLEN, in bytes, with
# its name): a longer prompt is on stdin only.
MAX_ENV_PROMPT = 128 * 1024 - 64
# Output kept in memory per stream for output_contains: its tail (a verdict is
# printed last; an early line beyond this is not seen). The ledger has all of it.
MAX_KEPT_OUTPUT = 16 * 1024 * 1024
_LINE_COST = 64
# Past max_output, the tail kept and recorded when the output ends: its last tenth, at
# most this (what a reader of a runaway attempt looks at: how it ended).
MAX_TAIL_BYTES = 1 << 20
# Past max_output, usage is summed per model, for this many models at most; the rest
# are summed as one, under this name, of no price.
_MERGED_MODELS = 64
_OTHER_MODELS = "(other models, past max_output)"


@dataclass
class _Omitted:
    """The lines an attempt printed past its ``max_output``: counted, and its tail kept
    (``(n, stream, ts, text, truncated, JSON object or None, bytes)`` each)."""

    from_n: int
    tail_limit: int
    lines: int = 0
    size: int = 0
    tail: deque[tuple[int, str, str, str, bool, dict[str, Any] | None, int]] = field(
        default_factory=deque)
    tail_size: int = 0
    # What the tail holds, each line charged ``_LINE_COST`` more than its bytes: a line
    # kept costs its tuple whatever its length (a million empty lines, charged a byte
    # each, held 222 MB); kept within ``tail_limit``, but for the last line.
    tail_cost: int = 0
    # The usage reported past the limit, by (model, estimate, unpriced): ``merge``.
    usages: dict[tuple[str | None, bool, bool], Usage] = field(default_factory=dict)
    usage_ts: str = ""

    def add(self, n: int, stream: str, ts: str, text: str, truncated: bool,
            data: dict[str, Any] | None, size: int) -> None:
        self.lines += 1
        self.size += size
        self.tail.append((n, stream, ts, text, truncated, data, size))
        self.tail_size += size
        self.tail_cost += size + _LINE_COST
        while len(self.tail) > 1 and self.tail_cost > self.tail_limit:
            dropped = self.tail.popleft()[-1]
            self.tail_size -= dropped
            self.tail_cost -= dropped + _LINE_COST

    def merge(self, usage: Usage, ts: str) -> None:
        """A usage reported past ``max_output``: summed into one per model (priced and
        unpriced apart, an estimate apart), so a command printing a usage line a
        million times, each of another model, costs the ledger a few rows; past
        ``_MERGED_MODELS`` models, the rest are one usage of no price, its tokens kept."""
        key = (usage.model, usage.estimate, usage.cost_usd is None)
        if key not in self.usages and len(self.usages) >= _MERGED_MODELS:
            usage = dataclasses.replace(usage, model=_OTHER_MODELS, cost_usd=None)
            key = (_OTHER_MODELS, usage.estimate, True)
        before = self.usages.get(key)
        if before is not None:
            usage = dataclasses.replace(
                usage, tokens=before.tokens + usage.tokens,
                cost_usd=None if usage.cost_usd is None or before.cost_usd is None
                else before.cost_usd + usage.cost_usd)
        self.usages[key] = usage
        self.usage_ts = ts

    def events(self, run_id: str, task_key: str, attempt: int, limit: int
               ) -> list[AnyEvent | EventRow]:
        """The ``task.output_truncated``, then the tail's lines as they would have been
        recorded, then the usage reported past the limit (``merge``)."""
        tail = list(self.tail)
        found: list[AnyEvent | EventRow] = [TaskOutputTruncated(
            run_id=run_id, task_key=task_key, attempt=attempt, from_n=self.from_n,
            limit_bytes=limit, omitted_bytes=self.size - self.tail_size,
            omitted_lines=self.lines - len(tail), tail_from_n=tail[0][0] if tail else None)]
        for n, stream, ts, text, truncated, data, _ in tail:
            found.append(TaskOutput.encoded(run_id, task_key, ts, stream, text, n, truncated)
                         if data is None else
                         TaskEmitted(run_id=run_id, task_key=task_key, ts=ts, data=data, n=n))
        found += [usage.event(run_id, task_key, self.usage_ts) for usage in self.usages.values()]
        return found


def notify_lines(ctx: RunContext, events: Sequence[AnyEvent | EventRow]) -> None:
    """Tell ``ctx.on_output`` of each line and event but usage, a chunk's lines each as
    the ledger gives them back."""
    for event in as_lines(events):
        if event.type != EventType.TASK_USAGE:
            ctx.notify_output(event.decode() if isinstance(event, EventRow) else event)


def _size(text: str) -> int:
    # As UTF-8 with its newline; nearly every line is ASCII (its length, no encoding).
    return (len(text) if text.isascii() else len(text.encode("utf-8", "replace"))) + 1
# How long what an attempt printed may wait for more of its output before it is handed
# to the writer: an agent prints a line per read, seconds apart, and lines written
# together are one row, compressed (a chunk, ledger/_lines), not a row each. A reader
# of the ledger (the live viewer) sees them this much later; the terminal's --stream too.
LINGER = 0.5
# What an attempt holds at most before it is handed over without waiting (one chunk).
_FLUSH_EVENTS = 1024
# How long a cancelled attempt may wait to hand over what it already read: the writer
# drains its channel shielded, so only a stalled disk makes this bound matter.
_LAST_WRITE = 5.0


@dataclass
class RunContext:
    """What every task of one batch shares."""

    run_id: str
    writer: EventSink
    artifacts_root: Path
    sandbox_root: Path
    preservation_mode: PreservationMode = DEFAULT_PRESERVATION_MODE
    kill_grace: float = DEFAULT_KILL_GRACE
    # Run the commands only: no criterion checked, attempts pending a regrade.
    no_grade: bool = False
    # An isolation that cannot run here runs as none (else the attempt is an ERROR).
    allow_unconfined: bool = False
    on_output: Callable[[AnyEvent], None] | None = None
    rates: RateCard = DEFAULT_RATES
    spent_usd: float = 0.0
    # A snapshot: copying os.environ decodes every variable, once per task otherwise.
    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # Set by a second Ctrl-C: stop waiting out grace periods, SIGKILL now.
    kill_now: trio.Event = field(default_factory=trio.Event)
    # Empty sandboxes made ahead and removed off the loop (None: each task makes its own).
    sandboxes: _sandbox.SandboxPool | None = None
    # Random per batch: the MARKER_VAR of every attempt starts with it (see _process).
    batch_token: str = field(default_factory=lambda: secrets.token_hex(8))
    # Where a task's workdir is copied from, when not where the task file says (a Ray
    # worker's copy of what the driver shipped); raises BuildFailed when there is none.
    locate_workdir: Callable[[str], str] | None = None
    # The ledger's path, when it is on this machine: an isolated command's prelude
    # checks it is not visible.
    ledger_path: str | None = None
    # The batch's canary (``isolation.make_canary``), made by its first confined attempt.
    canary: str | None = None
    # The agents' versions asked so far (``agent_version_command``), once per batch.
    agent_versions: AgentVersions = field(default_factory=AgentVersions)
    # The batch's model gateway, when a task has ``gateway`` (docs/gateway.md).
    gateway: Gateway | None = None
    # The batch's egress proxy, when a task has ``allow_domains`` (docs/gateway.md).
    egress: Egress | None = None
    # The run's max_cost_usd: past it, the gateway refuses an agent's next call.
    max_cost_usd: float | None = None
    # Numbers the attempts' marks: shared by every attempt the context runs.
    _marks_made: Iterator[int] = field(default_factory=itertools.count)

    def attempt_marker(self) -> str:
        """A fresh ``MARKER_VAR=value`` entry for one attempt's environment."""
        return f"{MARKER_VAR}={self.batch_token}-{next(self._marks_made)}"

    def notify_output(self, event: AnyEvent) -> None:
        if self.on_output is None:
            return
        try:
            self.on_output(event)
        except Exception:
            log.exception("stream callback failed for %s; ignored", event.task_key)


@dataclass
class _Streams:
    """One attempt's reading state: what it has recorded of its two pipes."""

    task: ResolvedTask
    ctx: RunContext
    meter: UsageMeter
    attempt: int = 1
    # The ``n`` of the last line recorded: both streams' lines are numbered together.
    last_n: int = 0
    # Bytes of lines recorded so far (max_output), and what came past it.
    recorded_size: int = 0
    omitted: _Omitted | None = None
    # The tail of each stream, for output_contains: a verdict is printed last.
    kept: dict[str, deque[str]] = field(
        default_factory=lambda: {"stdout": deque(), "stderr": deque()}
    )
    kept_chars: dict[str, int] = field(default_factory=lambda: {"stdout": 0, "stderr": 0})
    # How many readers are waiting for data (not busy handing lines to the writer),
    # and the bytes read so far: what tells pipes held open from output still coming.
    waiting: int = 0
    received: int = 0
    _last_received: int = -1
    # Set at the line that passed a live budget: reading stops there.
    budget_stop: BudgetStop | None = None
    # Under isolation: whether the prelude reported, and what leaked or failed (ERROR).
    probed: bool = False
    isolation_error: str | None = None
    # Liveness: when the attempt last produced anything (trio time, and the UTC ts of
    # its event), and why it was ended as stalled.
    last_activity: float = 0.0
    last_at: str = ""
    stalled: str | None = None
    # Behind the gateway: its token there (a stall asks it whether a call of the
    # attempt was waiting on its model API), and whether the stall that ended it was
    # the attempt's own silence (none was).
    gateway: GatewayAttempt | None = None
    own_stall: bool = False
    # Sends under way: a reader held up by a busy ledger is not a silent command.
    sending: int = 0
    # What was read and not yet handed to the writer (``flush``), and when it must be
    # (trio time; inf: nothing waits).
    pending: list[AnyEvent | EventRow] = field(default_factory=list)
    flush_at: float = math.inf
    # The model API failure a claude-code stream was in when it last spoke of its API.
    api_error: str | None = None
    # Behind the gateway: the failure its last model call met, as the gateway saw it.
    api_failure: str | None = None
    # What its processes opened in its task folder, where that is watched (_access).
    folder_reads: _access.Reads | None = None
    _woken: trio.Event | None = None

    def limit_hit(self, detail: str) -> None:
        """The attempt hit one of its limits: it ends LIMIT_EXCEEDED (the first one said)."""
        if self.budget_stop is None:
            self.budget_stop = BudgetStop(FinalStatus.LIMIT_EXCEEDED, detail)
            self.meter.stopped()

    def touched(self, ts: str) -> None:
        """The attempt produced something (lines, JSON events, usage) at ``ts``."""
        self.last_activity = trio.current_time()
        self.last_at = ts
        if self._woken is not None:
            self._woken.set()

    def arm(self) -> trio.Event:
        """An event set when the attempt next produces something."""
        self._woken = trio.Event()
        return self._woken

    def stuck(self, open_pipes: int) -> bool:
        """Whether every open pipe's reader sits waiting and no byte came since last asked."""
        quiet = self.received == self._last_received
        self._last_received = self.received
        return quiet and self.waiting == open_pipes

    def text(self, stream: str) -> str:
        return "\n".join(self.kept[stream])

    async def lines(self, pairs: list[tuple[str, bool]], stream: str) -> None:
        """Record one read's worth of lines (and any usage they report): held until
        ``flush``, which the reader calls once ``flush_at`` comes (``LINGER`` after the
        first of them) or enough is held."""
        events, recorded = self._events(pairs, stream)
        self._keep(recorded, stream)
        if not events:
            return
        self.touched(events[-1].ts)  # it spoke: before the send, which may wait
        self.pending += events
        if len(self.pending) >= _FLUSH_EVENTS or self.budget_stop is not None:
            await self.flush()
        elif self.flush_at == math.inf:
            self.flush_at = trio.current_time() + LINGER

    async def flush(self, *, committed: bool = False) -> None:
        """Hand what was read to the writer, in one send: its lines one row each run of
        them (``chunked``: a chunk, made here so that what the callbacks see is what the
        ledger gives back, ids included). Every other event of the attempt is appended
        after a flush: the ledger keeps the order things happened in. ``committed``:
        return once they are in the ledger (what a stall reads the last seq of)."""
        events, self.pending, self.flush_at = chunked(self.pending), [], math.inf
        if not events:
            return
        self.sending += 1
        try:
            if not committed:
                await self._send(events)
            else:
                if len(events) > 1:
                    await self._send(events[:-1])
                # Sent whole even when cancelled meanwhile (as _send does).
                with trio.CancelScope(shield=True), trio.move_on_after(_LAST_WRITE):
                    await self.ctx.writer.append_durable(events[-1])
        finally:
            self.sending -= 1
        if self.ctx.on_output is not None:
            notify_lines(self.ctx, events)

    def _events(
        self, pairs: list[tuple[str, bool]], stream: str
    ) -> tuple[list[AnyEvent | EventRow], list[tuple[str, bool]]]:
        """The events of these lines, and the lines they record: all of them, unless a
        line passed a budget (reading stops at it; what follows is not recorded, as when
        it comes in a later read, and the tokens recorded are those the error states)."""
        key, run_id, ts = self.task.task_key, self.ctx.run_id, utc_now()
        events: list[AnyEvent | EventRow] = []
        encoded = TaskOutput.encoded
        json_lines = stream == "stdout"
        agent = self.task.stream_format != "native"
        n, room = self.last_n, self.task.max_output - self.recorded_size
        for event_id, (text, truncated) in zip(new_event_ids(len(pairs)), pairs, strict=True):
            n += 1
            size = _size(text)
            # Cheap first test inline: nearly every line is plain text (a hot loop).
            if (
                json_lines and not truncated and text and (text[0] == "{" or text[0].isspace())
                and (data := parse_json_object(text)) is not None
            ):
                if size <= room and self.omitted is None:
                    room -= size
                    events.append(TaskEmitted(event_id=event_id, run_id=run_id, task_key=key,
                                              ts=ts, data=data, n=n))
                else:
                    self._omit(n, stream, ts, text, truncated, data, size)
                for usage in self.meter.observe(data):
                    if self.omitted is None:
                        events.append(self._usage_event(usage, ts))
                    else:  # past max_output: one usage per model, recorded with the tail
                        self.ctx.spent_usd += usage.cost_usd or 0.0
                        self.omitted.merge(usage, ts)
                if agent:
                    self._api_health(data)
                # Also without a usage to record: a claude-code transcript's running
                # estimate grows with each assistant message.
                self.check_budget()
                if self.budget_stop is not None:
                    pairs = pairs[:n - self.last_n]
                    break
            elif size <= room and self.omitted is None:
                room -= size
                events.append(encoded(run_id, key, ts, stream, text, n, truncated, event_id))
            else:
                self._omit(n, stream, ts, text, truncated, None, size)
        self.last_n = n
        self.recorded_size = self.task.max_output - room
        return events, pairs

    def _omit(self, n: int, stream: str, ts: str, text: str, truncated: bool,
              data: dict[str, Any] | None, size: int) -> None:
        if self.omitted is None:
            limit = self.task.max_output
            self.omitted = _Omitted(n, min(MAX_TAIL_BYTES, limit // 10))
        self.omitted.add(n, stream, ts, text, truncated, data, size)

    def _api_health(self, data: dict[str, object]) -> None:
        """Follow what an agent's stream says of its model API: retrying it (Claude
        Code's ``system``/``api_retry``, Codex's ``error`` "Reconnecting...", Gemini
        CLI's ``error`` warnings) until an answer comes (an ``assistant`` message, an
        ``item.completed``, a ``message``, a ``step_finish``), or giving up on it (a
        result or a failed turn saying the API was overloaded, rate-limited or answered
        5xx; OpenCode's ``APIError``). Still failing when the attempt fails: an
        infrastructure failure."""
        if self.meter.gateway:  # what the gateway saw is what counts, never what is said
            return
        said = api_health(self.meter.format, data)
        if said is not None:
            self.api_error = said or None

    def _keep(self, pairs: list[tuple[str, bool]], stream: str) -> None:
        """Keep the stream's tail for output_contains, at most ``MAX_KEPT_OUTPUT``."""
        kept = self.kept[stream]
        kept.extend(text for text, _ in pairs)
        # Charged per line too: a million empty lines still cost a str object each.
        self.kept_chars[stream] += sum(len(text) for text, _ in pairs) + _LINE_COST * len(pairs)
        while self.kept_chars[stream] > MAX_KEPT_OUTPUT and len(kept) > 1:
            self.kept_chars[stream] -= len(kept.popleft())

    async def _send(self, events: list[AnyEvent | EventRow]) -> None:
        try:
            await self.ctx.writer.append(*events)
        except trio.Cancelled:
            # Read from the pipe and counted by the meter already: recorded all the same,
            # or the spend they report would be lost (a cancelled send sent nothing).
            with trio.CancelScope(shield=True), trio.move_on_after(_LAST_WRITE):
                await self.ctx.writer.append(*events)
            raise

    def _usage_event(self, usage: Usage, ts: str) -> TaskUsage:
        self.ctx.spent_usd += usage.cost_usd or 0.0
        return usage.event(self.ctx.run_id, self.task.task_key, ts)

    async def settle(self) -> None:
        """Record what was read and is not yet: past ``max_output``, the
        ``task.output_truncated`` and the output's tail; the meter's running estimate.

        Shielded: once taken from the meter (or the tail) it is held nowhere else, so a
        cancellation must not drop it between the two.
        """
        with trio.CancelScope(shield=True):
            await self.flush()
        if (omitted := self.omitted) is not None:
            self.omitted = None
            events = chunked(omitted.events(self.ctx.run_id, self.task.task_key, self.attempt,
                                            self.task.max_output))
            with trio.CancelScope(shield=True):
                await self.ctx.writer.append(*events)
        if usages := self.meter.finish():
            ts = utc_now()
            with trio.CancelScope(shield=True):
                await self.ctx.writer.append(*(self._usage_event(u, ts) for u in usages))

    # -- the gateway's side (``_gateway.Metered``) -----------------------------------------

    def count(self, usage: Usage) -> None:
        """A model call the gateway metered: counted in the attempt's totals and the
        run's spend, held to the budgets."""
        self.meter.book(usage)
        self.ctx.spent_usd += usage.cost_usd or 0.0
        self.check_budget()

    async def record(self, usage: Usage, call: dict[str, object]) -> None:
        """The call, recorded after the lines read before it."""
        from ._gateway import usage_event

        event = usage_event(usage, call, self.ctx.run_id, self.task.task_key)
        with trio.CancelScope(shield=True):  # counted: so recorded, whatever comes
            await self.flush()
            await self.ctx.writer.append(event)
        self.touched(event.ts)

    async def egress(self, host: str, port: int, allowed: bool, reason: str | None,
                     sent_bytes: int, received_bytes: int, seconds: float) -> None:
        """A connection through the egress proxy (``_egress.Recorder``), recorded after
        the lines read before it."""
        event = TaskEgress(run_id=self.ctx.run_id, task_key=self.task.task_key,
                           attempt=self.attempt, host=host, port=port, allowed=allowed,
                           reason=reason, sent_bytes=sent_bytes,
                           received_bytes=received_bytes, seconds=seconds)
        with trio.CancelScope(shield=True):
            await self.flush()
            await self.ctx.writer.append(event)

    def refusal(self) -> str | None:
        if self.budget_stop is not None:
            return f"the task's budget is spent: {self.budget_stop.detail}"
        budget, meter, ctx = self.task.budget, self.meter, self.ctx
        if budget.max_tokens is not None and meter.live_tokens >= budget.max_tokens:
            return f"the task's budget is spent: used {meter.live_tokens} tokens, budget " \
                   f"{budget.max_tokens}"
        if budget.max_cost_usd is not None and meter.live_cost_usd >= budget.max_cost_usd:
            return f"the task's budget is spent: spent ${meter.live_cost_usd:.4f}, budget " \
                   f"${budget.max_cost_usd:.4f}"
        if ctx.max_cost_usd is not None and ctx.spent_usd >= ctx.max_cost_usd:
            return f"the run's budget is spent: spent ${ctx.spent_usd:.4f}, budget " \
                   f"${ctx.max_cost_usd:.4f}"
        return None

    def refused(self, reason: str) -> None:
        if self.budget_stop is None:
            status = (FinalStatus.TOKEN_BUDGET_EXCEEDED if "tokens" in reason
                      else FinalStatus.COST_BUDGET_EXCEEDED)
            self.budget_stop = BudgetStop(status, f"{reason}; the gateway refused a call")

    def api_seen(self, status: int | str, provider: str) -> None:
        self.api_failure = (None if status == "" else
                            f"{provider} answered HTTP {status}" if isinstance(status, int)
                            else f"{provider}: {status}")

    def check_budget(self) -> None:
        budget = self.task.budget
        if self.budget_stop is not None:
            return
        if budget.max_tokens is not None and self.meter.live_tokens > budget.max_tokens:
            self.budget_stop = BudgetStop(
                FinalStatus.TOKEN_BUDGET_EXCEEDED,
                f"used {self.meter.live_tokens} tokens, budget {budget.max_tokens}",
            )
        elif budget.max_cost_usd is not None and self.meter.live_cost_usd > budget.max_cost_usd:
            self.budget_stop = BudgetStop(
                FinalStatus.COST_BUDGET_EXCEEDED,
                f"spent ${self.meter.live_cost_usd:.4f}, budget ${budget.max_cost_usd:.4f}",
            )
        if self.budget_stop is not None:
            self.meter.stopped()  # it is ended: what it did since its last report is owed


async def _record_stream(stream: trio.abc.ReceiveStream, name: str, state: _Streams,
                         stop: trio.CancelScope) -> None:
    """Read one pipe to its end, recording its lines; a budget stop ends the command."""
    splitter = LineSplitter()
    try:
        while True:
            state.waiting += 1
            try:
                with trio.move_on_at(state.flush_at) as lingered:
                    chunk = await stream.receive_some(65536)
            finally:
                state.waiting -= 1
            if lingered.cancelled_caught:  # nothing more came meanwhile: hand it over
                await state.flush()
                continue
            if not chunk:
                break
            state.received += len(chunk)
            if pairs := splitter.feed(bytes(chunk)):  # bytes(bytes) is no copy
                await state.lines(pairs, name)
                if state.budget_stop is not None:
                    stop.cancel()
                    return
    except trio.Cancelled:
        # Stopped mid-stream: a last line without its newline is still output.
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            if pairs := splitter.close():
                await state.lines(pairs, name)
            await state.flush()
        raise
    if pairs := splitter.close():
        await state.lines(pairs, name)
    await state.flush()


def _environment_info(exit_code: int | None, meter: UsageMeter,
                      agent_version: str | None) -> dict[str, object]:
    """What ran the attempt: the versions the command stated (and its
    ``agent_version_command`` printed), and the models it used (several: joined,
    sorted). This evalledger and Python are the session's (``hosts.SESSION_KEYS``)."""
    info: dict[str, object] = {**meter.versions, "exit_code": exit_code}
    if meter.stream_format == "auto":
        info["stream_format"] = meter.format  # the one found (native: none named one)
    if meter.unread_format is not None:
        info["unread_format"] = meter.unread_format
    if agent_version is not None:
        info["agent_version"] = agent_version
    if meter.models_used:
        info["model"] = ", ".join(sorted(meter.models_used))
    return info


def _fits_environment(prompt: str) -> bool:
    # Linux counts the limit in bytes (an emoji is 4), and a NUL cannot be in a variable.
    return "\0" not in prompt and len(prompt.encode("utf-8", "replace")) <= MAX_ENV_PROMPT


async def run_task(
    task: ResolvedTask,
    ctx: RunContext,
    attempt: int = 1,
    release: Callable[[], None] | None = None,
) -> AttemptOutcome:
    """Run one attempt of ``task``; return how it ended once that is committed (here
    always its ``task.completed``: every error is a final status).

    ``release`` is called as soon as the command and its criteria are done, before
    waiting for the commit: the concurrency slot is about processes, and the next
    task can start while this one's completion is being written.

    Raises:
        BaseException: the batch's cancellation (often inside an exception group);
            ``task.interrupted`` is recorded first.
    """
    await ctx.writer.append(
        TaskStarted(
            run_id=ctx.run_id, task_key=task.task_key, task_id=task.task_id,
            variant_id=task.variant_id, replicate_index=task.replicate_index, attempt=attempt,
            definition=task.definition(), definition_hash=task.definition_hash,
            tags=list(task.tags),
        )
    )
    state = _Streams(task, ctx, UsageMeter(task.stream_format, task.model, ctx.rates,
                                           gateway=bool(task.gateway)), attempt)

    async def interrupted(reason: str) -> AttemptOutcome:
        # What the attempt used and no result line reported: booked before the
        # interruption, and committed with it (the channel keeps their order).
        with contextlib.suppress(WriterFailed):
            await state.settle()
        return AttemptOutcome(interrupted=reason)

    return await run_attempt(ctx.writer, ctx.run_id, task.task_key,
                             functools.partial(_attempt, task, ctx, attempt, state),
                             interrupted, release)


async def _attempt(
    task: ResolvedTask, ctx: RunContext, attempt: int, state: _Streams
) -> AttemptOutcome:
    """Sandbox, command, criteria; every exception but cancellation is an outcome."""
    # Asked before the clock starts: the agent's version is no part of its attempt.
    agent_version = await ctx.agent_versions.version(task, ctx.base_env)
    began = time.monotonic()
    # The timeout is wall clock for the whole task (docs/tasks.md): sandbox, command,
    # criteria.
    deadline = trio.current_time() + task.timeout
    artifacts = ctx.artifacts_root / task.task_key
    sandbox: Path | None = None
    exit_code: int | None = None
    timed_out = False
    workspace_hash: str | None = None
    kept_hash: str | None = None
    judging = Judging(functools.partial(_record_judge, state), ctx.rates, ctx.base_env,
                      Path(task.workdir) if task.workdir else None)
    gate: _Gates | None = None
    try:
        sandbox = await _make_sandbox(task, ctx, artifacts)
        jail = await confine(task, ctx, sandbox, attempt)
        env, marker = _command_env(task, ctx, sandbox, jail)
        if task.gateway:
            gate, env = _through_gateway(task, ctx, state, env)
        timed_out, exit_code = await _execute(task, ctx, state, env, marker, deadline, jail,
                                              attempt)
        if gate is not None:  # its calls' spend is booked before anything is settled
            closing, gate = gate, None
            await _close_gate(ctx, closing)
        await state.settle()
        facts, workspace_hash = await _judged(task, ctx, state, sandbox, jail, env,
                                              exit_code, timed_out, deadline, judging)
        if ctx.preservation_mode != "none":  # kept: what a regrade reads, and checks
            kept_hash = await trio.to_thread.run_sync(_kept_hash, sandbox,
                                                      abandon_on_cancel=True)
    except _sandbox.BuildFailed as e:
        facts = AttemptFacts(build_failed=str(e))
    except WorkspaceUnfit as e:  # only once the command has ended
        facts = AttemptFacts((), timed_out, task.timeout, state.budget_stop, unfit=str(e),
                             api_error=state.api_error)
    except IsolationLeak as e:
        facts = AttemptFacts(error=str(e))
    except trio.Cancelled:
        raise
    except Exception as e:
        log.debug("task %s raised", task.task_key, exc_info=True)
        facts = AttemptFacts(error=f"{type(e).__name__}: {e}")
        with contextlib.suppress(WriterFailed):  # cut short before it was booked
            await state.settle()
    finally:
        if gate is not None:  # cut short (an error, cancellation): its calls still count
            await _close_gate(ctx, gate)
        if sandbox is not None:
            await _finish_sandbox(task, ctx, sandbox, artifacts)
    if state.api_failure is not None:
        facts = dataclasses.replace(facts, api_failure=state.api_failure)
    verdict = final_status(facts)
    meter = state.meter
    return AttemptOutcome(TaskCompleted(
        run_id=ctx.run_id,
        task_key=task.task_key,
        attempt=attempt,
        final_status=verdict.status,
        category=verdict.status.category,
        exit_code=exit_code,
        duration_seconds=round(time.monotonic() - began, 6),
        criteria=list(facts.criteria),
        weighted_score=verdict.score,
        error_message=verdict.error_message,
        failure_class=verdict.failure_class,
        environment_info=_environment_info(exit_code, meter, agent_version),
        tokens=meter.totals,
        cost_usd=_attempt_cost(meter, judging),
        cost_complete=meter.cost_complete and judging.cost_complete,
        workspace_hash=workspace_hash,
        kept_hash=kept_hash,
        grade_pending=ctx.no_grade and verdict.status is FinalStatus.NOT_GRADED,
        folder_reads=state.folder_reads.paths if state.folder_reads is not None else [],
    ))


def _attempt_cost(meter: UsageMeter, judging: Judging) -> float | None:
    """Every role's: what the agent spent and what judging it cost. What had a price is
    a cost even where some usage had none (a floor: ``cost_complete`` says so, as
    ``show``'s total does); None only when nothing of it had a price."""
    total = meter.cost_usd + judging.cost_usd
    return total if total or (meter.priced and judging.cost_complete) else None


async def _judged(task: ResolvedTask, ctx: RunContext, state: _Streams, sandbox: Path,
                  jail: Jail | None, env: dict[str, str], exit_code: int | None,
                  timed_out: bool, deadline: float, judging: Judging,
                  ) -> tuple[AttemptFacts, str | None]:
    """What the attempt's command came to, once it ended: a leak, a stall, ungraded
    (``--no-grade``), or its criteria checked; and, confined, the hash of the workspace
    as it was graded (the graders may change it)."""
    if state.isolation_error is not None:
        return AttemptFacts(error=state.isolation_error), None
    if state.stalled is not None:
        return AttemptFacts(stalled=state.stalled, own_stall=state.own_stall), None
    if ctx.no_grade:
        return AttemptFacts((), timed_out, task.timeout, state.budget_stop,
                            api_error=state.api_error), None
    workspace_hash = None
    if jail is not None:
        workspace_hash = await trio.to_thread.run_sync(
            functools.partial(_isolation.hash_tree, sandbox, defuse=True),
            abandon_on_cancel=True)
    criteria = await _grade(task, ctx, state, sandbox, jail, env, exit_code, deadline,
                            judging)
    return AttemptFacts(criteria, timed_out, task.timeout, state.budget_stop,
                        api_error=state.api_error), workspace_hash


async def _grade(task: ResolvedTask, ctx: RunContext, state: _Streams, sandbox: Path,
                 jail: Jail | None, env: dict[str, str], exit_code: int | None,
                 deadline: float, judging: Judging) -> list[CriterionResult]:
    """The task's criteria checked against what the attempt left: in a copy of the
    workspace where a criterion runs code and the workspace is kept (``_grading_copy``),
    removed after."""
    grader_env = env
    if jail is not None:
        grader_env = {**env, "EVALLEDGER_TASK_DIR": str(Path(task.source).parent)}
    graded = await _grading_copy(task, ctx, sandbox)
    if graded is not None and jail is None:  # graders find where they grade
        grader_env = {**grader_env, "EVALLEDGER_SANDBOX": str(graded)}
    try:
        evidence = Evidence(
            graded or sandbox, exit_code, state.text("stdout"), state.text("stderr"),
            jail=jail if jail is None or graded is None
            else dataclasses.replace(jail, workspace=graded))
        return await evaluate(task.success_criteria, evidence, grader_env, ctx.kill_now,
                              deadline, ctx.kill_grace, judging)
    finally:
        if graded is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(
                    functools.partial(_sandbox.remove_tree, graded, ignore_errors=True))


@dataclass
class _Gates:
    """An attempt's ways out: its token at the gateway, and at the egress proxy when
    its task has ``allow_domains``."""

    gateway: GatewayAttempt
    egress: EgressAttempt | None = None


def _through_gateway(task: ResolvedTask, ctx: RunContext, state: _Streams,
                     env: dict[str, str]) -> tuple[_Gates, dict[str, str]]:
    """The attempt's token at the gateway, and its environment pointed there: its base
    URLs and keys the gateway's, none of the runner's keys (and its proxy the egress
    proxy, with ``allow_domains``)."""
    from ._gateway import gateway_keys_removed

    if ctx.gateway is None:
        raise RuntimeError("a task has gateway but the batch started no gateway")
    gates = _Gates(ctx.gateway.attempt(frozenset(task.gateway), state, ctx.rates.price))
    state.gateway = gates.gateway
    env = {**gateway_keys_removed(env), **gates.gateway.env(ctx.gateway.base_url)}
    if task.allow_domains:
        if ctx.egress is None:
            raise RuntimeError("a task has allow_domains but the batch started no proxy")
        gates.egress = ctx.egress.attempt(tuple(task.allow_domains), state)
        env.update(gates.egress.env(egress_port(ctx.gateway.port)))
    return gates, env




async def _close_gate(ctx: RunContext, gates: _Gates) -> None:
    """Wait out the attempt's calls under way (a second Ctrl-C: none), shielded: what
    they report is the attempt's spend; end its connections left open (each recorded)."""
    assert ctx.gateway is not None
    with trio.CancelScope(shield=True):
        if gates.egress is not None and ctx.egress is not None:
            await ctx.egress.close(gates.egress)
        await ctx.gateway.close(gates.gateway, now=ctx.kill_now.is_set())


async def _grading_copy(task: ResolvedTask, ctx: RunContext, sandbox: Path) -> Path | None:
    """Where criteria that run code (``run_command``, ``agent_judge``) grade: a copy of
    the workspace, when it is kept, so what is kept (and hashed, and regraded) is what
    the attempt left, not what a grader changed (a test runner's caches, a planted
    ``conftest.py`` that restores the tests). None: grade in place (nothing runs code,
    or nothing is kept)."""
    if ctx.preservation_mode == "none" or not any(
            isinstance(c, RunCommand | AgentJudge) for c in task.success_criteria):
        return None
    copy = ctx.sandbox_root / f"graded-{next(_graded_copies)}"
    try:
        await trio.to_thread.run_sync(_sandbox.copy_workspace, sandbox, copy,
                                      abandon_on_cancel=True)
    except OSError as e:
        if _no_room(e):  # what the command left is too big to copy: its doing
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(
                    functools.partial(_sandbox.remove_tree, copy, ignore_errors=True))
            raise WorkspaceUnfit(f"its workspace could not be copied to be graded: {e}") from e
        raise
    return copy


def _no_room(error: OSError) -> bool:
    """Whether a copy failed for room (a file system or quota full, a file too large),
    ``shutil.Error``'s list of failures included."""
    room = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        return any(any(f"[Errno {code}]" in str(why) for code in room)
                   for *_, why in error.args[0])
    return error.errno in room


_graded_copies = itertools.count(1)


async def _record_judge(state: _Streams, model: str | None, tokens: TokenCounts,
                        cost: float | None,
                        call: dict[str, object]) -> None:
    """One judge's call, recorded as grading's usage (and counted in the run's spend)."""
    state.ctx.spent_usd += cost or 0.0
    await state.ctx.writer.append(TaskUsage(
        run_id=state.ctx.run_id, task_key=state.task.task_key, model=model, role="grader",
        cost_usd=cost, call=call, **dict(tokens)))


async def _make_sandbox(task: ResolvedTask, ctx: RunContext, artifacts: Path) -> Path:
    """The attempt's sandbox: an empty one made ahead when that is all it needs."""
    if (
        ctx.sandboxes is not None and _sandbox.is_trivial(task.workdir, ctx.preservation_mode)
        and (ready := ctx.sandboxes.take()) is not None
    ):
        return ready
    return await trio.to_thread.run_sync(_prepare, task, ctx, artifacts)


def _prepare(task: ResolvedTask, ctx: RunContext, artifacts: Path) -> Path:
    """Make the attempt's sandbox (blocking: run it off the loop)."""
    workdir = task.workdir
    if workdir is not None and ctx.locate_workdir is not None:
        workdir = ctx.locate_workdir(workdir)
    return _sandbox.prepare(workdir, ctx.preservation_mode, artifacts, ctx.sandbox_root)


def _kept_hash(sandbox: Path) -> str:
    # The hash of the workspace as kept: defused first (_sandbox.finish defuses every
    # kept workspace, and a regrade compares this hash with what it finds).
    _sandbox.defuse(sandbox)
    return _isolation.hash_tree(sandbox)


async def _finish_sandbox(task: ResolvedTask, ctx: RunContext, sandbox: Path,
                          artifacts: Path) -> None:
    """Keep or remove the sandbox as the preservation mode says (never raises)."""
    if ctx.preservation_mode == "none" and ctx.sandboxes is not None:
        ctx.sandboxes.discard(sandbox)  # removed off the loop, off this task's path
        return
    with trio.CancelScope(shield=True):
        try:
            await trio.to_thread.run_sync(
                _sandbox.finish, sandbox, ctx.preservation_mode, artifacts
            )
        except (OSError, RecursionError) as e:  # a move across devices copies
            log.warning("could not keep the sandbox of %s: %s", task.task_key, e)



def _command_env(task: ResolvedTask, ctx: RunContext, sandbox: Path,
                 jail: Jail | None = None) -> tuple[dict[str, str], str]:
    """The command's environment (docs/tasks.md), and its attempt's ``MARKER_VAR`` entry."""
    marker = ctx.attempt_marker()
    return command_env(task, ctx.base_env, ctx.run_id, marker, sandbox, jail), marker


def command_env(task: ResolvedTask, base_env: dict[str, str], run_id: str, marker: str,
                sandbox: Path, jail: Jail | None = None) -> dict[str, str]:
    """The environment of an attempt's command (docs/tasks.md); ``marker`` is its
    ``MARKER_VAR=value`` entry.

    Confined, it gets a minimal base, its ``env_passthrough`` and its ``env``, and no
    ``EVALLEDGER_TASK_DIR``: the task's folder holds its criteria.
    """
    prompt = task.prompt or ""
    base = (base_env if jail is None
            else _isolation.confined_env({}, task.env_passthrough, base_env))
    env = {
        **base,
        **task.env,
        **task.binds,
        "EVALLEDGER_PROMPT": prompt if _fits_environment(prompt) else "",
        "EVALLEDGER_TASK_KEY": task.task_key,
        "EVALLEDGER_RUN_ID": run_id,
        "EVALLEDGER_SANDBOX": str(sandbox) if jail is None else _isolation.WORKSPACE,
        MARKER_VAR: marker.partition("=")[2],
    }
    if jail is None:
        # Where the task file is: commands reach files shipped beside it.
        env["EVALLEDGER_TASK_DIR"] = str(Path(task.source).parent)
    return env


# Graded E by radon, and kept whole: the command's start (three ways), its readers,
# watchers, deadline and the end of its process group share one nursery and one set of
# cancel scopes; split apart, which scope ends what would be passed around, not read.
async def _execute(
    task: ResolvedTask, ctx: RunContext, state: _Streams, env: dict[str, str], marker: str,
    deadline: float, jail: Jail | None = None, attempt: int = 1,
) -> tuple[bool, int | None]:
    """Run the command until it exits, times out, overruns its budget or (confined)
    its prelude finds a leak.

    Returns:
        (timed_out, exit_code)
    """
    probe: Probe | None = None
    cgroup = limits = None
    if not isinstance(jail, _isolation.Container):  # docker bounds its containers itself
        limits = _limits.pool()
        cgroup = limits.take(task.limits) if limits is not None else None
    workspace = Path(env["EVALLEDGER_SANDBOX"]) if jail is None else jail.workspace
    following = contextlib.ExitStack()
    try:
        if jail is None:
            if cgroup is not None and (watch := _access.watch()) is not None:
                folder = Path(task.source).parent
                skip = Path(task.workdir) if task.workdir else None
                if watch.marked(folder) or await trio.to_thread.run_sync(watch.mark, folder,
                                                                           skip):
                    state.folder_reads = following.enter_context(
                        watch.follow(cgroup.name, folder))
            # No prompt: stdin is /dev/null (EOF at once), which saves a pipe and a task.
            process = await spawn(_limits.wrap(task.command, _limits.prefix(task.limits, cgroup))
                                  if isinstance(task.command, str) else task.command,
                                  cwd=env["EVALLEDGER_SANDBOX"], env=env,
                                  stdin=bool(task.prompt))
            if not isinstance(task.command, str):
                try:
                    _limits.confine(process.pid, task.limits, cgroup)
                except OSError:
                    with trio.CancelScope(shield=True):
                        await end_group(process, 0)
                    raise
        else:
            bounds = ("" if isinstance(jail, _isolation.Container)
                      else _limits.prefix(task.limits, cgroup))
            probe = Probe(jail, ctx, marker)
            try:
                process = await probe.start(task, env, bounds)
            except BaseException:
                probe.close()
                raise
    except BaseException:
        following.close()
        if cgroup is not None and limits is not None:
            limits.give(cgroup)
        raise
    assert process.stdout is not None and process.stderr is not None

    async def feed_stdin(prompt: bytes, stdin: trio.abc.SendStream) -> None:
        try:
            await stdin.send_all(prompt)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the command does not read its stdin; that is its business
        finally:
            with trio.CancelScope(shield=True):
                await stdin.aclose()

    pipes_closed = trio.Event()
    open_pipes = 2

    async def read(stream: trio.abc.ReceiveStream, name: str, stop: trio.CancelScope) -> None:
        nonlocal open_pipes
        try:
            await _record_stream(stream, name, state, stop)
        finally:
            open_pipes -= 1
            if not open_pipes:
                pipes_closed.set()

    # The deadline bounds the command, not the reading of what it wrote: a slow ledger
    # must not turn output already produced into a TIMEOUT. A stall ends it early too.
    limit = trio.CancelScope(deadline=deadline)
    state.touched(utc_now())  # silence is counted from the command's start
    try:
        async with trio.open_nursery() as nursery:
            if probe is not None and jail is not None:
                nursery.start_soon(read_probes, probe, jail, task, ctx, state, attempt,
                                   nursery.cancel_scope)
            if process.stdin is not None:
                nursery.start_soon(feed_stdin, (task.prompt or "").encode(), process.stdin)
            nursery.start_soon(read, process.stdout, "stdout", nursery.cancel_scope)
            nursery.start_soon(read, process.stderr, "stderr", nursery.cancel_scope)
            watching = trio.CancelScope()
            if task.stall_timeout is not None:
                nursery.start_soon(_watch_stall, task, ctx, state, attempt, limit, watching)
            looking = trio.CancelScope()
            nursery.start_soon(_watch_limits, task, state, cgroup, workspace,
                               nursery.cancel_scope, looking)
            with limit:
                await process.wait()
            watching.cancel()
            looking.cancel()
            if limit.cancelled_caught:
                await end_group(process, ctx.kill_grace, ctx.kill_now)
            # The leader is gone; anything it left behind in its group would keep
            # our pipes open (and outlive the task). End it, then read to EOF.
            kill_group(process.pid)
            await release_pipes(pipes_closed, marker, lambda: state.stuck(open_pipes))
            # Read to EOF (or held by what we cannot end): stop feeding stdin too.
            nursery.cancel_scope.cancel()
        if probe is not None and jail is not None and not state.probed:
            # A command that ends at once can end before the probe reader had its turn:
            # its report is in the pipe all the same.
            probe.drain()
            await record_probes(probe, jail, task, ctx, state, attempt, trio.CancelScope())
    finally:
        with trio.CancelScope(shield=True):
            await end_group(process, ctx.kill_grace, ctx.kill_now)
            if probe is not None:
                probe.close()
                if await probe.remove_container(process.returncode):
                    state.limit_hit(f"memory: {_limits.size_text(task.limits.memory)} limit "
                                    "hit, the kernel killed in the container for it")
            following.close()  # before the cgroup serves another attempt
            if cgroup is not None and limits is not None:
                for hit in cgroup.hits(task.limits):
                    state.limit_hit(hit)
                limits.give(cgroup)
            # What it wrote since the last look, or in all when it ended before one (a
            # command done within the watch's first second was never looked at).
            await _check_disk(task, state, workspace)
    if jail is not None and not state.probed and state.isolation_error is None:
        backend = jail.record()["backend"]
        if limit.cancelled_caught or state.budget_stop is not None:
            # Stopped before its sandbox was up (a container slow to start): a TIMEOUT.
            reason = f"stopped before {backend} reported its probes"
        else:  # bwrap or docker said why on stderr (recorded): a missing bind, say
            reason = state.isolation_error = (f"the isolated command never started: "
                                              f"{backend} exited {process.returncode} "
                                              "before its probes")
        with trio.CancelScope(shield=True):
            await ctx.writer.append(TaskIsolation(
                run_id=ctx.run_id, task_key=task.task_key, attempt=attempt, reason=reason,
                **jail.record()))
    return limit.cancelled_caught and state.stalled is None, process.returncode


async def _watch_stall(task: ResolvedTask, ctx: RunContext, state: _Streams, attempt: int,
                       command: trio.CancelScope, watching: trio.CancelScope) -> None:
    """Record a ``task.stalled`` each time the command is silent for its stall_timeout;
    with ``kill``, end it there (``command``: the scope its wait runs in). Runs under
    ``watching``, cancelled once the command exited."""
    assert task.stall_timeout is not None
    quiet = task.stall_timeout
    with watching:
        while True:
            await trio.sleep_until(state.last_activity + quiet)
            if state.last_activity + quiet > trio.current_time():
                continue  # it spoke meanwhile
            if state.sending:  # its lines wait on the ledger: not silence
                await trio.sleep(quiet)
                continue
            spoke = state.arm()  # armed before recording: what it says meanwhile counts
            idle = round(trio.current_time() - state.last_activity, 3)
            # What it said before the silence comes before it, and is read for last_seq.
            await state.flush(committed=True)
            last_seq = await trio.to_thread.run_sync(
                _last_seq, ctx.ledger_path, ctx.run_id, task.task_key, abandon_on_cancel=True)
            await ctx.writer.append(TaskStalled(
                run_id=ctx.run_id, task_key=task.task_key, attempt=attempt,
                action=task.stall_action, idle_seconds=idle, last_n=state.last_n,
                last_seq=last_seq, last_at=state.last_at))
            if task.stall_action == "kill":
                state.stalled = (f"stalled: no output for {idle:g}s (stall_timeout "
                                 f"{quiet:g}s; last event {state.last_at})")
                # Seen, not said: behind the gateway, a silence while no call of it
                # waited on its model API is the agent's own (a sleep, a hung tool),
                # not a hung API: its failure, as a timeout is.
                if state.gateway is not None and not state.gateway.on_api:
                    state.own_stall = True
                    state.stalled += ("; no model call of it was waiting on its API, as "
                                      "the gateway saw: its own silence")
                command.cancel()
                return
            await spoke.wait()  # warn: once per silence


async def _watch_limits(task: ResolvedTask, state: _Streams, cgroup: _limits.Cgroup | None,
                        workspace: Path, stop: trio.CancelScope,
                        watching: trio.CancelScope) -> None:
    """Look at the attempt's limits every second while its command runs (the disk less
    often when the workspace is slow to walk); a hit stops the command (``stop``).
    Runs under ``watching``, cancelled once the command exited."""
    wait = 1.0
    with watching:
        while state.budget_stop is None:
            await trio.sleep(wait)
            if cgroup is not None:
                for hit in cgroup.hits(task.limits):
                    state.limit_hit(hit)
            began = trio.current_time()
            if task.limits.disk is not None and state.budget_stop is None:
                await _check_disk(task, state, workspace)
                # A walk of a big workspace takes a while: not more than 5% of the time.
                wait = max(1.0, 20 * (trio.current_time() - began))
        stop.cancel()


async def _check_disk(task: ResolvedTask, state: _Streams, workspace: Path) -> None:
    """Whether the workspace has grown past the task's ``limits.disk``."""
    limit = task.limits.disk
    if limit is None:
        return
    try:
        used = await trio.to_thread.run_sync(_limits.disk_usage, workspace,
                                             abandon_on_cancel=True)
    except WorkspaceUnfit:
        return  # said once the command has ended, as its failure
    if used > limit:
        state.limit_hit(f"disk: the workspace takes {_limits.size_text(used)}, past its "
                        f"{_limits.size_text(limit)} limit")


def _last_seq(ledger_path: str | None, run_id: str, task_key: str) -> int | None:
    """The seq of the task's latest event in the ledger (its task.started at least);
    None where the ledger cannot be read from here (a Ray worker on another machine)."""
    from evalledger.ledger import Ledger, LedgerError
    from evalledger.ledger._queries import task_activity

    if not ledger_path:
        return None
    try:
        with Ledger(ledger_path, read_only=True) as ledger:
            found = task_activity(ledger, run_id, [task_key]).get(task_key)
    except LedgerError:
        return None
    return found[0] if found else None
