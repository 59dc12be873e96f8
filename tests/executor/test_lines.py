"""``LineSplitter`` and ``parse_json_object``: properties against a reference model.

The contract, read off ``_lines.py``: split on ``\\n``; a final piece without a newline
comes out of ``close()`` (an empty one does not); one trailing ``\\r`` is stripped from
each line; a line longer than ``max_line`` bytes (after that ``\\r``) is cut at
``max_line`` bytes and marked truncated, and the rest of it is dropped; bytes are
decoded as UTF-8 with replacement. How the bytes are chunked must not matter.

A small ``max_line`` (16) lets Hypothesis reach the truncation paths: both the one
where a whole over-long line arrives in one read, and the one where the pending
tail of a read grows past the limit before its newline arrives.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalledger.executor import MAX_LINE
from evalledger.executor._lines import LineSplitter, decode, parse_json_object

SMALL = 16
# No per-example deadline and no "too slow" health check: both are wall-clock limits a
# loaded machine (two copies of the suite on two cores) can miss.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def model(data: bytes, max_line: int) -> list[tuple[str, bool]]:
    """The reference: what one pass over the whole byte string should give."""
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()  # the data ended with a newline (or was empty)
    out = []
    for piece in pieces:
        if piece.endswith(b"\r"):
            piece = piece[:-1]
        if len(piece) > max_line:
            out.append((piece[:max_line].decode("utf-8", "replace"), True))
        else:
            out.append((piece.decode("utf-8", "replace"), False))
    return out


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks, start = [], 0
    for point in points:
        chunks.append(data[start:point])
        start = point
    chunks.append(data[start:])
    return chunks


def feed_all(chunks: list[bytes], max_line: int) -> list[tuple[str, bool]]:
    splitter = LineSplitter(max_line)
    out: list[tuple[str, bool]] = []
    for chunk in chunks:
        out.extend(splitter.feed(chunk))
    out.extend(splitter.close())
    return out


# Text lines (valid UTF-8, 1-4 byte characters), each ended by \n or \r\n; the last
# one may have no newline at all.
_chars = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\n\r", max_codepoint=0x1F64F
)
_line = st.text(alphabet=st.one_of(st.sampled_from("ab{}\" é✓"), _chars), max_size=30)
_ending = st.sampled_from(["\n", "\r\n"])


@st.composite
def text_data(draw: st.DrawFn) -> bytes:
    body = draw(st.lists(st.tuples(_line, _ending), max_size=8))
    last = draw(st.one_of(st.just(""), _line, _line.map(lambda s: s + "\r")))
    return ("".join(a + b for a, b in body) + last).encode()


cuts = st.lists(st.integers(min_value=0, max_value=400), max_size=12)


@settings(RELAXED, max_examples=400)
@given(data=text_data(), cut=cuts)
@example(data=b"x" * 40 + b"\nafter\n", cut=[5, 17, 18, 33])
@example(data=b"x" * 17 + b"\r\n", cut=[17])
@example(data=b"x" * 16 + b"\r\n", cut=[17])
@example(data=b"x" * 16 + b"\r", cut=[])
@example(data="é".encode() * 20 + b"\n", cut=[1, 9, 17])
def test_any_chunking_gives_the_same_lines(data: bytes, cut: list[int]) -> None:
    chunked = feed_all(split_at(data, cut), SMALL)
    assert chunked == feed_all([data], SMALL)
    assert chunked == model(data, SMALL)


@RELAXED
@given(data=text_data(), size=st.integers(min_value=1, max_value=5))
def test_byte_by_byte_and_fixed_size_chunks(data: bytes, size: int) -> None:
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert feed_all(chunks, SMALL) == model(data, SMALL)


@settings(RELAXED, max_examples=300)
@given(data=st.binary(max_size=600), cut=cuts)
@example(data=b"caf\xe9\r\n\xff\xfe\n\xe2\x82\n\xf0\x9f\n\x98", cut=[4, 10])
@example(data=b"\r\r\n\r", cut=[1])
def test_arbitrary_bytes_without_over_long_lines(data: bytes, cut: list[int]) -> None:
    """With lines well under the limit, anything goes: CRs, invalid UTF-8, empty lines."""
    got = feed_all(split_at(data, cut), MAX_LINE)
    assert got == model(data, MAX_LINE)
    assert all(not truncated for _, truncated in got)
    # without over-long lines this is just split-and-decode
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    assert [line for line, _ in got] == [
        decode(p[:-1] if p.endswith(b"\r") else p) for p in pieces
    ]


@RELAXED
@given(data=text_data(), cut=cuts)
def test_truncated_lines_are_exactly_max_line_bytes(data: bytes, cut: list[int]) -> None:
    for line, truncated in feed_all(split_at(data, cut), SMALL):
        assert "\n" not in line
        if truncated and not line.endswith("\ufffd"):
            assert len(line.encode()) == SMALL
        elif truncated:
            # a character of 2-4 bytes cut at the limit becomes one replacement character
            assert SMALL - 3 <= len(line[:-1].encode()) <= SMALL - 1
        else:
            assert len(line.encode()) <= SMALL


def test_over_long_line_is_cut_and_its_rest_dropped() -> None:
    splitter = LineSplitter(SMALL)
    assert splitter.feed(b"0123456789abcdefGHIJ") == [("0123456789abcdef", True)]
    assert splitter.feed(b"KLMN") == []  # still the same line: dropped
    assert splitter.feed(b"OP\nnext\nlast") == [("next", False)]
    assert splitter.close() == [("last", False)]
    assert splitter.close() == []


def test_over_long_line_in_one_read() -> None:
    splitter = LineSplitter(SMALL)
    assert splitter.feed(b"short\n" + b"y" * 40 + b"\nafter\n") == [
        ("short", False), ("y" * SMALL, True), ("after", False),
    ]


def test_line_of_exactly_max_line_bytes_is_whole() -> None:
    assert LineSplitter(SMALL).feed(b"z" * SMALL + b"\n") == [("z" * SMALL, False)]
    assert LineSplitter(SMALL).feed(b"z" * SMALL + b"\r\n") == [("z" * SMALL, False)]
    assert LineSplitter(SMALL).feed(b"z" * (SMALL + 1) + b"\n") == [("z" * SMALL, True)]


def test_default_limit_is_64_kib() -> None:
    assert MAX_LINE == 65_536
    splitter = LineSplitter()
    out = splitter.feed(b"x" * 200_000 + b"\nafter\n")
    assert out == [("x" * MAX_LINE, True), ("after", False)]


def test_dropping_state_ends_at_close() -> None:
    splitter = LineSplitter(SMALL)
    splitter.feed(b"x" * 40)
    assert splitter.close() == []  # the tail of the truncated line is not a line
    assert splitter.feed(b"fresh\n") == [("fresh", False)]


def test_empty_lines_and_empty_input() -> None:
    assert feed_all([b""], SMALL) == []
    assert feed_all([b"\n"], SMALL) == [("", False)]
    assert feed_all([b"\n\n", b"\r\n"], SMALL) == [("", False)] * 3
    assert feed_all([b"no newline"], SMALL) == [("no newline", False)]


def test_invalid_utf8_is_replaced() -> None:
    assert feed_all([b"caf\xe9\n\xff\n"], MAX_LINE) == [("caf\ufffd", False), ("\ufffd", False)]


# Regression: long lines used to be measured by re-encoding the decoded text, so
# each invalid byte (one U+FFFD, 3 bytes re-encoded) counted three times.
def test_invalid_bytes_under_the_limit_are_not_truncated() -> None:
    assert LineSplitter(SMALL).feed(b"\xff" * 10 + b"\n") == [("\ufffd" * 10, False)]


def test_latin1_line_of_30000_bytes_is_kept_whole() -> None:
    # 30,000 bytes is less than half of MAX_LINE; today it comes out as 21,846 characters
    assert LineSplitter().feed(b"\xe9" * 30_000 + b"\n") == [("\ufffd" * 30_000, False)]


def test_invalid_bytes_chunking_does_not_matter() -> None:
    data = b"\xff" * 20 + b"\n"
    assert feed_all([data[:17], data[17:]], SMALL) == feed_all([data], SMALL)


def test_carriage_return_at_the_limit_in_the_middle_of_a_line() -> None:
    data = b"x" * SMALL + b"\r" + b"more\n"
    assert feed_all([data], SMALL) == [("x" * SMALL, True)]
    assert feed_all([data[: SMALL + 1], data[SMALL + 1 :]], SMALL) == [("x" * SMALL, True)]


# -- parse_json_object ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{}", {}),
        ('{"type": "usage", "input_tokens": 3}', {"type": "usage", "input_tokens": 3}),
        ('  {"a": {"b": [1, {"c": null}]}}\t', {"a": {"b": [1, {"c": None}]}}),
        ('\t{"x": "é ✓"}', {"x": "é ✓"}),
        ('{"a": 1, "a": 2}', {"a": 2}),
        ('{"s": "}"}', {"s": "}"}),
    ],
)
def test_json_objects(text: str, expected: dict[str, Any]) -> None:
    assert parse_json_object(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "plain text",
        "[1, 2, 3]",
        "[{}]",
        "42",
        "-1.5e3",
        '"a string"',
        "null",
        "true",
        "{",
        "}",
        "{not json}",
        '{"a": 1',
        '{"a": 1} trailing',
        'x {"a": 1}',
        '{"a": 1}{"b": 2}',
        "{'single': 'quotes'}",
    ],
)
def test_not_json_objects(text: str) -> None:
    assert parse_json_object(text) is None


def test_nan_and_infinity_are_accepted_as_python_does() -> None:
    parsed = parse_json_object('{"a": NaN, "b": Infinity}')
    assert parsed is not None
    assert math.isnan(parsed["a"]) and parsed["b"] == math.inf


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@RELAXED
@given(value=st.dictionaries(st.text(), _json_values, max_size=5),
       pad=st.sampled_from(["", " ", "\t", "  "]), indent=st.sampled_from([None, 2]))
def test_any_json_object_round_trips(value: dict[str, Any], pad: str, indent: int | None) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if indent is None:
        assert parse_json_object(pad + text + pad) == value
    else:  # a line never holds a newline, but the parser does not care
        assert parse_json_object(text) == value


@RELAXED
@given(value=_json_values.filter(lambda v: not isinstance(v, dict)))
def test_any_other_json_value_is_not_an_object(value: Any) -> None:
    assert parse_json_object(json.dumps(value)) is None


@RELAXED
@given(text=st.text())
def test_never_raises_on_any_text(text: str) -> None:
    result = parse_json_object(text)
    assert result is None or isinstance(result, dict)


def test_deeply_nested_object_does_not_raise() -> None:
    """Regression: json.loads raised RecursionError, which was not caught."""
    text = '{"a": ' + "[" * 30_000 + "]" * 30_000 + "}"
    assert len(text.encode()) < MAX_LINE
    assert parse_json_object(text) is None  # too deep to parse: a plain line


def _nested(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


def test_moderately_nested_object_is_an_object() -> None:
    assert parse_json_object(_nested(20)) == {"a": _wrap(20)}


def test_very_deep_object_is_kept_as_a_plain_line() -> None:
    """Too deep for the ledger's serialiser: not an event (it used to kill the writer)."""
    assert parse_json_object(_nested(300)) is None


def _wrap(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value
