"""Turning a child's byte stream into lines, and lines into events.

The rules are in docs/tasks.md ("What a task emits").

Lines are split on ``\\n`` as bytes arrive. A line longer than ``MAX_LINE`` bytes
is cut there and marked truncated; the rest of it, up to the next newline, is
dropped, so one runaway line cannot eat memory. Bytes are decoded as UTF-8 with
replacement: garbage is recorded as garbage, never an error.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

MAX_LINE = 64 * 1024


class LineSplitter:
    """Feed it chunks; it returns ``(line, truncated)`` pairs, decoded, without newlines.

    A whole read is decoded at once, not line by line: ``\n`` never occurs inside
    a multi-byte UTF-8 sequence, so cutting at the last newline is always safe.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max = max_line
        self._pending = b""
        # Invariant: True while the rest of an already-truncated line is being discarded.
        self._dropping = False

    def feed(self, chunk: bytes) -> list[tuple[str, bool]]:
        data = self._pending + chunk if self._pending else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._pending = data
            out: list[tuple[str, bool]] = []
        else:
            self._pending = data[cut + 1 :]
            out = self._lines(data[:cut])
        # One byte of grace for a "\r": it may turn out to end the line (CRLF).
        if len(self._pending) > self._max + self._pending.endswith(b"\r"):
            if not self._dropping:
                out.append(self._cut(self._pending, complete=False))
                self._dropping = True
            self._pending = b""
        return out

    def close(self) -> list[tuple[str, bool]]:
        """Whatever was left without a final newline."""
        rest, dropping = self._pending, self._dropping
        self._pending, self._dropping = b"", False
        return self._lines(rest) if rest and not dropping else []

    def _lines(self, block: bytes) -> list[tuple[str, bool]]:
        lines = decode(block).split("\n")
        skip_first = self._dropping  # the tail of a line already recorded as truncated
        self._dropping = False
        # A character stands for at most 4 bytes (an invalid byte run, replaced, for
        # at most 3): lines this short cannot be over the limit. The common case.
        if max(map(len, lines)) <= self._max // 4:
            return [
                (line[:-1] if line.endswith("\r") else line, False)
                for line in lines[1 if skip_first else 0 :]
            ]
        # Some line may be long: measure it in bytes, as written. The byte lines
        # correspond one to one (replacement never swallows a newline).
        raw = block.split(b"\n")
        return [self._cut(raw_line, complete=True) for raw_line in raw[1 if skip_first else 0 :]]

    def _cut(self, line: bytes, *, complete: bool) -> tuple[str, bool]:
        if complete and line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._max:
            return decode(line[: self._max]), True
        return decode(line), False


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The line as a JSON object, or None when it is anything else."""
    if not text or (text[0] != "{" and not text[0].isspace()):
        return None  # the common case, decided without copying the line
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        value = json.loads(stripped)
        if not isinstance(value, dict):
            return None
        # What json.loads accepts the ledger may not store (a lone surrogate escape
        # such as "\ud800", nesting past the serialiser's limit): such a line is
        # recorded as plain text instead of killing the writer.
        to_json(value)
    except (ValueError, RecursionError, PydanticSerializationError):
        return None
    return value
