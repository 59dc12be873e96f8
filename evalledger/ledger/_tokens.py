"""Token counts: in usage events, completions and every summary. Apart from the event
models so a summary can be read (``show``) without building those."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict


class TokenCounts(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return (
            self.input_tokens + self.output_tokens + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: TokenCounts) -> TokenCounts:
        if not isinstance(other, TokenCounts):
            return NotImplemented
        # model_construct: both sides were validated already; this is on every fold's path.
        return TokenCounts.model_construct(
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


NO_TOKENS = TokenCounts()


class _HasCounts(Protocol):
    @property
    def cache_read_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


def counts_of(source: _HasCounts) -> TokenCounts:
    """The four counts of anything that has them (a usage event, a lite one), unchecked:
    they were validated when ``source`` was."""
    return TokenCounts.model_construct(
        cache_read_tokens=source.cache_read_tokens, cache_write_tokens=source.cache_write_tokens,
        input_tokens=source.input_tokens, output_tokens=source.output_tokens,
    )


__all__ = ["NO_TOKENS", "TokenCounts", "counts_of"]
