"""Reading one field of an agent's JSON line, whatever it holds.

An agent's transcript is untrusted and changes between versions: a field of a wrong
type is not an error, it reads as nothing (a count, a cost) or as its JSON (a text).
"""

from __future__ import annotations

import json
import math
from typing import Any

from evalledger._bounds import MAX_TOKENS


def text(value: Any) -> str:
    """A text field as itself; anything else but null as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return as_json(value)


def text_or_none(value: Any) -> str | None:
    """A non-empty text, or None."""
    return value if isinstance(value, str) and value else None


def number(value: Any) -> float | None:
    """A finite number >= 0 (a cost, a duration), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def count(value: Any) -> int | None:
    """A whole number in range (``5000.0`` included), or None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
