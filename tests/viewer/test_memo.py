"""What pages compute from a summary is computed once per summary object, and is
forgotten with it."""

from __future__ import annotations

import gc

from evalledger.projections import RunSummary
from evalledger.viewer import _memo
from evalledger.viewer._memo import per_summary


def test_a_value_is_made_once_per_summary_and_key() -> None:
    first, second = RunSummary.model_construct(run_id="a"), RunSummary.model_construct(run_id="a")
    made: list[str] = []

    def make(name: str) -> object:
        made.append(name)
        return object()

    one = per_summary(first, "charts", lambda: make("first charts"))
    assert per_summary(first, "charts", lambda: make("again")) is one
    other = per_summary(first, ("rows", "failed"), lambda: make("first rows"))
    # An equal summary is another object (a new one is made when an event changes the
    # run): what was made from the old one is not its.
    fresh = per_summary(second, "charts", lambda: make("second charts"))

    assert made == ["first charts", "first rows", "second charts"]
    assert len({id(one), id(other), id(fresh)}) == 3


def test_what_was_made_from_a_summary_goes_with_it() -> None:
    summary = RunSummary.model_construct(run_id="gone")
    per_summary(summary, "json", lambda: b"x" * 1000)
    ident = id(summary)
    assert ident in _memo._entries

    del summary
    gc.collect()

    assert ident not in _memo._entries
