"""Token usage and cost from a task's JSON lines, in both stream formats.

The formats are described in docs/tasks.md ("What a task emits").

``native``: every ``{"type": "usage", ...}`` line is a delta, recorded as it comes.
A missing ``cost_usd`` is priced from the rate card; an unpriced model gives
``None``, never 0.

``claude-code``: the Claude Code CLI's ``stream-json``. Assistant messages carry
per-message usage (the same message id may repeat across content blocks, so the
last report per id counts); that running estimate enforces budgets live. The
final ``{"type": "result", "total_cost_usd": X, "usage": {...}}`` line gives the
totals and is what is recorded. A transcript that ends without a result line
(timeout, budget stop) records the estimate instead, priced from the rate card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evalledger.ledger import NO_TOKENS, TokenCounts
from evalledger.pricing import DEFAULT_RATES, RateCard


@dataclass(frozen=True)
class Usage:
    model: str | None
    tokens: TokenCounts = NO_TOKENS
    cost_usd: float | None = None


# Beyond any real usage, and beyond what a float (so SQLite, so a cost) can hold
# exactly: a count this large is garbage, recorded as the line it came in, not counted.
MAX_TOKENS = 2**53


def _int(value: Any) -> int:
    """A token count: a whole number (``5000.0`` included) in range; anything else 0."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKENS:
        return value
    return 0


def _tokens(raw: dict[str, Any], input_: str, output: str, cache_read: str,
            cache_write: str) -> TokenCounts:
    # model_construct: _int has already made every count a valid one.
    return TokenCounts.model_construct(
        cache_read_tokens=_int(raw.get(cache_read)), cache_write_tokens=_int(raw.get(cache_write)),
        input_tokens=_int(raw.get(input_)), output_tokens=_int(raw.get(output)),
    )


class UsageMeter:
    """Reads one task's JSON lines; reports usage to record and keeps live totals.

    It also notes what the transcript says about the agent: the versions it states
    and the models it actually used, for the attempt's ``environment_info`` (see
    docs/tasks.md, "What a task emits").
    """

    def __init__(
        self, stream_format: str, default_model: str | None, rates: RateCard = DEFAULT_RATES
    ) -> None:
        self.stream_format = stream_format
        self.model = default_model
        self.rates = rates
        self.totals = NO_TOKENS
        self.cost_usd = 0.0  # the priced part; a floor when cost_complete is False
        self.cost_complete = True
        self._messages: dict[str, TokenCounts] = {}
        self._estimate: Usage | None = None  # claude-code, until the result line arrives
        # Versions the command stated ({"type": "version", ...}; Claude Code's init line).
        self.versions: dict[str, str] = {}
        # Models a usage report or a message named: what was actually used.
        self.models_used: set[str] = set()

    @property
    def live_tokens(self) -> int:
        """Tokens so far, counting a claude-code transcript's running estimate."""
        return self.totals.total + (self._estimate.tokens.total if self._estimate else 0)

    @property
    def live_cost_usd(self) -> float:
        return self.cost_usd + ((self._estimate.cost_usd or 0.0) if self._estimate else 0.0)

    def observe(self, data: dict[str, Any]) -> Usage | None:
        """A JSON line arrived; return the usage to record now, if any."""
        if data.get("type") == "version":
            self.versions.update(_texts(data))
            return None
        if self.stream_format == "claude-code":
            return self._claude_code(data)
        if data.get("type") != "usage":
            return None
        model = data.get("model") if isinstance(data.get("model"), str) else self.model
        if model:
            self.models_used.add(model)
        tokens = _tokens(data, "input_tokens", "output_tokens", "cache_read_tokens",
                         "cache_write_tokens")
        usage = self._priced(model, data.get("cost_usd"), tokens)
        self._account(usage)
        return usage

    def finish(self) -> Usage | None:
        """The command ended: usage still to record (a claude-code estimate), if any."""
        if self._estimate is None:
            return None
        usage, self._estimate = self._estimate, None
        self._account(usage)
        return usage

    def _priced(self, model: str | None, cost: Any, tokens: TokenCounts) -> Usage:
        # A cost that is not a finite number (1e400 reads as inf) is not a cost: price it.
        if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < math.inf:
            cost_usd: float | None = float(cost)
        else:
            cost_usd = self.rates.price(model, tokens)
        return Usage(model=model, tokens=tokens, cost_usd=cost_usd)

    def _claude_code(self, data: dict[str, Any]) -> Usage | None:
        kind = data.get("type")
        if kind == "system" and data.get("subtype", "init") == "init":
            if isinstance(data.get("model"), str):
                self.model = data["model"]
            if isinstance(version := data.get("claude_code_version"), str):
                self.versions["claude_code_version"] = version
        elif kind == "assistant" and isinstance(data.get("message"), dict):
            message = data["message"]
            if isinstance(message.get("model"), str):
                self.model = message["model"]
                self.models_used.add(message["model"])
            raw = message.get("usage")
            if isinstance(raw, dict):
                self._messages[str(message.get("id", len(self._messages)))] = _anthropic(raw)
                total = sum(self._messages.values(), NO_TOKENS)
                self._estimate = self._priced(self.model, None, total)
        elif kind == "result":
            raw = data.get("usage")
            totals = _anthropic(raw if isinstance(raw, dict) else {})
            usage = self._priced(self.model, data.get("total_cost_usd"), totals)
            # A command may run the CLI again (plan, then implement): later messages
            # start a new estimate rather than re-counting this session's.
            self._estimate = None
            self._messages.clear()
            self._account(usage)
            return usage
        return None

    def _account(self, usage: Usage) -> None:
        self.totals = self.totals + usage.tokens
        if usage.cost_usd is None:
            self.cost_complete = False
        elif math.isfinite(total := self.cost_usd + usage.cost_usd):
            self.cost_usd = total
        else:  # the sum of finite garbage overflowed: the total is not known
            self.cost_complete = False


# environment_info names a version line may not set: they are the runner's own.
_RESERVED = frozenset({"type", "exit_code", "evalledger", "python", "platform", "model"})


def _texts(data: dict[str, Any]) -> dict[str, str]:
    """A version line's text fields (name -> version), short and without the reserved."""
    return {k[:100]: v[:200] for k, v in data.items()
            if isinstance(v, str) and k not in _RESERVED and k}


def _anthropic(raw: dict[str, Any]) -> TokenCounts:
    return _tokens(raw, "input_tokens", "output_tokens", "cache_read_input_tokens",
                   "cache_creation_input_tokens")
