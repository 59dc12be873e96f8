"""Model prices: the maintained rate card of ``genai-prices`` (cached-token prices as it
gives them; a tiered price at its base tier, see ``_maintained``), a pricing file's
rates over it, and pricing of usage.

A model neither prices is *unpriced*: its cost is ``None``, never 0. Totals that
include unpriced usage are floors, and say so (``cost_complete``).

``genai-prices`` finds a model by its own patterns (dated snapshots, ``[1m]``); a name it
does not know is looked up again normalised: provider prefixes (``anthropic/``,
``bedrock/``, ``openai/``...), region prefixes of Bedrock inference profiles (``us.``,
``eu.``, ``apac.``), Bedrock's ``anthropic.`` vendor prefix, version suffixes
(``-v1:0``), Claude Code's context suffix (``[1m]``) and dated snapshots
(``-20250929``) dropped, so ``bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0``
prices as ``claude-sonnet-4-5``. A pricing file's names are normalised the same way.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

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

    A card is the rates given to it (a pricing file's) over the maintained card of
    ``genai-prices``. One card is handed to a batch (``BatchConfig.rates``, by default
    the maintained card plus the file ``RunOptions.pricing`` names) and everything that
    prices usage in it reads that card: nothing global to patch or to leak between runs
    in one process.
    """

    __slots__ = ("_rates",)

    def __init__(self, rates: Mapping[str, Rate] | None = None) -> None:
        self._rates: dict[str, Rate] = {normalize_model(k): v
                                        for k, v in (rates or {}).items()}

    def rate_for(self, model: str | None) -> Rate | None:
        """The rate given for ``model`` (a pricing file's), not the maintained card's."""
        if not model:
            return None
        return self._rates.get(normalize_model(model))

    def rate_of(self, model: str | None) -> Rate | None:
        """The rate usage of ``model`` is priced by: the one given for it, else the
        maintained card's; None when neither prices it."""
        return self.rate_for(model) or (_maintained(model) if model else None)

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
        """The cost in USD of this usage, or ``None`` when the model is not priced: by
        the rate given for it, else by the maintained card's (``_maintained``)."""
        if not tokens.total:
            return 0.0
        rate = self.rate_of(model)
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
        """The models named that neither this card nor the maintained one prices,
        sorted, each once."""
        return sorted({m for m in models if m and self.rate_of(m) is None})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RateCard) and self._rates == other._rates

    def __hash__(self) -> int:
        return hash(frozenset(self._rates))

    def __repr__(self) -> str:
        return f"<RateCard of {len(self._rates)} models>"


DEFAULT_RATES = RateCard()


@functools.lru_cache(maxsize=1024)  # names come from agents' output: bounded
def _maintained(model: str) -> Rate | None:
    """genai-prices' rate of ``model`` now, found by its name or the name normalised;
    None when it has none. Its base tier: a usage event may sum several calls (a Codex
    turn, a Gemini session) and a tier is one call's (a prompt past 200,000 tokens), so
    no event can be placed in one. Imported on first use (0.13 s)."""
    from datetime import UTC, datetime

    from genai_prices import data_snapshot
    from genai_prices.types import TieredPrices

    def base(value: Any) -> float | None:
        if value is None:
            return None
        return float(value.base if isinstance(value, TieredPrices) else value)

    snapshot = data_snapshot.get_snapshot()
    for name in dict.fromkeys((model, normalize_model(model))):
        try:
            _, found = snapshot.find_provider_model(name, None, None, None)
        except LookupError:
            continue
        price = found.get_prices(datetime.now(UTC))
        return Rate(input=base(price.input_mtok) or 0.0, output=base(price.output_mtok) or 0.0,
                    cache_write=base(price.cache_write_mtok),
                    cache_read=base(price.cache_read_mtok))
    return None


def prices_source() -> str:
    """What the maintained prices are: the genai-prices release (its bundled data)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"genai-prices {version('genai-prices')}"
    except PackageNotFoundError:
        return "genai-prices (version unknown)"
