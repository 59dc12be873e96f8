"""Snapshots: a rebuild through the newest snapshot and the events after it equals a
full replay, whatever the events and wherever the snapshots fall.

The events are the generated whole-run streams of ``test_properties`` (two runs
interleaved, crashes, resumes, retried completions, future types), appended to a
real ledger file; between append batches, snapshots of each run are written the way
the executor writes them (from folds that were themselves rebuilt through earlier
snapshots, so snapshots build on snapshots).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalledger.app._repository import (
    load_fold,
    load_folds,
    load_headline,
    load_summary,
    write_snapshot,
)
from evalledger.ledger import (
    SCHEMA_VERSION,
    AnyEvent,
    Ledger,
    RunFinished,
    RunSnapshot,
    RunStarted,
)
from evalledger.ledger._queries import latest_snapshot
from evalledger.ledger._rows import LIFECYCLE_WHERE, LIFECYCLE_WHERE_3
from evalledger.projections import ResumeFold, SummaryFold, fold
from evalledger.projections._snapshots import snapshot_events
from evalledger.render import render_json
from evalledger.statuses import FinalStatus, RunStatus
from tests.projections.builders import RUN, completed, key, old_ledger, started, usage
from tests.projections.scenarios import SETTINGS, Scenario, scenarios


def _snapshot_now(ledger: Ledger, run_id: str) -> None:
    """A snapshot of the run as it is (finished or not), folded through snapshots."""
    (summary, resume), through = load_folds(ledger, run_id, SummaryFold, ResumeFold)
    assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
    if through:
        ledger.append(snapshot_events(run_id, through, summary, resume))


@SETTINGS
@given(scenarios(), st.data())
def test_snapshot_plus_tail_equals_a_full_replay(scenario: Scenario, data: st.DataObject,
                                                 ) -> None:
    after = data.draw(st.sets(st.integers(0, len(scenario.batches) - 1), max_size=4),
                      label="snapshot after batches")
    with tempfile.TemporaryDirectory(prefix="evalledger-snap-") as folder:
        path = Path(folder) / "ledger.db"
        with Ledger(path) as ledger:
            at = 0
            for i, size in enumerate(scenario.batches):
                ledger.append(scenario.events[at : at + size])
                at += size
                if i in after:
                    for model in scenario.runs:
                        _snapshot_now(ledger, model.run_id)
        with Ledger(path, read_only=True) as reader:
            for model in scenario.runs:
                run_id = model.run_id
                full = fold(SummaryFold(run_id), scenario.events)
                expected = render_json(full.summary())
                assert render_json(load_summary(reader, run_id)) == expected
                through_state = load_fold(reader, SummaryFold, run_id)
                assert render_json(through_state.summary()) == expected
                assert load_headline(reader, run_id) == full.headline().model_dump(mode="json")
                assert render_json(load_summary(reader, run_id, snapshots=False)) == expected

                # A full replay from the file (seqs are the ledger's), and from memory.
                replayed = load_fold(reader, ResumeFold, run_id, snapshots=False)
                in_memory = fold(ResumeFold(run_id), scenario.events)
                rebuilt = load_fold(reader, ResumeFold, run_id)
                for flags in ({}, {"retry_errors": True}, {"rerun_failed": True}):
                    assert rebuilt.partition(**flags) == replayed.partition(**flags)
                    assert rebuilt.partition(**flags) == in_memory.partition(**flags)
                assert (rebuilt.found, rebuilt.finished, rebuilt.host, rebuilt.boundary_seq,
                        rebuilt.options, rebuilt.fingerprint) == (
                    replayed.found, replayed.finished, replayed.host, replayed.boundary_seq,
                    replayed.options, replayed.fingerprint)
                # The state a new snapshot would store is the replay's, exactly.
                assert json.dumps(rebuilt.state()) == json.dumps(replayed.state())
                assert json.dumps(through_state.state()) == json.dumps(full.state())


def _finished_run(ledger: Ledger) -> list[AnyEvent]:
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0), key(1), key(2)])]
    for i, status in enumerate((FinalStatus.SUCCESS, FinalStatus.FAILURE)):
        events += [started(key(i)), usage(key(i), 0.25, input_tokens=10),
                   completed(key(i), status, cost_usd=0.25)]
    events.append(RunFinished(run_id=RUN, status=RunStatus.COMPLETED))
    ledger.append(events)
    return events


def test_a_finished_run_is_snapshotted_once(ledger: Ledger) -> None:
    events = _finished_run(ledger)
    through = write_snapshot(ledger, RUN)
    assert through == ledger.last_seq() - 4 == len(events)
    assert write_snapshot(ledger, RUN) is None  # nothing new since
    kinds = [e.kind for e in ledger.events(RUN) if isinstance(e, RunSnapshot)]
    assert sorted(kinds) == ["headline", "resume_fold", "summary", "summary_fold"]


def test_a_run_still_going_is_not_snapshotted(ledger: Ledger) -> None:
    ledger.append([RunStarted(run_id=RUN, planned=[key(0)]), started(key(0))])
    assert write_snapshot(ledger, RUN) is None
    assert ledger.count() == 2


def test_a_finished_runs_summary_is_read_from_its_snapshot(ledger: Ledger) -> None:
    # Proven by a snapshot that lies: the rebuild answers what it says (verify --deep
    # is what catches a lie, see tests/cli/test_snapshots.py).
    events = _finished_run(ledger)
    write_snapshot(ledger, RUN)
    truth = fold(SummaryFold(RUN), events).summary()
    forged = truth.model_copy(update={"experiment_id": "forged"})
    ledger.append([RunSnapshot(run_id=RUN, kind="summary", fold_version=SummaryFold.VERSION,
                               through_seq=len(events),
                               value=forged.model_dump(mode="json", exclude={"anchor"}))])
    assert load_summary(ledger, RUN).experiment_id == "forged"
    assert load_summary(ledger, RUN, snapshots=False).experiment_id is None


def test_events_after_a_snapshot_are_folded_onto_it(ledger: Ledger) -> None:
    events = _finished_run(ledger)
    write_snapshot(ledger, RUN)
    later: list[AnyEvent] = [started(key(2)), completed(key(2), FinalStatus.ERROR)]
    ledger.append(later)
    summary = load_summary(ledger, RUN)
    assert (summary.tasks_run, summary.tasks_error) == (3, 1)
    assert render_json(summary) == render_json(fold(SummaryFold(RUN), events + later).summary())
    assert load_fold(ledger, ResumeFold, RUN).partition().to_run == []


def test_a_snapshot_of_another_version_is_ignored(ledger: Ledger) -> None:
    events = _finished_run(ledger)
    for kind in ("summary", "summary_fold", "headline", "resume_fold"):
        ledger.append([RunSnapshot(run_id=RUN, kind=kind, fold_version=SummaryFold.VERSION + 1,
                                   through_seq=len(events), value={"from": "the future"})])
    assert latest_snapshot(ledger, RUN, "summary", SummaryFold.VERSION) is None
    expected = render_json(fold(SummaryFold(RUN), events).summary())
    assert render_json(load_summary(ledger, RUN)) == expected
    assert load_fold(ledger, ResumeFold, RUN).partition().to_run == [key(2)]


def test_time_travel_ignores_snapshots_made_later(ledger: Ledger) -> None:
    events = _finished_run(ledger)
    write_snapshot(ledger, RUN)
    early = load_fold(ledger, SummaryFold, RUN, until_seq=3)  # run.started, one start, usage
    assert early.summary().tasks_run == 0
    assert render_json(early.summary()) == render_json(
        fold(SummaryFold(RUN), events[:3]).summary())


def test_a_schema_five_ledger_is_read_through_its_own_lifecycle_index(db_path: Path) -> None:
    # Read-only commands do not migrate: the query must repeat the index's old WHERE,
    # or SQLite would scan the table instead.
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0)]), started(key(0)),
                              completed(key(0))]
    assert old_ledger(db_path, events, "0006_lean_indexes") == "5"
    with Ledger(db_path, read_only=True) as reader:
        assert reader._lifecycle_where == LIFECYCLE_WHERE_3
        assert load_summary(reader, RUN).tasks_succeeded == 1
        plan = reader.query(f"EXPLAIN QUERY PLAN SELECT seq FROM events WHERE run_id = 'x' "
                            f"AND {reader._lifecycle_where} ORDER BY seq")[1]
        assert "events_lifecycle" in str(plan)
    with Ledger(db_path) as migrated:  # read-write: migrated to the current schema
        assert migrated._lifecycle_where == LIFECYCLE_WHERE
        assert migrated.schema_version == SCHEMA_VERSION
        assert load_summary(migrated, RUN).tasks_succeeded == 1


@pytest.mark.parametrize("kind", ["summary", "summary_fold", "resume_fold", "headline"])
@pytest.mark.parametrize("value", [{}, {"keys": "not a list"}, {"planned": [1, 2]}])
def test_a_damaged_snapshot_is_replayed_past_not_trusted(ledger: Ledger, kind: str,
                                                         value: dict[str, object]) -> None:
    events = _finished_run(ledger)
    ledger.append([RunSnapshot(run_id=RUN, kind=kind, fold_version=SummaryFold.VERSION,
                               through_seq=len(events), value=value)])
    expected = fold(SummaryFold(RUN), events)
    assert render_json(load_summary(ledger, RUN)) == render_json(expected.summary())
    assert load_headline(ledger, RUN) == expected.headline().model_dump(mode="json")
    assert load_fold(ledger, ResumeFold, RUN).partition().to_run == [key(2)]


@pytest.mark.parametrize("past", [0, 1, 10**9], ids=["its-own-seq", "the-next-seq", "10**9"])
def test_a_snapshot_claiming_events_after_itself_is_never_read(ledger: Ledger, past: int
                                                               ) -> None:
    """A snapshot is appended after what it folds: one through its own seq or later (past
    the ledger's end) is forged, whatever it holds. Every reader (runs, show, report,
    resume, the viewer's fold as of a seq) replays the run instead."""
    events = _finished_run(ledger)
    write_snapshot(ledger, RUN)
    liar = fold(SummaryFold(RUN), [*events[:-1], completed(key(2), FinalStatus.ERROR),
                                   events[-1]])
    resume = fold(ResumeFold(RUN), [])
    last = ledger.last_seq() + 4  # the last of the four forged snapshots
    ledger.append(snapshot_events(RUN, last + past, liar, resume))
    assert latest_snapshot(ledger, RUN, "summary", SummaryFold.VERSION) is None

    truth = fold(SummaryFold(RUN), events)
    assert render_json(load_summary(ledger, RUN)) == render_json(truth.summary())
    assert load_headline(ledger, RUN) == truth.headline().model_dump(mode="json")
    assert load_fold(ledger, ResumeFold, RUN).partition().to_run == [key(2)]
    as_of_now = load_fold(ledger, SummaryFold, RUN, until_seq=ledger.last_seq())
    assert render_json(as_of_now.summary()) == render_json(truth.summary())
