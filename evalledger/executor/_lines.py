"""Turning a child's byte stream into lines, and lines into events (SPEC §5).

Lines are split on ``\\n`` as bytes arrive. A line longer than ``MAX_LINE`` bytes
is cut there and marked truncated; the rest of it, up to the next newline, is
dropped, so one runaway line cannot eat memory. Bytes are decoded as UTF-8 with
replacement: garbage is recorded as garbage, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

MAX_LINE = 64 * 1024


class LineSplitter:
    """Feed it chunks; it yields ``(line, truncated)`` pairs, without the newline."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max = max_line
        self._pending = b""
        # Invariant: True while the rest of an already-truncated line is being discarded.
        self._dropping = False

    def feed(self, chunk: bytes) -> Iterator[tuple[bytes, bool]]:
        parts = (self._pending + chunk).split(b"\n")
        self._pending = parts.pop()
        for part in parts:
            if self._dropping:
                self._dropping = False
                continue
            yield self._cut(part)
        if len(self._pending) > self._max:
            if not self._dropping:
                yield self._pending[: self._max], True
                self._dropping = True
            self._pending = b""

    def close(self) -> Iterator[tuple[bytes, bool]]:
        """Whatever was left without a final newline."""
        if self._pending and not self._dropping:
            yield self._cut(self._pending)
        self._pending, self._dropping = b"", False

    def _cut(self, line: bytes) -> tuple[bytes, bool]:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._max:
            return line[: self._max], True
        return line, False


def decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The line as a JSON object, or None when it is anything else."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
