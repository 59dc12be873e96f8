"""Provenance per committed batch (``append_all``), against a simple model: whatever the
events, the batch size and what the destination held already, the run.merged rows
account for exactly what each run gained, each in the transaction of its batch, and
an event id held with other content rolls its batch back."""

from __future__ import annotations

import tempfile
import uuid
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
    verify,
)
from evalledger.ledger._rows import EventRow
from evalledger.ledger._transfer import Conflict, append_all, rows_of

RUNS = ("r1", "r2", "r3")


@st.composite
def events(draw: st.DrawFn) -> list[AnyEvent]:
    out: list[AnyEvent] = []
    for i in range(draw(st.integers(1, 30))):
        run_id = draw(st.sampled_from(RUNS))
        event_id = str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)), version=4))
        if draw(st.booleans()):
            out.append(RunStarted(event_id=event_id, run_id=run_id, ledger_id=str(uuid.uuid4())))
        else:
            out.append(TaskOutput(event_id=event_id, run_id=run_id, task_key=f"v/k{i}/00",
                                  line=f"line {i}", n=i))
    return list({e.event_id: e for e in out}.values())


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.data())
def test_each_batch_accounts_for_exactly_what_it_added(pool: list[AnyEvent],
                                                       data: st.DataObject) -> None:
    held = data.draw(st.lists(st.sampled_from(pool), unique_by=lambda e: e.event_id),
                     label="already in the destination")
    batch_rows = data.draw(st.integers(1, 8), label="batch size")
    with (tempfile.TemporaryDirectory(prefix="evalledger-transfer-") as raw,
          Ledger(Path(raw) / "src.db") as src, Ledger(Path(raw) / "dst.db") as dst):
        src.append(pool)
        # Held from an earlier transfer (a foreign run.started comes with its run.merged).
        append_all(dst, [(EventRow.of(e), 1) for e in held], source="earlier",
                   source_ledger=None)
        before = dst.last_seq()
        done = append_all(dst, rows_of(src), source="src", source_ledger=src.ledger_id,
                          batch_rows=batch_rows)
        added = [r for r in dst.rows(after_seq=before) if r.type != "run.merged"]
        merged = [e for e in dst.events(types=["run.merged"])
                  if isinstance(e, RunMerged) and e.source == "src"]

        # The model: what was not held is added, in the source's order.
        held_ids = {e.event_id for e in held}
        assert [r.event_id for r in added] == [e.event_id for e in pool
                                               if e.event_id not in held_ids]
        assert done.added == len(added)
        for run_id in RUNS:
            assert (sum(m.events for m in merged if m.run_id == run_id)
                    == sum(1 for r in added if r.run_id == run_id))
        # One run.merged per batch and run that gained events, right after that
        # batch's rows (one transaction): its source seqs span its rows there.
        batches = [pool[i : i + batch_rows] for i in range(0, len(pool), batch_rows)]
        expected = [(run_id, len(new)) for chunk in batches for run_id in dict.fromkeys(
            e.run_id for e in chunk if e.event_id not in held_ids)
            for new in [[e for e in chunk if e.run_id == run_id
                         and e.event_id not in held_ids]]]
        assert [(m.run_id, m.events) for m in merged] == expected
        assert done.merged == len(merged)
        assert verify(dst).ok


def test_an_event_held_with_other_content_rolls_its_batch_back(tmp_path: Path) -> None:
    with Ledger(tmp_path / "src.db") as src, Ledger(tmp_path / "dst.db") as dst:
        lines = [TaskOutput(run_id="r", task_key="v/k/00", line=f"line {i}", n=i)
                 for i in range(6)]
        src.append(lines)
        dst.append([lines[4].model_copy(update={"line": "another line"})])
        with pytest.raises(Conflict, match=f"event {lines[4].event_id} \\(seq 5 in src\\) is "
                                           "already in the ledger with another payload"):
            append_all(dst, rows_of(src), source="src", source_ledger=None, batch_rows=3)
        # The first batch stays, with its provenance; the second is not there at all.
        assert [r.event_id for r in dst.rows()][1:4] == [e.event_id for e in lines[:3]]
        merged = list(dst.events(types=["run.merged"]))
        assert [(m.events, m.source_seqs) for m in merged  # type: ignore[attr-defined]
                ] == [(3, [1, 3])]
        assert dst.count() == 1 + 3 + 1


def test_a_batch_and_what_then_makes_of_it_commit_together(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        rows = [EventRow.of(TaskOutput(run_id="r", task_key="v/k/00", line="x", n=i))
                for i in range(3)]

        def refuse(seqs: list[int], before: int) -> list[AnyEvent]:
            assert (seqs, before) == ([1, 2, 3], 0)
            raise ValueError("no")

        with pytest.raises(ValueError, match="no"):
            ledger.append_then(rows, refuse)
        assert ledger.count() == 0
        seqs = ledger.append_then(rows, lambda seqs, before: [
            RunMerged(run_id="r", source="s", events=len(seqs))])
        assert seqs == [1, 2, 3] and ledger.count() == 4
