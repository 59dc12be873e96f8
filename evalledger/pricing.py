"""Model prices: a rate card in USD per million tokens, and pricing of usage.

A model that is not on the card is *unpriced*: its cost is ``None``, never 0.
Totals that include unpriced usage are floors, and say so (``cost_complete``).

Names are normalised before lookup: provider prefixes (``anthropic/``,
``bedrock/``, ``openai/``...), region prefixes of Bedrock inference profiles
(``us.``, ``eu.``, ``apac.``), Bedrock's ``anthropic.`` vendor prefix, version
suffixes (``-v1:0``), Claude Code's context suffix (``[1m]``) and dated snapshots
(``-20250929``) are dropped, so
``bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0`` prices as
``claude-sonnet-4-5``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalledger._values import Number, load_yaml
from evalledger.errors import EvalledgerError
from evalledger.ledger import TokenCounts


class Rate(BaseModel):
    """USD per million tokens of each kind."""

    # inf would price every token at inf, and 0 tokens at NaN.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    input: Number = Field(ge=0)
    output: Number = Field(ge=0)
    cache_write: Number | None = Field(default=None, ge=0)
    cache_read: Number | None = Field(default=None, ge=0)


def _r(i: float, o: float, cw: float | None = None, cr: float | None = None) -> Rate:
    return Rate(input=i, output=o, cache_write=cw, cache_read=cr)


# List prices (USD / 1M tokens). Cache writes are the 5-minute tier for Anthropic;
# OpenAI has no cache-write charge (input rate applies).
#
# Anthropic's: as the model catalog inside Claude Code 2.1.332 (the prices the CLI itself
# reports costs by) listed them on 2026-12-03. Its default models are here: claude-opus-4-8
# (2.1.197) and claude-opus-5-5 (2.1.332). claude-haiku-5-5 costs more above 100,000 prompt
# tokens a call; priced here at its base rate (the CLI's own costUSD, when it reports one,
# is what is recorded). OpenAI's and Google's: public list prices as of late 2025. Codex
# 0.171.0's default model (gpt-6.2-sol) has no public price we could confirm: a task that
# runs it names its rate in a pricing file (docs/tasks.md, "Usage and cost").
PRICES_TAKEN = "2026-12-03"
BUILTIN_RATES: dict[str, Rate] = {
    "claude-opus-5-5": _r(4, 20, 5, 0.20),
    "claude-opus-5": _r(5, 25, 6.25, 0.50),
    "claude-opus-4-8": _r(5, 25, 6.25, 0.50),
    "claude-opus-4-7": _r(5, 25, 6.25, 0.50),
    "claude-opus-4-6": _r(5, 25, 6.25, 0.50),
    "claude-opus-4-5": _r(5, 25, 6.25, 0.50),
    "claude-opus-4-1": _r(15, 75, 18.75, 1.50),
    "claude-opus-4": _r(15, 75, 18.75, 1.50),
    "claude-opus-4-0": _r(15, 75, 18.75, 1.50),
    "claude-sonnet-5-5": _r(2, 10, 2.50, 0.10),
    "claude-sonnet-5": _r(2, 10, 2.50, 0.20),
    "claude-sonnet-4-6": _r(3, 15, 3.75, 0.30),
    "claude-sonnet-4-5": _r(3, 15, 3.75, 0.30),
    "claude-sonnet-4": _r(3, 15, 3.75, 0.30),
    "claude-sonnet-4-0": _r(3, 15, 3.75, 0.30),
    "claude-3-7-sonnet": _r(3, 15, 3.75, 0.30),
    "claude-3-5-sonnet": _r(3, 15, 3.75, 0.30),
    "claude-haiku-5-5": _r(0.10, 0.50, 0.125, 0.01),
    "claude-haiku-4-5": _r(1, 5, 1.25, 0.10),
    "claude-3-5-haiku": _r(0.80, 4, 1.00, 0.08),
    "claude-fable-5-2": _r(8, 40, 10, 0.20),
    "claude-fable-5-1": _r(10, 50, 12.50, 0.25),
    "claude-fable-5": _r(10, 50, 12.50, 1.00),
    "claude-mythos-5-2": _r(8, 40, 10, 0.20),
    "claude-mythos-5-1": _r(10, 50, 12.50, 0.25),
    "claude-mythos-5": _r(10, 50, 12.50, 1.00),
    "gpt-5": _r(1.25, 10, None, 0.125),
    "gpt-5-mini": _r(0.25, 2, None, 0.025),
    "gpt-5-nano": _r(0.05, 0.40, None, 0.005),
    "gpt-4.1": _r(2, 8, None, 0.50),
    "gpt-4.1-mini": _r(0.40, 1.60, None, 0.10),
    "gpt-4o": _r(2.50, 10, None, 1.25),
    "gpt-4o-mini": _r(0.15, 0.60, None, 0.075),
    "o3": _r(2, 8, None, 0.50),
    "o4-mini": _r(1.10, 4.40, None, 0.275),
    "gemini-2.5-pro": _r(1.25, 10, None, 0.31),
    "gemini-2.5-flash": _r(0.30, 2.50, None, 0.075),
    "gemini-2.5-flash-lite": _r(0.10, 0.40, None, 0.025),
}

_PROVIDER = re.compile(r"^(?:[a-z0-9_-]+/)+")
_REGION = re.compile(r"^(?:us|eu|apac|au|ca|jp|global)\.")
_VENDOR = re.compile(r"^(?:anthropic|openai|meta|mistral|amazon|google)\.")
# Bedrock's "-v1:0" (with the colon only: "deepseek-v3" is a model, not a suffix).
# Claude Code's "[1m]" (the 1M-token context) is a suffix too: one model, one price.
_SUFFIX = re.compile(r"(?:-v\d+:\d+|@\d{8}|-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|\[\d+[km]\])$")


class PricingError(EvalledgerError, ValueError):
    """A rate card file that cannot be used: unreadable, not a mapping of model to
    rates, or a rate that does not validate."""


class PricingConflict(PricingError):
    """A rate for this model is already on the card and differs."""


def normalize_model(name: str) -> str:
    """The rate-card key for a model name as tools and providers spell it."""
    key = name.strip().lower()
    key = _PROVIDER.sub("", key)
    key = _REGION.sub("", key)
    key = _VENDOR.sub("", key)
    while (shorter := _SUFFIX.sub("", key)) != key:
        key = shorter
    return key


class RateCard:
    """Prices by model, immutable: adding rates gives a new card.

    One card is handed to a batch (``BatchConfig.rates``, by default the built-in card
    plus the file ``RunOptions.pricing`` names) and everything that prices usage in
    it reads that card: nothing global to patch or to leak between runs in one process.
    """

    __slots__ = ("_rates",)

    def __init__(self, rates: Mapping[str, Rate] | None = None) -> None:
        source = BUILTIN_RATES if rates is None else rates
        self._rates: dict[str, Rate] = {normalize_model(k): v for k, v in source.items()}

    def rate_for(self, model: str | None) -> Rate | None:
        if not model:
            return None
        return self._rates.get(normalize_model(model))

    def with_rate(self, model: str, rate: Rate) -> RateCard:
        """This card plus one rate. The same rate twice is fine; a different one is not.

        Raises:
            PricingConflict: the model already has a different rate.
        """
        key = normalize_model(model)
        existing = self._rates.get(key)
        if existing is not None and existing != rate:
            raise PricingConflict(
                f"{model}: already priced as {existing.model_dump()}, not {rate.model_dump()}"
            )
        card = RateCard({})
        card._rates = {**self._rates, key: rate}
        return card

    def with_file(self, path: str | Path) -> RateCard:
        """This card with every rate in a YAML file, ``{model: {input: .., output: ..}}``:
        a rate in the file replaces the card's for that model (a negotiated price, a
        new list price).

        Raises:
            PricingError: the file cannot be read or a rate does not validate.
            PricingConflict: the file prices one model twice, differently (two spellings
                of one name).
        """
        try:
            data = load_yaml(Path(path)) or {}
        except ValueError as e:
            raise PricingError(f"pricing file {path}: {e}") from e
        if not isinstance(data, dict):
            raise PricingError(f"pricing file {path}: expected a mapping of model to rates")
        from_file = RateCard({})
        for model, fields in data.items():
            try:
                from_file = from_file.with_rate(str(model), Rate.model_validate(fields))
            except ValidationError as e:
                raise PricingError(f"pricing file {path}: {model}: {e.errors()[0]['msg']}") from e
            except PricingConflict as e:
                raise PricingConflict(f"pricing file {path}: {e}") from e
        card = RateCard({})
        card._rates = {**self._rates, **from_file._rates}
        return card

    def price(self, model: str | None, tokens: TokenCounts) -> float | None:
        """The cost in USD of this usage, or ``None`` when the model is not priced."""
        if not tokens.total:
            return 0.0
        rate = self.rate_for(model)
        if rate is None:
            return None
        cache_write = rate.cache_write if rate.cache_write is not None else rate.input
        cache_read = rate.cache_read if rate.cache_read is not None else rate.input
        try:
            cost = (
                tokens.input_tokens * rate.input
                + tokens.output_tokens * rate.output
                + tokens.cache_write_tokens * cache_write
                + tokens.cache_read_tokens * cache_read
            ) / 1_000_000
        except OverflowError:
            return None
        return cost if math.isfinite(cost) else None

    def unpriced(self, models: Iterable[str | None]) -> list[str]:
        """The models named that have no rate on this card, sorted, each once."""
        return sorted({m for m in models if m and self.rate_for(m) is None})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RateCard) and self._rates == other._rates

    def __hash__(self) -> int:
        return hash(frozenset(self._rates))

    def __repr__(self) -> str:
        return f"<RateCard of {len(self._rates)} models>"


DEFAULT_RATES = RateCard()
