"""A transcript search passes rows over before Python reads them (SQLite's LIKE, then a
chunk's whole text): neither may drop a line the search itself would keep."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalledger.ledger import Ledger, RunStarted, TaskEmitted, TaskOutput, chunked
from evalledger.ledger._page_queries import _holding, transcript_rows

RUN, KEY, TS = "r1", "v/a/00", "2026-12-07T00:00:00.000000Z"
# What LIKE treats apart: its wildcards and escape, JSON's escapes, the characters that
# re's IGNORECASE holds equal to an ASCII letter (the Kelvin sign, the long s, dotted and
# dotless i), a letter beyond ASCII in both cases.
TRICKY = "aAkKsSiI%_\\\"\n\u212a\u017f\u0130\u0131\u00e9\u00c9 x"
said = st.text(alphabet=TRICKY, max_size=12)
lines = st.lists(st.one_of(st.tuples(st.just("o"), said),
                           st.tuples(st.just("e"), st.dictionaries(said, said, max_size=2))),
                 min_size=1, max_size=40)


def _ledger(folder: str, name: str, plan: list[Any], chunks: bool) -> Ledger:
    ledger = Ledger(Path(folder) / name)
    batch: list[Any] = []
    for n, (kind, value) in enumerate(plan, 1):
        batch.append(TaskOutput.encoded(RUN, KEY, TS, "stdout", value, n, False) if kind == "o"
                     else TaskEmitted(run_id=RUN, task_key=KEY, ts=TS, data=value, n=n))
    ledger.append([RunStarted(run_id=RUN, ts=TS), *(chunked(batch) if chunks else batch)])
    return ledger


# Each character's others that re's IGNORECASE holds equal to it.
CASES = {"k": "kK\u212a", "s": "sS\u017f", "i": "iI\u0130\u0131", "\u00e9": "\u00e9\u00c9"}


def _searched(data: st.DataObject, plan: list[Any]) -> str:
    """A text to search for: mostly a piece of a line the plan prints, each character in
    any of its cases (``CASES``), else any text."""
    shown = [value for kind, value in plan if kind == "o" and value]
    if not shown or data.draw(st.integers(0, 3)) == 0:
        return data.draw(said.filter(bool))
    value = data.draw(st.sampled_from(shown))
    start = data.draw(st.integers(0, len(value) - 1))
    piece = value[start:data.draw(st.integers(start + 1, len(value)))]
    return "".join(data.draw(st.sampled_from(CASES.get(c.lower(), c))) for c in piece)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=100, deadline=None)
@given(lines, st.data(), st.integers(1, 50))
def test_a_search_finds_every_line_that_shows_its_text(plan: list[Any], data: st.DataObject,
                                                        limit: int) -> None:
    """The model: every transcript row, read whole, kept where what it shows holds the
    text (``_holding``, the search's own rule); whether the lines are stored a row each
    or in chunks (compressed where that is smaller)."""
    text = _searched(data, plan)
    with tempfile.TemporaryDirectory() as folder:
        for name, chunks in (("rows.db", False), ("chunks.db", True)):
            with _ledger(folder, name, plan, chunks) as ledger:
                every, _ = transcript_rows(ledger, RUN, KEY, limit=10_000)
                holds = _holding(text, ledger)
                model = [r.seq for r in every if holds(r)]
                found, more = transcript_rows(ledger, RUN, KEY, search=text, limit=limit)
                assert [r.seq for r in found] == model[:limit], (name, text)
                assert more == (len(model) > limit)
                back, _ = transcript_rows(ledger, RUN, KEY, search=text, before=-1,
                                          limit=limit)
                assert [r.seq for r in back] == model[-limit:], (name, text)


def test_a_search_longer_than_sqlite_takes_a_pattern_is_made_in_python(tmp_path: Path) -> None:
    long = "x" * 60_000
    with _ledger(str(tmp_path), "l.db", [("o", long), ("o", "y")], chunks=False) as ledger:
        found, _ = transcript_rows(ledger, RUN, KEY, search=long.upper())
        assert [r.seq for r in found] == [2]
