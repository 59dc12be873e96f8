"""The viewer's URL query parameters: how each is read, and the one line that refuses a
value out of its range.

Every parameter a route reads goes through ``whole`` or ``choice``, so a number past
SQLite's 64-bit integers (which made SQLite raise ``OverflowError``: a 500), a negative
page, a ``LIMIT`` below zero (which SQLite reads as "no limit") or an unknown sort key
is refused with a reason before any query runs: never a 500, never silently read as
something else. An empty value is the default, as a form sends a field left unset.
Parameters a route does not read are ignored (the access token travels in the first
URL); the run page's task table is read whole (``table_query``). Pure: no web
framework here; the app turns ``BadParameter`` into a 400.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol, overload, runtime_checkable

from evalledger.render import DEFAULT_SORT, SORTS, TABLE_OUTCOMES, TableQuery

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


@runtime_checkable
class _MultiMapping(Protocol):
    """A query string that can hold a name more than once (Starlette's)."""

    def getlist(self, key: str) -> list[str]: ...


def table_query(query: Mapping[str, str]) -> TableQuery:
    """The run page's task table a URL asks for: ``outcome`` repeated (as a form's boxes
    send it) or comma-separated (as the page's links spell it).

    Raises:
        BadParameter: a status, sort key, direction or page out of range (tags,
            variants, kinds and text are free: an unknown one matches nothing).
    """
    given = query.getlist("outcome") if isinstance(query, _MultiMapping) else [
        query.get("outcome", "")]
    outcomes = [choice({"outcome": one}, "outcome", TABLE_OUTCOMES)
                for value in given for one in value.split(",")]
    return TableQuery(
        outcomes=tuple(dict.fromkeys(o for o in outcomes if o)),
        kind=query.get("kind", ""), tag=query.get("tag", ""),
        variant=query.get("variant", ""), text=query.get("q", ""),
        sort=choice(query, "sort", SORTS, DEFAULT_SORT),
        descending=choice(query, "dir", ("asc", "desc")) == "desc",
        page=whole(query, "page", 1, low=1),
    )


def _shown(raw: str) -> str:
    """The value as the reason quotes it: one line (``repr`` escapes line breaks), short."""
    return repr(raw if len(raw) <= 40 else raw[:40] + "\u2026")


def variant_pairs(given: list[str], of_a: list[str], of_b: list[str]) -> dict[str, str] | None:
    """``?variants=X=Y`` (each given once or more): run A's variant X paired with run B's
    Y, as ``diff --variants``; None when none is given (the runs pair as they do)."""
    if not given:
        return None
    pairs: dict[str, str] = {}
    for pair in given:
        x, eq, y = pair.partition("=")
        if not eq or x not in of_a or (y not in of_b and y != x):
            raise BadParameter(f"variants: {pair!r} is not A=B, a variant of run A "
                               f"({', '.join(of_a)}) and one of run B ({', '.join(of_b)})")
        pairs[x] = y
    return pairs
