"""The five audit queries of the README, run from the README, against the projections.

For random runs (tags, models priced or not, statuses, interrupted and repeated
attempts, keys never started) each query's answer equals what the Python side
says: the summary fold, the diff, or, for the spend of interrupted attempts, a
plain model of the events.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
)
from evalledger.projections import RunSummary, SummaryFold, diff_runs, fold
from evalledger.statuses import Category, FinalStatus, RunStatus

from .audits import QUERIES


def test_the_readme_has_the_five_audits() -> None:
    assert sorted(QUERIES) == sorted([
        "cost per model", "failures per tag", "slowest tasks",
        "regressions between two runs", "spend of interrupted attempts"])


KEYS = [f"default/t{i}/00" for i in range(6)]
TAGS = ["api", "ui", "slow"]
MODELS = ["claude-sonnet-4-5", "mystery-model", None]


@st.composite
def plans(draw: st.DrawFn) -> list[Any]:
    """What happens to each key: tags, then per attempt its usage reports and outcome
    (plain data: event ids are made outside the strategy, which must not use random)."""
    plan = []
    for _ in KEYS:
        tags = draw(st.lists(st.sampled_from(TAGS), unique=True, max_size=2))
        attempts = []
        for _ in range(draw(st.integers(0, 2))):
            usage = []
            for _ in range(draw(st.integers(0, 2))):
                model = draw(st.sampled_from(MODELS))
                cost = None if model == "mystery-model" else draw(
                    st.sampled_from([0.0, 0.25, 1.5, 0.125]))
                usage.append((model, cost, draw(st.integers(0, 500)), draw(st.integers(0, 50)),
                              draw(st.integers(0, 9))))
            outcome = draw(st.sampled_from([*FinalStatus, "interrupted", None]))
            attempts.append((usage, outcome, draw(st.sampled_from([0.5, 1.0, 2.5, 10.0]))))
        plan.append((tags, attempts))
    return plan


def events_of(run_id: str, plan: list[Any]) -> list[AnyEvent]:
    events: list[AnyEvent] = [RunStarted(run_id=run_id, planned=KEYS)]
    for key, (tags, attempts) in zip(KEYS, plan, strict=True):
        for attempt, (usage, outcome, duration) in enumerate(attempts, start=1):
            events.append(TaskStarted(run_id=run_id, task_key=key, task_id=key.split("/")[1],
                                      attempt=attempt, tags=tags))
            events += [TaskUsage(run_id=run_id, task_key=key, model=model, cost_usd=cost,
                                 input_tokens=i, output_tokens=o, cache_read_tokens=c)
                       for model, cost, i, o, c in usage]
            if isinstance(outcome, FinalStatus):
                events.append(TaskCompleted(run_id=run_id, task_key=key, attempt=attempt,
                                            final_status=outcome, category=outcome.category,
                                            duration_seconds=duration))
            elif outcome == "interrupted":
                events.append(TaskInterrupted(run_id=run_id, task_key=key))
    events.append(RunFinished(run_id=run_id, status=RunStatus.COMPLETED))
    return events


def summary_of(ledger: Ledger, run_id: str) -> RunSummary:
    return fold(SummaryFold(run_id), ledger.events(run_id, types=SummaryFold.TYPES)).summary()


def query(ledger: Ledger, name: str, **params: str) -> list[tuple[Any, ...]]:
    return ledger.query(QUERIES[name], params)[1]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan_a=plans(), plan_b=plans())
def test_each_audit_equals_the_projections(
    tmp_path_factory: pytest.TempPathFactory, plan_a: list[Any], plan_b: list[Any]
) -> None:
    a, b = events_of("run-a", plan_a), events_of("run-b", plan_b)
    path = tmp_path_factory.mktemp("audit") / "ledger.db"
    with Ledger(path) as ledger:
        ledger.append(a)
        ledger.append(b)
        summaries = {r: summary_of(ledger, r) for r in ("run-a", "run-b")}
        for run_id, summary in summaries.items():
            _cost_per_model(ledger, run_id, summary)
            _failures_per_tag(ledger, run_id, summary)
            _slowest(ledger, run_id, summary)
            _interrupted_spend(ledger, run_id, a if run_id == "run-a" else b)
        regressions = query(ledger, "regressions between two runs", a="run-a", b="run-b")
        expected = diff_runs(summaries["run-a"], summaries["run-b"])
        assert [(key, before, after) for key, before, after in regressions] == [
            (t.task_key, t.before, t.after) for t in expected.tasks if t.change == "regression"]


def _cost_per_model(ledger: Ledger, run_id: str, summary: RunSummary) -> None:
    rows = query(ledger, "cost per model", run=run_id)
    by_model = {m.model: m for m in summary.usage_by_model}
    # SQLite orders NULL (usage that named no model) first.
    assert sorted(by_model, key=lambda m: (m is not None, m or "")) == [r[0] for r in rows]
    for model, cost, unpriced, tokens in rows:
        usage = by_model[model]
        assert (cost or 0.0) == pytest.approx(usage.cost_usd)
        assert (unpriced > 0) == (not usage.cost_complete)
        assert tokens == usage.tokens.total


def _failures_per_tag(ledger: Ledger, run_id: str, summary: RunSummary) -> None:
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in summary.tasks:
        if row.category is None:
            continue
        for tag in row.tags:
            expected[tag][0] += row.category == Category.FAILED
            expected[tag][1] += row.category == Category.ERROR
            expected[tag][2] += 1
    assert query(ledger, "failures per tag", run=run_id) == [
        (tag, *counts) for tag, counts in sorted(expected.items())]


def _slowest(ledger: Ledger, run_id: str, summary: RunSummary) -> None:
    done = [r for r in summary.tasks if r.final_status is not None]
    done.sort(key=lambda r: (-(r.duration_seconds or 0.0), r.task_key))
    assert query(ledger, "slowest tasks", run=run_id) == [
        (r.task_key, r.duration_seconds, r.final_status) for r in done[:10]]


def _interrupted_spend(ledger: Ledger, run_id: str, events: list[AnyEvent]) -> None:
    """A plain model: usage belongs to the key's latest start before it; an attempt
    with no completion spent what its usage says."""
    current: dict[str, int] = {}
    spend: dict[tuple[str, int], list[Any]] = {}
    finished: set[tuple[str, int]] = set()
    for event in events:
        if isinstance(event, TaskStarted):
            current[event.task_key] = event.attempt
        elif isinstance(event, TaskUsage):
            tally = spend.setdefault((event.task_key, current[event.task_key]), [None, 0])
            if event.cost_usd is not None:
                tally[0] = (tally[0] or 0.0) + event.cost_usd
            tally[1] += event.tokens.total
        elif isinstance(event, TaskCompleted):
            finished.add((event.task_key, event.attempt))
    expected = [(key, attempt, cost, tokens) for (key, attempt), (cost, tokens)
                in sorted(spend.items()) if (key, attempt) not in finished]
    rows = query(ledger, "spend of interrupted attempts", run=run_id)
    assert [(k, n, t) for k, n, _, t in rows] == [(k, n, t) for k, n, _, t in expected]
    for (_, _, got, _), (_, _, want, _) in zip(rows, expected, strict=True):
        assert got == pytest.approx(want)
