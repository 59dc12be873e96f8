"""Fold state: what a ``summary_fold`` or ``resume_fold`` snapshot stores is made from
each fold's ``STATE`` struct, and that layout is pinned to the fold's ``VERSION``: a
change to the struct without a new version fails here (old snapshots would be misread
instead of ignored). Snapshots written by the code before the structs (version 2, hand
ordered lists) still restore to the same state."""

from __future__ import annotations

import enum
import hashlib
import json
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import msgspec
import pytest

from evalledger.app._repository import load_fold, load_headline, load_summary, write_snapshot
from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunFinished,
    RunResumed,
    RunSnapshot,
    RunStarted,
    TaskIsolation,
    TaskSkipped,
    TaskUsage,
    verify,
)
from evalledger.options import RunOptions
from evalledger.projections import ResumeFold, SummaryFold, fold
from evalledger.projections._fold import Fold
from evalledger.projections._snapshots import restore_fold
from evalledger.render import render_json
from evalledger.statuses import Category, FinalStatus, RunStatus

from .builders import RUN, completed, interrupted, key, started, usage

# (fold, VERSION) -> the digest of its STATE's layout. A new layout is a new version:
# bump it in projections/_versions.py and add its digest here (keep the old lines).
LAYOUTS = {
    ("SummaryFold", 2): "a88ae1417246c8ed",
    ("SummaryFold", 3): "35743baae00875e2",  # + each key's isolation
    ("SummaryFold", 4): "eebb11ee0e03112d",  # its isolation by attempt, not the latest's
    ("SummaryFold", 5): "f51a1d11b3dbd807",  # grade sets (each key's verdict per set), flags
    ("SummaryFold", 6): "6cc3fc943741c75f",  # failure classes; summaries gain pass^k, flaky
    ("SummaryFold", 7): "6cc3fc943741c75f",  # a turn never reported is spend unknown, not unpriced
    ("SummaryFold", 8): "6cc3fc943741c75f",  # an estimate is a floor, priced or not
    ("SummaryFold", 9): "6cc3fc943741c75f",  # an estimate is unreported spend, not unpriced
    ("SummaryFold", 10): "5ebf973f60086f4e",  # + the session's versions (completions omit them)
    ("SummaryFold", 11): "9a352ef112628e6f",  # + each batch's signing key
    ("SummaryFold", 12): "bb7ba7782b6a5c83",  # + LIMIT_EXCEEDED among the statuses
    ("SummaryFold", 13): "bb7ba7782b6a5c83",  # + pass_at_k_left_out, pass_rate_stderr
    ("SummaryFold", 14): "bcb966cfbcd07bf1",  # + each attempt's grading spend, a regrade's
    ("SummaryFold", 15): "bcb966cfbcd07bf1",  # + spend_unread in the summary (same state)
    ("SummaryFold", 16): "2c0cab1a0a9f9f7f",  # + the gateway's calls by how each was answered
    ("SummaryFold", 17): "a96778db6b7e0e31",  # + each spend: some of it an estimate; planned
    ("ResumeFold", 2): "488576a01a3d6a5a",
}


def _layout(t: Any) -> Any:
    """A type as the snapshot stores it: struct fields by name and position (an array-like
    struct is a list of its fields in order), containers, scalars, enums' values."""
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        return ["array" if t.__struct_config__.array_like else "object",
                [[f.name, _layout(f.type)] for f in msgspec.structs.fields(t)]]
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return ["enum", sorted(str(m.value) for m in t)]
    origin = get_origin(t)
    if origin in (Union, types.UnionType):
        return ["union", sorted((_layout(a) for a in get_args(t)), key=json.dumps)]
    if origin is not None:
        return [origin.__name__, [_layout(a) for a in get_args(t)]]
    return "Any" if t is Any else t.__name__


def digest(fold_class: type[Fold]) -> str:
    assert fold_class.STATE is not None
    text = json.dumps(_layout(fold_class.STATE), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("fold_class", [SummaryFold, ResumeFold])
def test_each_fold_state_layout_is_pinned_to_its_version(fold_class: type[Fold]) -> None:
    name = fold_class.__name__
    assert LAYOUTS.get((name, fold_class.VERSION)) == digest(fold_class), (
        f"the layout of {name}.state() is not the one version {fold_class.VERSION} "
        "stored: bump the version (projections/_versions.py) and record the new layout")


def test_a_layout_change_changes_the_digest() -> None:
    """The check above can fail: swapping two ints of one struct is a new layout."""

    class Before(Fold):
        STATE = msgspec.defstruct("S", [("input", int), ("output", int)], array_like=True)

    class After(Fold):
        STATE = msgspec.defstruct("S", [("output", int), ("input", int)], array_like=True)

    assert digest(Before) != digest(After)


TS = "2026-01-01T00:00:0%dZ"


def _events() -> list[AnyEvent]:
    """A run with every kind of state: a skipped file, unpriced grading spend, an
    interruption, a resume with drift, a retried key that timed out, an unstarted key."""
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0), key(1), key(2)], ts=TS % 0,
                   experiment_id="exp"),
        TaskSkipped(run_id=RUN, path="bad.yaml", reason="unknown key 'x'", ts=TS % 1),
        started(key(0), ts=TS % 1), usage(key(0), 0.25, input_tokens=10, ts=TS % 1),
        TaskUsage(run_id=RUN, task_key=key(0), cost_usd=None, role="grader", output_tokens=3,
                  ts=TS % 1),
        completed(key(0), FinalStatus.SUCCESS, cost_usd=0.25, weighted_score=1.0,
                  duration_seconds=2.5, ts=TS % 2),
        started(key(1), ts=TS % 2), interrupted(key(1)),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED, ts=TS % 3),
        RunResumed(run_id=RUN, to_run=[key(1)], drift={"lines": ["option timeout: 1 → 2"]},
                   ts=TS % 4),
        started(key(1), attempt=2, ts=TS % 5),
        completed(key(1), FinalStatus.TIMEOUT, attempt=2, cost_complete=False,
                  error_message="timed out after 1s", ts=TS % 6),
    ]
    return [e.model_copy(update={"event_id": f"e{i}", "seq": i + 1})
            for i, e in enumerate(events)]


ENV = {"evalledger": "0.1.0", "exit_code": 0, "platform": "Linux-6.1-x86_64",
       "python": "3.11.9"}
# SummaryFold.state() of _events(), as the code before the structs wrote it (version 2).
SUMMARY_FOLD_2 = {
    "by_model": [["m-1", [10, 0, 0, 0, 0.25, True]], [None, [0, 3, 0, 0, 0.0, False]]],
    "by_role": [["agent", [10, 0, 0, 0, 0.25, True]], ["grader", [0, 3, 0, 0, 0.0, False]]],
    "cost_gap": True,
    "drift": [{"at": "2026-01-01T00:00:04Z", "lines": ["option timeout: 1 → 2"]}],
    "experiment_id": "exp",
    "finished_at": None,
    "keys": [
        ["default/t0/00", "t0", "default", 0, ["smoke"], 1, [10, 3, 0, 0, 0.25, False],
         [1, "SUCCESS", 1.0, 2.5, [0, 0, 0, 0], 0.25, True, None, ENV], False],
        ["default/t1/00", "t1", "default", 0, ["smoke"], 2, [0, 0, 0, 0, 0.0, True],
         [2, "TIMEOUT", 0.0, 0.0, [0, 0, 0, 0], None, False, "timed out after 1s", ENV],
         True],
    ],
    "max_parallel": 1,
    "models": ["m-1"],
    "planned": ["default/t0/00", "default/t1/00", "default/t2/00"],
    "running": [],
    "skipped": [["bad.yaml", "unknown key 'x'", False]],
    "spend": [10, 3, 0, 0, 0.25, False],
    "started_at": "2026-01-01T00:00:00Z",
    "status": "running",
    "unreported": True,
}


# Version 3 added each key's isolation, last in its list ("none" for these events);
# version 4 holds it by attempt ({} for these events); version 5 adds each completion's
# grade_pending (last in its list), each key's verdicts by grade set and its flags by
# attempt (last: {} and {}), the run's grade sets ([]) and the latest complete (None).
SUMMARY_FOLD_5 = {
    **SUMMARY_FOLD_2, "grade_sets": [], "latest_complete": None,
    "keys": [[*k[:7], [*k[7], False], k[8], {}, {}, {}] for k in SUMMARY_FOLD_2["keys"]],
}
# Version 6 adds each completion's failure class, last in its list (its status's for
# these events, recorded before classes: none for SUCCESS, agent for TIMEOUT).
SUMMARY_FOLD_6 = {
    **SUMMARY_FOLD_5,
    "keys": [[*k[:7], [*k[7], cls], *k[8:]]
             for k, cls in zip(SUMMARY_FOLD_5["keys"], (None, "agent"), strict=True)],
}


# Version 10 adds the session's versions (hosts.SESSION_KEYS of the latest run.started /
# run.resumed host: none recorded by these events).
SUMMARY_FOLD_11 = {**SUMMARY_FOLD_6, "session": {}, "signing_keys": []}

# Version 14 adds each key's grading spend by attempt (last: t0's first attempt had an
# unpriced grader's 3 output tokens), and to a finished attempt what a regrade's grading
# of it cost (null: none judges it).
SUMMARY_FOLD_14 = {
    **SUMMARY_FOLD_11,
    "keys": [[*k[:7], None if k[7] is None else [*k[7], None], *k[8:], grading]
             for k, grading in zip(SUMMARY_FOLD_11["keys"],
                                   ({"1": [0, 3, 0, 0, 0.0, False]}, {}), strict=True)],
}


# Version 16 adds the gateway's calls by how each was answered (none in these events).
SUMMARY_FOLD_16 = {**SUMMARY_FOLD_14, "calls": {}}


def _with_estimated(value: Any) -> Any:
    """Version 17 adds to each spend (its counts, cost and completeness) whether some of
    it was an estimate, last (none is, in these events)."""
    if isinstance(value, list):
        if (len(value) == 6 and all(type(v) is int for v in value[:4])
                and type(value[4]) is float and type(value[5]) is bool):
            return [*value, False]
        return [_with_estimated(v) for v in value]
    if isinstance(value, dict):
        return {k: _with_estimated(v) for k, v in value.items()}
    return value


SUMMARY_FOLD_17 = _with_estimated(SUMMARY_FOLD_16)


def test_a_version_17_summary_fold_state_restores_as_it_was_written() -> None:
    events = _events()
    live = fold(SummaryFold(RUN), events)
    assert json.dumps(live.state(), sort_keys=True) == json.dumps(SUMMARY_FOLD_17,
                                                                  sort_keys=True)
    restored = SummaryFold.restore(RUN, json.loads(json.dumps(SUMMARY_FOLD_17)))
    assert json.dumps(restored.state()) == json.dumps(live.state())
    assert render_json(restored.summary()) == render_json(live.summary())


def test_a_row_says_the_isolation_of_the_attempt_it_counts() -> None:
    """A failed attempt under none, then a rerun under bwrap cut off before it ended:
    the row counts the first attempt, and says its isolation (as ``task_results``
    does), through a snapshot too; once the second ends, its own."""
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0)], ts=TS % 0),
        started(key(0), ts=TS % 1), completed(key(0), FinalStatus.FAILURE, ts=TS % 2),
        started(key(0), attempt=2, ts=TS % 3),
        TaskIsolation(run_id=RUN, task_key=key(0), attempt=2, backend="bwrap", ts=TS % 3),
    ]
    live = fold(SummaryFold(RUN), events)
    restored = SummaryFold.restore(RUN, json.loads(json.dumps(live.state())))
    for folded in (live, restored):
        (row,) = folded.summary().tasks
        assert (row.final_status, row.isolation) == (FinalStatus.FAILURE, "none")
    restored.apply(completed(key(0), FinalStatus.SUCCESS, attempt=2, ts=TS % 4))
    (row,) = restored.summary().tasks
    assert (row.final_status, row.isolation) == (FinalStatus.SUCCESS, "bwrap")


def test_a_version_2_resume_fold_state_restores_as_it_was_written() -> None:
    events = _events()
    live = fold(ResumeFold(RUN), events)
    state = live.state()
    assert (state["attempts"], state["latest"], state["planned"]) == (
        [1, 2, 0], ["succeeded", "failed", None], [key(0), key(1), key(2)])
    restored = ResumeFold.restore(RUN, json.loads(json.dumps(state)))
    assert json.dumps(restored.state()) == json.dumps(state)
    assert restored.partition() == live.partition()
    assert restored.partition().to_run == [key(2)]


@pytest.mark.parametrize(("kind", "path", "wrong"), [
    ("summary_fold", ("keys", 0, 4), "smoke"),           # tags: text, not a list
    ("summary_fold", ("keys", 0, 7, 4), [0, 0, 0]),      # three token counts, not four
    ("summary_fold", ("spend", 4), "0.25"),              # cost as text
    ("resume_fold", ("boundary_seq",), "10"),
    ("resume_fold", ("attempts",), [1, 2]),              # not one per planned key
])
def test_a_fold_snapshot_with_wrong_types_is_replayed_past(
        ledger: Ledger, kind: str, path: tuple[Any, ...], wrong: Any) -> None:
    """Restoring checks the stored state against the struct: a damaged or forged one (of
    the right version and shape) is not folded into a crash or a wrong answer later."""
    events = [*_events(), RunFinished(run_id=RUN, status=RunStatus.COMPLETED, ts=TS % 7)]
    ledger.append(events)
    write_snapshot(ledger, RUN)
    (snapshot,) = [e for e in ledger.events(RUN)
                   if isinstance(e, RunSnapshot) and e.kind == kind]
    value: Any = json.loads(json.dumps(snapshot.value))
    inner = value
    for step in path[:-1]:
        inner = inner[step]
    inner[path[-1]] = wrong
    ledger.append([RunSnapshot(run_id=RUN, kind=kind, fold_version=snapshot.fold_version,
                               through_seq=snapshot.through_seq, value=value)])
    truth_summary = fold(SummaryFold(RUN), events)
    truth_resume = fold(ResumeFold(RUN), events)
    rebuilt = load_fold(ledger, SummaryFold, RUN)
    assert render_json(rebuilt.summary()) == render_json(truth_summary.summary())
    resumed = load_fold(ledger, ResumeFold, RUN)
    assert (resumed.partition(), resumed.boundary_seq) == (truth_resume.partition(),
                                                           truth_resume.boundary_seq)


DATA = Path(__file__).parent / "data" / "snapshots_e6c0e56.json"


def _as_then(state: dict, then: dict) -> dict:
    """``state`` without the run options added since ``then`` was written, at their
    defaults (what a run recorded before they existed had)."""
    if "config" not in state:
        return state
    config = {k: v for k, v in state["config"].items()
              if k in then["config"] or v != RunOptions.default(k)}
    return {**state, "config": config}


def test_snapshots_the_code_before_the_structs_wrote_restore_in_a_real_ledger(
        ledger: Ledger) -> None:
    """data/snapshots_e6c0e56.json: the run.snapshot payloads the base code (e6c0e56,
    hand-ordered lists) wrote for _events() + run.finished in a real ledger. Appended to
    a ledger of the same events, each fold restores from its snapshot (no refold), to the
    state the current code folds, and verify finds every snapshot equal to a replay."""
    events = [*_events(), RunFinished(run_id=RUN, status=RunStatus.COMPLETED, ts=TS % 7)]
    ledger.append(events)
    stored = json.loads(DATA.read_text(encoding="utf-8"))["snapshots"]
    ledger.append([RunSnapshot(run_id=RUN, **json.loads(s["payload"])) for s in stored])
    values = {s["kind"]: json.loads(s["payload"])["value"] for s in stored}
    assert values.keys() == {"summary_fold", "resume_fold", "summary", "headline"}
    report = verify(ledger)
    assert report.ok, report.lines()
    truth_summary, truth_resume = fold(SummaryFold(RUN), events), fold(ResumeFold(RUN), events)
    versions = {s["kind"]: json.loads(s["payload"])["fold_version"] for s in stored}
    for cls, truth in ((SummaryFold, truth_summary), (ResumeFold, truth_resume)):
        kind = "summary_fold" if cls is SummaryFold else "resume_fold"
        if versions[kind] != cls.VERSION:
            continue  # a layout since replaced: replayed instead (the loads below)
        restored = restore_fold(cls, RUN, json.dumps(values[kind]))
        assert restored is not None, f"the base code's {kind} snapshot was not used"
        as_json = json.loads(json.dumps(restored.state()))
        assert as_json == json.loads(json.dumps(truth.state()))
        assert _as_then(as_json, values[kind]) == values[kind]
    assert render_json(load_fold(ledger, SummaryFold, RUN).summary()) == render_json(
        truth_summary.summary())
    assert render_json(load_summary(ledger, RUN)) == render_json(truth_summary.summary())
    assert load_headline(ledger, RUN) == truth_summary.headline().model_dump(mode="json")
    assert load_fold(ledger, ResumeFold, RUN).partition() == truth_resume.partition()


def test_one_keys_grades_flags_and_isolation_are_its_own() -> None:
    """Keys share one empty table until one is written to (a fold's memory): each write
    goes to that key's own table, never another key's, nor the shared empty one."""
    from evalledger.ledger import TaskFlagged, TaskGraded
    from evalledger.projections import _summary

    events: list[AnyEvent] = [started(key(0)), started(key(1)), completed(key(0)),
                              completed(key(1))]
    events += [
        TaskIsolation(run_id=RUN, task_key=key(0), attempt=1, backend="bwrap", ts=TS % 3),
        TaskFlagged(run_id=RUN, task_key=key(0), attempt=1, rule="git-history", why="w"),
        TaskGraded(run_id=RUN, task_key=key(0), attempt=1, grades="strict",
                   final_status=FinalStatus.FAILURE, category=Category.FAILED,
                   criteria_from="recorded", criteria_hash="h", workspace_hash="w"),
    ]
    summary = fold(SummaryFold(RUN), events)
    first, second = summary.keys[key(0)], summary.keys[key(1)]
    assert first.flags == {"1": ["git-history"]} and set(first.grades) == {"strict"}
    assert first.isolations == {"1": "bwrap"}
    assert second.flags == second.grades == second.isolations == second.grading == {}
    assert _summary._NONE_YET == {}
    rows = {r.task_key: r for r in summary.summary().tasks}
    assert rows[key(0)].flags == ["git-history"] and rows[key(1)].flags == []


def test_equal_environments_are_one_dict_and_unequal_ones_are_not() -> None:
    """Completions recording the same environment share one dict; another value (1.0
    is not 1 as JSON) keeps its own, and so does one holding a null (msgspec writes a
    NaN so too: not the same value)."""
    events: list[AnyEvent] = [started(key(i)) for i in range(6)]
    events += [completed(key(0), environment_info={"exit_code": 0}),
               completed(key(1), environment_info={"exit_code": 0}),
               completed(key(2), environment_info={"exit_code": 1}),
               completed(key(3), environment_info={"exit_code": 0.0}),
               completed(key(4), environment_info={"exit_code": None}),
               completed(key(5), environment_info={"exit_code": None})]
    done = {k: v.completed for k, v in fold(SummaryFold(RUN), events).keys.items()}
    envs = [done[key(i)].environment_info for i in range(4)]  # type: ignore[union-attr]
    assert envs[0] is envs[1]
    assert envs[2] is not envs[0] and envs[2]["exit_code"] == 1
    assert envs[3] is not envs[0] and isinstance(envs[3]["exit_code"], float)
    assert done[key(4)].environment_info is not done[key(5)].environment_info  # type: ignore[union-attr]
