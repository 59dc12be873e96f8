"""Token counts: in usage events, completions and every summary. Apart from the event
models so a summary can be read (``show``) without building those."""

from __future__ import annotations

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


__all__ = ["NO_TOKENS", "TokenCounts"]
