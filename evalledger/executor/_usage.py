"""Token usage and cost from a task's JSON lines, in every stream format.

The formats are described in docs/tasks.md ("What a task emits"); each agent format's
lines are read by its one parser in ``evalledger.agents`` (which the viewer reads
transcripts with).

``native``: every ``{"type": "usage", ...}`` line is a delta, recorded as it comes.
A missing ``cost_usd`` is priced from the rate card; an unpriced model gives
``None``, never 0.

``claude-code``: assistant messages carry per-message usage and name their model
(the same message id may repeat across content blocks; each count of a message is its
largest report); summed per model and priced from the rate card, that is the running
estimate that enforces budgets live. An assistant line carries the output count of its
message's start (1): with ``--include-partial-messages`` the ``stream_event`` lines
add each message's real output count as it ends, and the estimate is exact for every
message that ended. The final ``result`` line gives the totals and is what is
recorded: one usage per model of its ``modelUsage``, or, from an older CLI without it,
its ``usage`` and ``total_cost_usd`` booked to the model in use. Its totals are its
process's so far: a second result line of one session (the CLI took another turn when a
background task ended) books only what is new. An attempt that ends
without a result line records the estimate instead, per model, marked as one, and its
cost is a floor (``cost_complete`` false): a message cut off, or a call the stream never
showed, is not in it.

``codex``, ``gemini``, ``opencode``: usage is reported as each turn (a session, a
step) ends, and recorded then: per model where the stream says it (Gemini CLI), else
for the model in use; at the cost reported (OpenCode), else priced. Nothing is
estimated between reports: an attempt that ends with a turn begun and not reported
records a usage of unknown tokens and cost, so its cost is a floor.

``auto``: the format of the first line whose shape names one (``format_of``).

No silent zero: a ``native`` task whose lines are an agent's reporting its spend (their
shape names its format, and read so they carry usage or a session's totals) reads no
usage from them; its attempt records a usage of unknown tokens and
cost (the cost is a floor, never $0) and names the format in ``unread_format``.

Invariant: every usage ``observe`` returns or ``finish`` hands over is accounted in
``totals`` / ``cost_usd`` exactly once; the estimate never is until it is handed over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalledger._bounds import MAX_TOKENS, MAX_USD
from evalledger.agents import FinalResult, SessionStart, Tokens, format_of, read_usage
from evalledger.agents._conversation import merged, message_key
from evalledger.ledger import NO_TOKENS, TaskUsage, TokenCounts
from evalledger.pricing import DEFAULT_RATES, RateCard


@dataclass(frozen=True)
class Usage:
    model: str | None
    tokens: TokenCounts = NO_TOKENS
    cost_usd: float | None = None
    # Summed from a claude-code transcript's messages and priced from the rate card,
    # because no result line came: not what the CLI itself reported.
    estimate: bool = False

    def event(self, run_id: str, task_key: str, ts: str, *,
              event_id: str | None = None) -> TaskUsage:
        """This usage as the ``task.usage`` that records it."""
        ids = {} if event_id is None else {"event_id": event_id}
        return TaskUsage(run_id=run_id, task_key=task_key, ts=ts, model=self.model,
                         cost_usd=self.cost_usd, estimate=self.estimate,
                         **dict(self.tokens), **ids)


# How far the per-model costs of a result line may fall from its total_cost_usd and
# still be read as the same money summed in another order: a ten-thousandth of a cent.
# Within it, the model that cost most takes the difference, so the usage recorded adds
# up to total_cost_usd; beyond it, each model keeps the cost reported for it.
ROUNDING_USD = 1e-6

_NONE: tuple[Usage, ...] = ()


def _int(value: Any) -> int:
    """A token count: a whole number (``5000.0`` included) in range; anything else 0."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKENS:
        return value
    return 0


def _cost(value: Any) -> float | None:
    """A reported cost: a number from 0 to ``MAX_USD`` (1e400 reads as inf: not a cost;
    1e308 twice sums to it), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and (
            0 <= value <= MAX_USD):
        return float(value)
    return None


def _tokens(raw: dict[str, Any], input_: str, output: str, cache_read: str,
            cache_write: str) -> TokenCounts:
    # model_construct: _int has already made every count a valid one.
    return TokenCounts.model_construct(
        cache_read_tokens=_int(raw.get(cache_read)), cache_write_tokens=_int(raw.get(cache_write)),
        input_tokens=_int(raw.get(input_)), output_tokens=_int(raw.get(output)),
    )


def _minus(a: TokenCounts, b: TokenCounts) -> TokenCounts:
    return TokenCounts.model_construct(
        cache_read_tokens=a.cache_read_tokens - b.cache_read_tokens,
        cache_write_tokens=a.cache_write_tokens - b.cache_write_tokens,
        input_tokens=a.input_tokens - b.input_tokens,
        output_tokens=a.output_tokens - b.output_tokens,
    )


class UsageMeter:
    """Reads one task's JSON lines; reports usage to record and keeps live totals.

    It also notes what the transcript says about the agent: the versions it states
    and the models it actually used, for the attempt's ``environment_info`` (see
    docs/tasks.md, "What a task emits").
    """

    def __init__(
        self, stream_format: str, default_model: str | None, rates: RateCard = DEFAULT_RATES,
        *, gateway: bool = False,
    ) -> None:
        self.stream_format = stream_format
        # Its calls metered by the gateway (``book``): what the lines say of usage is
        # read for the models and versions they name, and never booked.
        self.gateway = gateway
        self.model = default_model
        self.rates = rates
        self.totals = NO_TOKENS
        self.cost_usd = 0.0  # the priced part; a floor when cost_complete is False
        self.cost_complete = True
        self.priced = True  # every usage had a price (an estimate's too): cost_usd is one
        # claude-code, until a result line arrives: each message's usage (by id) with its
        # model, and their sums per model (kept as they change, not re-added: a long
        # transcript has thousands of messages); the message last started per thread.
        self._messages: dict[str, tuple[str | None, Tokens]] = {}
        self._started: dict[str | None, str] = {}
        self._by_model: dict[str | None, TokenCounts] = {}
        self._estimate_tokens = 0
        self._estimate_costs: dict[str | None, float | None] = {}
        # claude-code: each session's last result line's totals per model (a later result
        # line of the same process repeats them, plus what is new).
        self._results: dict[str, dict[str | None, Usage]] = {}
        # Versions the command stated ({"type": "version", ...}; Claude Code's init line).
        self.versions: dict[str, str] = {}
        # Models a usage report or a message named: what was actually used.
        self.models_used: set[str] = set()
        # stream_format auto: the format the first line that names one named.
        self.detected: str | None = None
        # A format reporting usage per turn: the model worked since the last report.
        self._unreported = False
        # native: the agent format the lines are in, which native does not read.
        self.unread_format: str | None = None

    @property
    def live_tokens(self) -> int:
        """Tokens so far, counting a claude-code transcript's running estimate."""
        return self.totals.total + self._estimate_tokens

    @property
    def live_cost_usd(self) -> float:
        return self.cost_usd + sum(c for c in self._estimate_costs.values() if c)

    @property
    def format(self) -> str:
        """The stream format the lines are read in: ``auto``'s as detected (native
        until a line names one)."""
        return self.detected or ("native" if self.stream_format == "auto"
                                 else self.stream_format)

    def observe(self, data: dict[str, Any]) -> tuple[Usage, ...]:
        """A JSON line arrived; return the usage to record now (often none)."""
        if self.gateway:
            self._observe(data)
            self._clear_estimate()
            self._unreported = False
            return _NONE
        return self._observe(data)

    def book(self, usage: Usage) -> None:
        """A model call the gateway metered: counted in the totals, as recorded."""
        if usage.model:
            self.models_used.add(usage.model)
        self._add(usage)

    def _observe(self, data: dict[str, Any]) -> tuple[Usage, ...]:
        if data.get("type") == "version":
            self.versions.update(_texts(data))
            return _NONE
        if self.stream_format == "auto" and self.detected is None:
            self.detected = format_of(data)
        stream_format = self.format
        if stream_format == "claude-code":
            return self._claude_code(data)
        if stream_format in REPORTED_FORMATS:
            return self._reported(stream_format, data)
        if data.get("type") != "usage":
            if self.unread_format is None and stream_format == "native":
                self._unread(data)
            return _NONE
        model = data.get("model") if isinstance(data.get("model"), str) else self.model
        if model:
            self.models_used.add(model)
        tokens = _tokens(data, "input_tokens", "output_tokens", "cache_read_tokens",
                         "cache_write_tokens")
        usage = self._priced(model, data.get("cost_usd"), tokens)
        self._account(usage)
        return (usage,)

    def _unread(self, data: dict[str, Any]) -> None:
        """A native task's line: one an agent wrote reporting what it spent (a message's
        usage, a turn's or a session's totals) means the task's spend is unread."""
        found = format_of(data)
        if found is None or found == "native":
            return
        entry = read_usage(found, data)
        if entry is not None and (entry.usage is not None or any(
                isinstance(s, FinalResult) and (s.tokens is not None or s.cost_usd is not None)
                for s in entry.steps)):
            self.unread_format = found
            self._unreported = True  # what it spent is owed, and unknown

    def finish(self) -> tuple[Usage, ...]:
        """The attempt is over, however it ended: the running estimate still to record,
        one usage per model, each marked as an estimate (none for ``native``); for a
        format that reports usage per turn, a turn begun and never reported as a usage
        of unknown tokens and cost (the cost is then a floor, never a $0 guess)."""
        estimate = tuple(
            Usage(model, tokens, self._estimate_costs[model], estimate=True)
            for model, tokens in self._by_model.items() if tokens.total
        )
        if self._unreported:
            estimate += (Usage(self.model, NO_TOKENS, None, estimate=True),)
            self._unreported = False
        self._clear_estimate()
        for usage in estimate:
            self._account(usage)
        return estimate

    def _priced(self, model: str | None, cost: Any, tokens: TokenCounts) -> Usage:
        cost_usd = _cost(cost)
        if cost_usd is None:
            cost_usd = self.rates.price(model, tokens)
        return Usage(model=model, tokens=tokens, cost_usd=cost_usd)

    def _claude_code(self, data: dict[str, Any]) -> tuple[Usage, ...]:
        # Read by the one Claude Code parser (agents), as the viewer and --stream read it.
        entry = read_usage("claude-code", data)
        if entry is None:  # the format has a parser: never None, but say so to mypy
            return _NONE
        step = entry.steps[0] if entry.steps else None
        if isinstance(step, SessionStart):
            if step.model is not None:
                self.model = step.model
            if step.version is not None:
                self.versions[_VERSION_NAMES["claude-code"]] = step.version
        elif entry.role == "assistant":
            if entry.model is not None:
                self.model = entry.model
                self.models_used.add(entry.model)
            key = message_key(entry, self._started, len(self._messages))
            if key is not None:
                model, before = self._messages.get(key, (self.model, Tokens()))
                # A message's end names no model: it is its start's.
                self._message(key, self.model if entry.usage is not None else model,
                              merged(before, entry))
        elif isinstance(step, FinalResult):
            totals = self._per_model(data) or (self._session_total(step),)
            usages = self._since_last_result(data.get("session_id"), totals)
            # A command may run the CLI again (plan, then implement): later messages
            # start a new estimate rather than re-counting this session's.
            self._clear_estimate()
            for usage in usages:
                self._account(usage)
            return usages
        return _NONE

    def _since_last_result(self, session: object,
                           totals: tuple[Usage, ...]) -> tuple[Usage, ...]:
        """A result line's totals are its process's so far: a CLI that takes another turn
        after its result (a background task ended) prints a second result line holding
        the first's spend too. What is new since the session's last result line is booked;
        totals lower than before are a new process's (the session resumed): booked whole."""
        if not isinstance(session, str):
            return totals  # a line naming no session is a session of its own
        before = self._results.get(session, {})
        self._results[session] = {u.model: u for u in totals}
        if any(u.model in before and not _covers(u, before[u.model]) for u in totals):
            return totals
        new = []
        for usage in totals:
            old = before.get(usage.model)
            if old is None:
                new.append(usage)
                continue
            tokens = _minus(usage.tokens, old.tokens)
            cost = (None if usage.cost_usd is None or old.cost_usd is None
                    else max(0.0, usage.cost_usd - old.cost_usd))
            if tokens.total or cost:
                new.append(Usage(usage.model, tokens, cost))
        return tuple(new)

    def _reported(self, stream_format: str, data: dict[str, Any]) -> tuple[Usage, ...]:
        """A Codex, Gemini CLI or OpenCode transcript: usage comes as each turn (a
        session, a step) ends, for the model the stream names (else the task's), at the
        cost it reports (else priced from the rate card)."""
        entry = read_usage(stream_format, data)
        if entry is None:  # the format has a parser: never None, but say so to mypy
            return _NONE
        if entry.role != "result" and entry.role != "other":
            self._unreported = True  # the model is at work: usage is owed
        usages: list[Usage] = []
        for step in entry.steps:
            if isinstance(step, SessionStart):
                if step.model is not None:
                    self.model = step.model
                if step.version is not None:
                    self.versions[_VERSION_NAMES[stream_format]] = step.version
            elif isinstance(step, FinalResult) and step.tokens is not None:
                usages += self._reported_usages(step)
                self._unreported = False
        for usage in usages:
            self._account(usage)
        return tuple(usages)

    def _reported_usages(self, final: FinalResult) -> list[Usage]:
        assert final.tokens is not None
        usages: list[Usage] = []
        rest = final.tokens
        if final.models:  # Gemini CLI's stats per model: each priced on its own
            for model, tokens in final.models:
                self.models_used.add(model)
                usages.append(self._priced(model, None, _counts(tokens)))
                rest = rest - tokens
            # What the totals hold beyond the models listed (an entry that could not be
            # read) is the session's model's: booked, not dropped.
            rest = Tokens(max(0, rest.input), max(0, rest.output), max(0, rest.cache_read),
                          max(0, rest.cache_write))
            if not rest.total:
                return usages
        if self.model:
            self.models_used.add(self.model)
        cost = final.cost_usd
        if cost == 0 and rest.total:
            cost = None  # OpenCode's $0 for tokens: a model it has no price for
        return [*usages, self._priced(self.model, cost, _counts(rest))]

    def stopped(self) -> None:
        """The command was stopped (a budget): in a format that reports usage as each
        turn ends, what it did after its last report is owed, and never will be."""
        if self.format in REPORTED_FORMATS and not self.gateway:
            self._unreported = True

    def _message(self, key: str, model: str | None, tokens: Tokens) -> None:
        """A message's usage now: the estimate of its model, and only that, moves."""
        if (previous := self._messages.get(key)) is not None:
            if previous == (model, tokens):
                return
            self._move_estimate(previous[0], _counts(previous[1]), remove=True)
        self._messages[key] = (model, tokens)
        self._move_estimate(model, _counts(tokens))

    def _move_estimate(self, model: str | None, tokens: TokenCounts, *,
                       remove: bool = False) -> None:
        before = self._by_model.get(model, NO_TOKENS)
        after = _minus(before, tokens) if remove else before + tokens
        self._by_model[model] = after
        self._estimate_tokens += after.total - before.total
        self._estimate_costs[model] = self.rates.price(model, after)

    def _clear_estimate(self) -> None:
        self._messages.clear()
        self._started.clear()
        self._by_model.clear()
        self._estimate_costs.clear()
        self._estimate_tokens = 0

    def _per_model(self, data: dict[str, Any]) -> tuple[Usage, ...]:
        """A result line's ``modelUsage``, one usage per model (none when it has none)."""
        raw = data.get("modelUsage")
        if not isinstance(raw, dict):
            return _NONE
        usages = []
        reported = True  # every model's cost is the CLI's own, none priced here
        for model, entry in raw.items():
            if not (isinstance(model, str) and model and isinstance(entry, dict)):
                continue
            self.models_used.add(model)
            tokens = _tokens(entry, "inputTokens", "outputTokens", "cacheReadInputTokens",
                             "cacheCreationInputTokens")
            reported = reported and _cost(entry.get("costUSD")) is not None
            usages.append(self._priced(model, entry.get("costUSD"), tokens))
        if not usages:
            return _NONE
        total = _cost(data.get("total_cost_usd"))
        if total is not None and reported:
            _close_rounding_gap(usages, total)
        return tuple(usages)

    def _session_total(self, final: FinalResult) -> Usage:
        """An older CLI's result line: its totals, booked to the model in use."""
        totals = _counts(final.tokens) if final.tokens is not None else NO_TOKENS
        return self._priced(self.model, final.cost_usd, totals)

    def _account(self, usage: Usage) -> None:
        if not self.gateway:  # else the gateway's calls are what is counted (``book``)
            self._add(usage)

    def _add(self, usage: Usage) -> None:
        self.totals = self.totals + usage.tokens
        if usage.estimate:  # what the stream did not show is not in it: a floor
            self.cost_complete = False
        if usage.cost_usd is None:
            self.cost_complete = self.priced = False
        elif math.isfinite(total := self.cost_usd + usage.cost_usd):
            self.cost_usd = total
        else:  # the sum of finite garbage overflowed: the total is not known
            self.cost_complete = self.priced = False


def meter_for(definition: Mapping[str, Any], rates: RateCard = DEFAULT_RATES) -> UsageMeter:
    """A meter for an attempt as its ``task.started`` recorded it (its stream format and
    model), to read its recorded lines again as its runner read them."""
    stream_format, model = definition.get("stream_format"), definition.get("model")
    return UsageMeter(stream_format if isinstance(stream_format, str) else "native",
                      model if isinstance(model, str) else None, rates)


def owed(definition: Mapping[str, Any], lines: Iterable[dict[str, Any]],
         rates: RateCard = DEFAULT_RATES) -> tuple[Usage, ...]:
    """What an attempt whose runner died spent beyond what was recorded, from the JSON
    lines it recorded: its running estimate, as ``finish`` would have booked it had the
    attempt been interrupted. What the lines reported as they came (a result line, a
    turn's usage) was recorded with them and is not in it."""
    meter = meter_for(definition, rates)
    for data in lines:
        meter.observe(data)
    return meter.finish()


def _covers(now: Usage, before: Usage) -> bool:
    """Whether ``now`` holds ``before``: no count of it lower (the same process's totals)."""
    a, b = now.tokens, before.tokens
    return (a.input_tokens >= b.input_tokens and a.output_tokens >= b.output_tokens
            and a.cache_read_tokens >= b.cache_read_tokens
            and a.cache_write_tokens >= b.cache_write_tokens)


def _close_rounding_gap(usages: list[Usage], total: float) -> None:
    """Book a result line's rounding (its total against the sum of its models, at most
    ``ROUNDING_USD`` apart) to its costliest model, so the models add up to the total."""
    gap = total - sum(u.cost_usd or 0.0 for u in usages)
    if gap and abs(gap) <= ROUNDING_USD:
        # max() keeps the first of equal costs: the order the CLI listed them.
        main = max(range(len(usages)), key=lambda i: usages[i].cost_usd or 0.0)
        cost = max(0.0, (usages[main].cost_usd or 0.0) + gap)
        usages[main] = Usage(usages[main].model, usages[main].tokens, cost)


# environment_info names a version line may not set: they are the runner's own.
_RESERVED = frozenset({"type", "exit_code", "evalledger", "python", "platform", "model",
                       "stream_format", "agent_version", "unread_format"})
# Where a format's stream states the agent's version: environment_info's name for it.
_VERSION_NAMES = {"claude-code": "claude_code_version", "codex": "codex_version",
                  "gemini": "gemini_cli_version", "opencode": "opencode_version"}
# The formats whose usage is reported as each turn ends, not estimated per message.
REPORTED_FORMATS = frozenset({"codex", "gemini", "opencode"})


def _texts(data: dict[str, Any]) -> dict[str, str]:
    """A version line's text fields (name -> version), short and without the reserved."""
    return {k[:100]: v[:200] for k, v in data.items()
            if isinstance(v, str) and k not in _RESERVED and k}


def _counts(tokens: Tokens) -> TokenCounts:
    # model_construct: the parser has already made every count a valid one (as _int).
    return TokenCounts.model_construct(
        cache_read_tokens=tokens.cache_read, cache_write_tokens=tokens.cache_write,
        input_tokens=tokens.input, output_tokens=tokens.output)
