"""Merging ledgers, as a property: random events split across two ledgers with overlaps;
merge(A, B) holds exactly the union of their events, in either order, verifies, and
merging again adds nothing."""

from __future__ import annotations

import tempfile
import uuid
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunMerged,
    RunStarted,
    TaskOutput,
    TaskStarted,
    verify,
)
from evalledger.ledger._transfer import append_all, rows_of

RUNS = ("r1", "r2", "r3")


@st.composite
def events(draw: st.DrawFn) -> list[AnyEvent]:
    out: list[AnyEvent] = []
    for i in range(draw(st.integers(1, 40))):
        run_id = draw(st.sampled_from(RUNS))
        kind = draw(st.sampled_from(["start", "task", "line"]))
        event_id = str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)), version=4))
        if kind == "start":
            out.append(RunStarted(event_id=event_id, run_id=run_id, planned=[f"k{i}"]))
        elif kind == "task":
            out.append(TaskStarted(event_id=event_id, run_id=run_id, task_key=f"k{i}",
                                   task_id=f"t{i}"))
        else:
            out.append(TaskOutput(event_id=event_id, run_id=run_id, task_key=f"k{i}",
                                  line=draw(st.text(max_size=20)), n=i))
    return out


def _ids(ledger: Ledger) -> list[str]:
    return [e.event_id for e in ledger.events() if not isinstance(e, RunMerged)]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.data())
def test_merge_holds_exactly_the_union_in_either_order(pool: list[AnyEvent],
                                                       data: st.DataObject) -> None:
    pool = list({e.event_id: e for e in pool}.values())
    sides = data.draw(st.lists(st.sampled_from(["a", "b", "both"]), min_size=len(pool),
                               max_size=len(pool)), label="where each event goes")
    in_a = [e for e, side in zip(pool, sides, strict=True) if side in ("a", "both")]
    in_b = [e for e, side in zip(pool, sides, strict=True) if side in ("b", "both")]
    with tempfile.TemporaryDirectory(prefix="evalledger-merge-") as raw:
        folder = Path(raw)
        for first, second in (("a", "b"), ("b", "a")):
            paths = {}
            for name, evs in (("a", in_a), ("b", in_b)):
                paths[name] = folder / f"{name}-{first}.db"
                with Ledger(paths[name]) as ledger:
                    if evs:
                        ledger.append(evs)
            with Ledger(paths[first]) as dest, Ledger(paths[second], read_only=True) as src:
                own = _ids(dest)
                added = append_all(dest, rows_of(src), source=str(paths[second]),
                                   source_ledger=src.ledger_id).added
                merged = _ids(dest)
                other = _ids(src)
                # Exactly the union: this ledger's events in their order, then the other's
                # it lacked, in the other's order.
                assert merged == own + [i for i in other if i not in set(own)]
                assert set(merged) == {e.event_id for e in in_a} | {e.event_id for e in in_b}
                assert added == len(set(other) - set(own))
                assert verify(dest).ok
                count = dest.count()
                assert append_all(dest, rows_of(src), source="again",
                                  source_ledger=None).added == 0
                assert dest.count() == count


def test_a_run_merged_on_from_a_ledger_that_merged_it_verifies(tmp_path: Path) -> None:
    """C's run merged into B, then B into A: its run.started names C, A's run.merged
    names B. verify reported A's identity as changed."""
    paths = [tmp_path / f"{name}.db" for name in "cba"]
    with Ledger(paths[0]) as c:
        c.append([RunStarted(run_id="r", ledger_id=c.ledger_id, planned=["v/k/00"]),
                  TaskStarted(run_id="r", task_key="v/k/00", task_id="k")])
    for source, target in pairwise(paths):
        with Ledger(source, read_only=True) as src, Ledger(target) as dest:
            append_all(dest, rows_of(src), source=str(source), source_ledger=src.ledger_id)
            assert verify(dest).ok, verify(dest).lines()
