"""Projections against an independent model, on generated whole-run event streams.

A Hypothesis strategy (``scenarios.py``) builds what a real ledger holds for one run (and, half of
the time, a second run interleaved with it in the same file): ``run.started``
with planned keys ``default/t{i}/00``; sessions of task attempts (``task.started``
with attempt 1, 2, ..., ``task.usage`` deltas priced or not, output lines, then a
``task.completed`` (now and then recorded twice), a ``task.interrupted`` or
nothing at all, as after a crash);
``run.finished`` or not at the end of a session, ``run.resumed`` at the start of the
next; ``task.skipped`` files and events of types from the future sprinkled in.

While it draws, the strategy records its decisions in a plain model (key ->
list of attempts, the costs, the run-level events); the expectations below are
computed from that model, never by calling the projection under test. Then:

- the resume partition splits the planned keys exactly (with and without
  ``retry_errors``), and ``attempts`` is the highest attempt started;
- the summary's buckets, tokens, money and statuses are those of the model;
- the summary folded live from the appended objects renders byte-identical to
  the one rebuilt from the file by a new read-only ``Ledger``;
- the SQL views ``task_results``, ``task_attempts`` and ``runs`` say what the
  Python projections say.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunGraded,
    TaskGraded,
    TaskSkipped,
    TaskStarted,
)
from evalledger.projections import ResumeFold, RunSummary, SummaryFold, fold
from evalledger.render import isolation_counts, render_json
from evalledger.statuses import Category, FinalStatus

from .scenarios import (
    KEYS,
    MAX_ATTEMPTS,
    SETTINGS,
    TOKEN_KINDS,
    Scenario,
    envelope,
    scenarios,
)

# -- helpers ---------------------------------------------------------------------------------


@contextmanager
def stored(scenario: Scenario) -> Iterator[Path]:
    """A fresh ledger file holding the scenario's events, appended in its batches."""
    with tempfile.TemporaryDirectory(prefix="evalledger-props-") as folder:
        path = Path(folder) / "ledger.db"
        with Ledger(path) as ledger:
            at = 0
            for size in scenario.batches:
                ledger.append(scenario.events[at : at + size])
                at += size
            assert ledger.count() == len(scenario.events)
        yield path


def offline_summary(path: Path, run_id: str) -> RunSummary:
    with Ledger(path, read_only=True) as reader:
        return fold(SummaryFold(run_id), reader.events(run_id, types=SummaryFold.TYPES)).summary()


def live_summary(events: list[AnyEvent], run_id: str) -> RunSummary:
    live = SummaryFold(run_id)
    for event in events:
        live.apply(event)
    return live.summary()


# -- properties ------------------------------------------------------------------------------


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@SETTINGS
@given(scenarios())
def test_resume_partition_splits_the_planned_keys_exactly(scenario: Scenario) -> None:
    with stored(scenario) as path, Ledger(path, read_only=True) as reader:
        for model in scenario.runs:
            resume = fold(
                ResumeFold(model.run_id), reader.events(model.run_id, types=ResumeFold.TYPES)
            )
            assert resume.found
            for retry_errors in (False, True):
                part = resume.partition(retry_errors=retry_errors)
                assert part.run_id == model.run_id
                # Each key exactly once, on exactly one side, and nothing else.
                both = part.kept + part.to_run
                assert len(both) == len(set(both))
                assert set(both) == model.planned
                expected_kept = set()
                for key in model.planned:
                    latest = model.latest(key)
                    if latest is None or not isinstance(latest.outcome, FinalStatus):
                        continue  # never started, interrupted, or cut off by a crash
                    if retry_errors and latest.outcome.category is Category.ERROR:
                        continue
                    expected_kept.add(key)
                assert set(part.kept) == expected_kept
                assert set(part.to_run) == model.planned - expected_kept
                assert part.attempts == {
                    key: max(a.number for a in tries) for key, tries in model.attempts.items()
                }
            # The same fold fed live from the appended objects agrees.
            live = fold(ResumeFold(model.run_id), scenario.events)
            assert live.partition() == resume.partition()
            assert live.partition(retry_errors=True) == resume.partition(retry_errors=True)


@SETTINGS
@given(scenarios())
def test_summary_counts_tokens_and_money_match_the_model(scenario: Scenario) -> None:
    with stored(scenario) as path:
        for model in scenario.runs:
            summary = offline_summary(path, model.run_id)
            finals = model.finals()
            statuses = [a.outcome for a in finals.values()]
            assert isinstance(summary, RunSummary)
            assert summary.tasks_run == len(finals)
            assert summary.tasks_succeeded + summary.tasks_failed + summary.tasks_error + (
                summary.tasks_ungraded) == summary.tasks_run
            for category, count in (
                (Category.SUCCEEDED, summary.tasks_succeeded),
                (Category.FAILED, summary.tasks_failed),
                (Category.ERROR, summary.tasks_error),
                (Category.UNGRADED, summary.tasks_ungraded),
            ):
                assert count == sum(1 for s in statuses if s.category is category)
            assert summary.tasks_token_budget_exceeded == statuses.count(
                FinalStatus.TOKEN_BUDGET_EXCEEDED
            )
            assert summary.tasks_cost_budget_exceeded == statuses.count(
                FinalStatus.COST_BUDGET_EXCEEDED
            )
            assert summary.tasks_planned == len(model.planned)
            assert summary.tasks_unfinished == len(model.planned) - len(finals)
            # Skipped files: all of them, in the order they were appended.
            skipped = [(s.path, s.reason) for s in summary.skipped_tasks]
            assert sorted(skipped) == sorted(model.skipped)
            assert skipped == [
                (e.path, e.reason) for e in model.events if isinstance(e, TaskSkipped)
            ]

            # Money and tokens: every usage of every attempt, unpriced ones making floors.
            all_costs = [c for _, a in model.all_usage() for c in a.costs]
            priced = [c for c in all_costs if c is not None]
            assert summary.total_cost_usd == pytest.approx(sum(priced), abs=1e-9)
            gaps = any(a.gap for _, a in model.all_usage())
            assert summary.cost_complete is (None not in all_costs and not gaps)
            assert summary.tasks_cost_incomplete == sum(
                1 for tries in model.attempts.values()
                if any(None in a.costs or a.gap for a in tries)
            )
            # Apart by role, agent first; together the whole.
            # Spend never reported (an attempt said its cost was incomplete though every
            # usage of its key so far had a price) is the agent's: listed, as a floor.
            unreported = any(
                a.gap and all(None not in b.costs for b in tries if b.number <= a.number)
                for tries in model.attempts.values() for a in tries)
            roles = sorted({r for _, a in model.all_usage() for r in a.roles}
                           | ({"agent"} if unreported else set()),
                           key=lambda r: (r != "agent", r))
            assert [r.role for r in summary.usage_by_role] == roles
            for part in summary.usage_by_role:
                mine = [c for _, a in model.all_usage()
                        for c, r in zip(a.costs, a.roles, strict=True) if r == part.role]
                assert part.cost_usd == pytest.approx(sum(c for c in mine if c is not None),
                                                      abs=1e-9)
                assert part.cost_complete is (
                    None not in mine and not (part.role == "agent" and unreported))
            for kind in TOKEN_KINDS:
                assert getattr(summary.tokens, kind) == sum(
                    a.tokens[kind] for _, a in model.all_usage()
                )

            # Per-task rows: one per planned key; the status of its latest final attempt
            # (none, with no attempts, for a key that never started).
            assert [r.task_key for r in summary.tasks] == sorted(model.planned)
            for row in summary.tasks:
                final = finals.get(row.task_key)
                tries = model.attempts.get(row.task_key, [])
                assert row.attempts == max((a.number for a in tries), default=0)
                if final is None:
                    assert row.final_status is None and row.category is None
                else:
                    assert row.final_status == final.outcome
                    assert row.category == final.outcome.category
                    assert row.cost_usd == final.completed_cost

            # The isolation counts made with the summary are its rows' (a page reads them).
            assert summary.tasks_by_isolation == isolation_counts(summary.tasks)

            status, finished_at = model.expected_status()
            assert summary.status == status
            assert summary.finished_at == finished_at
            assert summary.started_at == model.lifecycle[0].ts
            assert summary.max_parallel == model.max_parallel


@SETTINGS
@given(scenarios())
def test_live_summary_equals_offline_rebuild_byte_for_byte(scenario: Scenario) -> None:
    with stored(scenario) as path:
        for model in scenario.runs:
            live = render_json(live_summary(scenario.events, model.run_id))
            offline = render_json(offline_summary(path, model.run_id))
            assert live == offline
            # Fed everything (no type filter, other runs included) it is still the same.
            with Ledger(path, read_only=True) as reader:
                everything = fold(SummaryFold(model.run_id), reader.events()).summary()
            assert render_json(everything) == offline


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == pytest.approx(b, rel=1e-12, abs=1e-12)


@SETTINGS
@given(scenarios())
def test_sql_views_equal_the_python_projections(scenario: Scenario) -> None:
    with stored(scenario) as path:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            run_rows = conn.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()
            assert sorted(r[0] for r in run_rows) == sorted(m.run_id for m in scenario.runs)
            for model in scenario.runs:
                rid = model.run_id
                summary = offline_summary(path, rid)
                finals = model.finals()

                results = conn.execute(
                    "SELECT task_key, final_status, category, attempt, cost_usd, isolation "
                    "FROM task_results WHERE run_id = ? ORDER BY task_key",
                    [rid],
                ).fetchall()
                assert [r[0] for r in results] == sorted(finals)
                by_key = {r.task_key: r for r in summary.tasks if r.final_status is not None}
                assert sorted(by_key) == sorted(finals)
                for key, status, category, attempt, cost, isolation in results:
                    row = by_key[key]
                    assert isolation == row.isolation
                    assert status == row.final_status.value
                    assert category == row.category.value
                    assert attempt == finals[key].number
                    assert _close(cost, row.cost_usd), (key, cost, row.cost_usd)

                (n_attempts,) = conn.execute(
                    "SELECT count(*) FROM task_attempts WHERE run_id = ?", [rid]
                ).fetchone()
                assert n_attempts == model.n_started

                run = conn.execute(
                    "SELECT status, started_at, finished_at, tasks_planned, tasks_succeeded, "
                    "tasks_failed, tasks_error, cost_usd, experiment_id, cost_complete, "
                    "grader_cost_usd FROM runs WHERE run_id = ?",
                    [rid],
                ).fetchall()
                assert len(run) == 1
                (status, started_at, finished_at, planned, succeeded, failed, error, cost,
                 experiment_id, complete, grader) = run[0]
                assert bool(complete) is summary.cost_complete
                assert grader == pytest.approx(summary.cost_by_role.get("grader", 0.0),
                                               abs=1e-9)
                by_role = dict(conn.execute(
                    "SELECT role, COALESCE(sum(cost_usd), 0.0) FROM usage WHERE run_id = ? "
                    "GROUP BY role", [rid]).fetchall())
                for role in by_role.keys() | summary.cost_by_role.keys():
                    assert by_role.get(role, 0.0) == pytest.approx(
                        summary.cost_by_role.get(role, 0.0), abs=1e-9)
                assert status == summary.status
                assert started_at == summary.started_at
                assert finished_at == summary.finished_at
                assert planned == summary.tasks_planned
                assert (succeeded, failed, error) == (
                    summary.tasks_succeeded, summary.tasks_failed, summary.tasks_error
                )
                assert cost == pytest.approx(summary.total_cost_usd, abs=1e-9)
                assert experiment_id == summary.experiment_id
                # The pass rate and its 95% Wilson interval, in SQL as in run.json.
                [(graded, rate, low, high)] = conn.execute(
                    "SELECT graded, pass_rate, pass_rate_low, pass_rate_high "
                    "FROM run_pass_rates WHERE run_id = ?", [rid]).fetchall()
                interval = summary.pass_rate_interval
                assert graded == summary.graded
                assert (rate or 0.0) == pytest.approx(summary.pass_rate, abs=1e-9)
                assert (low, high) == pytest.approx((interval.low, interval.high), abs=2e-6)
                by_model = conn.execute(
                    "SELECT sum(succeeded), sum(graded) FROM model_pass_rates WHERE run_id = ?",
                    [rid]).fetchone()
                assert tuple(n or 0 for n in by_model) == (summary.tasks_succeeded, graded)
        finally:
            conn.close()


# -- grade sets ------------------------------------------------------------------------------

GRADE_SETS = ("strict", "lenient", "judge")
_GRADES = [s for s in FinalStatus if s not in (FinalStatus.BUILD_FAILED, FinalStatus.ERROR)]


@st.composite
def graded_scenarios(draw: Any) -> tuple[Scenario, list[AnyEvent]]:
    """A scenario with regrades of run-a put somewhere in it: each a few ``task.graded``
    (of keys it started, any attempt number: a stale one is drawn too) and, or not (cut
    off), its ``run.graded``, complete or not."""
    scenario = draw(scenarios())
    run = scenario.runs[0]
    grading: list[AnyEvent] = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(GRADE_SETS))
        for key in draw(st.lists(st.sampled_from(sorted(run.attempts) or KEYS), unique=True,
                                 max_size=4)):
            status = draw(st.sampled_from(_GRADES))
            grading.append(TaskGraded(
                **envelope(run.run_id), task_key=key, attempt=draw(st.integers(1, MAX_ATTEMPTS)),
                grades=name, final_status=status, category=status.category,
                criteria_from="recorded", criteria_hash="h", workspace_hash="w",
                weighted_score=draw(st.sampled_from([0.0, 0.5, 1.0])),
                error_message=None if status is FinalStatus.SUCCESS else "graded so"))
        if draw(st.booleans()):
            grading.append(RunGraded(**envelope(run.run_id), grades=name, graded=1,
                                     complete=draw(st.booleans()), criteria_from="recorded"))
    # Anywhere after every start of the keys it grades (a regrade grades what ran; its
    # attempt numbers, drawn, may name an older or a later attempt), among the other
    # keys', resumes' and other runs' events.
    graded_keys = {e.task_key for e in grading if isinstance(e, TaskGraded)}
    first = [i + 1 for i, e in enumerate(scenario.events)
             if isinstance(e, TaskStarted) and e.run_id == run.run_id
             and e.task_key in graded_keys]
    at = draw(st.integers(max(first, default=0), len(scenario.events)))
    events = [*scenario.events[:at], *grading, *scenario.events[at:]]
    return Scenario(runs=scenario.runs, events=events, batches=[len(events)]), grading


def expected_verdicts(original: SummaryFold, grading: list[AnyEvent]
                      ) -> tuple[str, dict[str, dict[str, FinalStatus | None]]]:
    """The model: each grade set's status per key (its latest grade of the key's counted
    attempt, else the run's own), and the default set (the latest complete one)."""
    counted = {k: key.completed.attempt for k, key in original.keys.items() if key.completed}
    own = {k: key.completed.final_status if key.completed else None
           for k, key in original.keys.items()}
    graded: dict[str, dict[str, tuple[int, FinalStatus]]] = {}
    order: dict[str, bool] = {}
    default = "original"
    for event in grading:
        if isinstance(event, TaskGraded):
            graded.setdefault(event.grades, {})[event.task_key] = (event.attempt,
                                                                   event.final_status)
        elif isinstance(event, RunGraded):
            order[event.grades] = order.pop(event.grades, False) or event.complete
            default = event.grades if event.complete else default
    sets: dict[str, dict[str, FinalStatus | None]] = {"original": own}
    for name in order:
        sets[name] = {
            k: graded[name][k][1] if k in graded.get(name, {})
            and graded[name][k][0] == counted.get(k) else status
            for k, status in own.items()}
    return default, sets


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@SETTINGS
@given(graded_scenarios(), st.integers(0, 10**6))
def test_a_grade_sets_summary_is_the_model_live_replayed_and_through_a_snapshot(
    drawn: tuple[Scenario, list[AnyEvent]], cut: int,
) -> None:
    from evalledger.app._repository import load_fold
    from evalledger.projections._snapshots import snapshot_events

    scenario, grading = drawn
    run_id = scenario.runs[0].run_id
    ungraded = [e for e in scenario.events if e not in grading]
    default, sets = expected_verdicts(fold(SummaryFold(run_id), ungraded), grading)
    live = fold(SummaryFold(run_id), scenario.events)
    with stored(scenario) as path, Ledger(path) as ledger:
        # A snapshot through some seq of the run (its folds as they were there).
        seqs = [r.seq for r in ledger.rows(run_id)]
        through = seqs[cut % len(seqs)]
        prefix = [e for e in ledger.events(run_id) if (e.seq or 0) <= through]
        ledger.append(snapshot_events(run_id, through, fold(SummaryFold(run_id), prefix),
                                      fold(ResumeFold(run_id), prefix)))
        replayed = fold(SummaryFold(run_id), ledger.events(run_id))
        restored = load_fold(ledger, SummaryFold, run_id)
    assert live.default_grades() == default
    for grades in (*sets, None):
        summaries = [f.summary(grades) for f in (live, replayed, restored)]
        assert render_json(summaries[0]) == render_json(summaries[1]) == render_json(summaries[2])
        expected = sets[grades or default]
        assert {r.task_key: r.final_status for r in summaries[0].tasks
                if r.task_key in expected} == expected
        assert summaries[0].grades == (grades or default)


@given(graded_scenarios())
def test_a_summary_and_a_fold_state_written_in_pieces_are_them_written_whole(
    drawn: tuple[Scenario, list[AnyEvent]],
) -> None:
    """What verify compares a stored snapshot with, a key at a time, is byte for byte
    the canonical JSON of the value a snapshot stores (as every grade set judges it)."""
    from evalledger.projections._snapshots import canonical

    scenario, _ = drawn
    for run in scenario.runs:
        summary = fold(SummaryFold(run.run_id), scenario.events)
        assert b"".join(summary.state_json()) == canonical(summary.state())
        for grades in (None, *summary.grade_sets):
            whole = summary.summary(grades).model_dump(mode="json", exclude={"anchor"})
            pieces = summary.summary_json(grades, exclude=frozenset({"anchor"}))
            assert b"".join(pieces) == canonical(whole)
