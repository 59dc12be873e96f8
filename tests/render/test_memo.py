"""What pages compute from a summary is computed once per summary object, and is
forgotten with it."""

from __future__ import annotations

import gc

from evalledger.projections import RunSummary
from evalledger.render import _memo
from evalledger.render._memo import per_summary, recent_per_summary


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


def test_of_freely_named_keys_only_the_recent_ones_are_kept() -> None:
    summary = RunSummary.model_construct(run_id="crawled")
    made: list[int] = []

    def make(n: int) -> list[int]:
        made.append(n)
        return [n]

    for n in range(1000):  # a crawler's queries, each text another
        recent_per_summary(summary, "rows", ("q", n), lambda n=n: make(n), keep=8)
    assert len(made) == 1000
    kept = per_summary(summary, ("rows",), dict)
    assert list(kept) == [("q", n) for n in range(992, 1000)]
    # Asked again: the kept ones are not made again; one long gone is.
    assert recent_per_summary(summary, "rows", ("q", 995), lambda: make(-1), keep=8) == [995]
    assert recent_per_summary(summary, "rows", ("q", 3), lambda: make(3), keep=8) == [3]
    assert made[-1:] == [3] and len(made) == 1001
