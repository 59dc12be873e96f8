"""The viewer's URL query parameters: how each is read, and the one line that refuses a
value out of its range.

Every parameter a route reads goes through ``whole`` or ``choice``, so a number past
SQLite's 64-bit integers (which made SQLite raise ``OverflowError``: a 500), a negative
page, a ``LIMIT`` below zero (which SQLite reads as "no limit") or an unknown sort key
is refused with a reason before any query runs: never a 500, never silently read as
something else. An empty value is the default, as a form sends a field left unset.
Parameters a route does not read are ignored (the access token travels in the first
URL). Pure: no web framework here; the app turns ``BadParameter`` into a 400.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import overload

INT64_MAX = 2**63 - 1
_DIGITS = len(str(INT64_MAX))


class BadParameter(ValueError):
    """A query parameter's value is outside what it can be; the message is the reason."""


@overload
def whole(params: Mapping[str, str], name: str, default: int, *, low: int = 0,
          high: int = INT64_MAX) -> int: ...
@overload
def whole(params: Mapping[str, str], name: str, default: None, *, low: int = 0,
          high: int = INT64_MAX) -> int | None: ...
def whole(params: Mapping[str, str], name: str, default: int | None, *, low: int = 0,
          high: int = INT64_MAX) -> int | None:
    """The parameter ``name`` as a whole number from ``low`` to ``high``.

    Raises:
        BadParameter: anything else (``int()`` alone would also take ``" 1"``, ``"1_0"``
            and other scripts' digits, and spend quadratic time on a huge one).
    """
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    digits = raw[1:] if raw.startswith("-") else raw
    if digits.isascii() and digits.isdigit() and len(digits) <= _DIGITS + 1:
        value = int(raw)
        if low <= value <= high:
            return value
    raise BadParameter(f"{name}={_shown(raw)} is not a whole number from {low} to {high}")


def choice(params: Mapping[str, str], name: str, allowed: Collection[str],
           default: str = "") -> str:
    """The parameter ``name``, one of ``allowed``.

    Raises:
        BadParameter: any other value.
    """
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw in allowed:
        return raw
    raise BadParameter(f"{name}={_shown(raw)} is not one of: {', '.join(allowed)}")


def _shown(raw: str) -> str:
    """The value as the reason quotes it: one line (``repr`` escapes line breaks), short."""
    return repr(raw if len(raw) <= 40 else raw[:40] + "\u2026")
