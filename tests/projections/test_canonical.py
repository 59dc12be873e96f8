"""A large value's canonical JSON written in pieces (``_canonical.spliced``)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from evalledger.projections._canonical import _MARK, spliced

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(st.dictionaries(st.text(), _json, max_size=6), st.text(), st.lists(_json, max_size=6))
def test_the_pieces_are_the_whole_value_written_at_once(
    around: dict[str, Any], name: str, items: list[Any],
) -> None:
    def build(rows: list[Any]) -> dict[str, Any]:
        return {**around, name: rows}

    whole = msgspec.json.encode(build(items), order="sorted")
    assert b"".join(spliced(build, iter(items))) == whole


def test_a_value_holding_the_stand_in_itself_is_written_whole_and_right() -> None:
    """Text that reads as the stand-in for the list, elsewhere in the value: the pieces
    cannot be cut around it, and the value is written whole instead."""
    def build(rows: list[Any]) -> dict[str, Any]:
        return {"a": _MARK, "rows": rows, "z": [_MARK]}

    items = [{"k": 1}, {"k": _MARK}]
    pieces = list(spliced(build, iter(items)))
    assert len(pieces) == 1
    assert pieces[0] == msgspec.json.encode(build(items), order="sorted")
