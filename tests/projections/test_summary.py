"""The run summary (SPEC §7), its reports, and the SQL audit views (SPEC §6), by example.

Covers version consensus and drift across ``environment_info``, the budget
sub-counts, unpriced usage (totals become floors, never a booked zero), run.json as
written, the status of a resumed run, and the schema-2 views and indexes (including a
real schema-1 file migrated on open). What ``run.md`` says: tests/render.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalledger.app._reports import write_reports
from evalledger.ledger import (
    SCHEMA_VERSION,
    AnyEvent,
    Ledger,
    OpaqueEvent,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskEmitted,
    TaskInterrupted,
    TaskOutput,
    TaskUsage,
    TokenCounts,
    verify,
)
from evalledger.projections import RunSummary, SummaryFold, fold
from evalledger.projections._intervals import clustered_stderr, normal_interval, wilson
from evalledger.render import render_json, render_markdown
from evalledger.render._cells import model_table
from evalledger.statuses import Category, FinalStatus, RunStatus

from .builders import (
    ENV,
    RUN,
    completed,
    key,
    old_ledger,
    rebuilt,
    started,
    summarize,
    usage,
)

# -- counting --------------------------------------------------------------------------------


def test_buckets_count_each_key_by_its_latest_final_attempt() -> None:
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(i) for i in range(5)], max_parallel=2),
        started(key(0)), completed(key(0), FinalStatus.SUCCESS, weighted_score=1.0,
                                   duration_seconds=2.5),
        started(key(1)), completed(key(1), FinalStatus.ERROR, error_message="runner broke"),
        started(key(2)), completed(key(2), FinalStatus.TIMEOUT),
        started(key(3)), interrupted := TaskInterrupted(run_id=RUN, task_key=key(3)),
        # key(4) never started
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
        RunResumed(run_id=RUN, to_run=[key(1), key(3), key(4)], max_parallel=4),
        started(key(1), attempt=2), completed(key(1), FinalStatus.SUCCESS, attempt=2),
        started(key(3), attempt=2),  # crashed again
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ]
    assert interrupted.reason == "interrupted"
    s = summarize(events)
    assert (s.tasks_planned, s.tasks_run, s.tasks_unfinished) == (5, 3, 2)
    assert (s.tasks_succeeded, s.tasks_failed, s.tasks_error) == (2, 1, 0)
    assert s.pass_rate == pytest.approx(2 / 3, abs=1e-6)
    assert s.max_parallel == 4
    rows = {r.task_key: r for r in s.tasks}
    # Every planned key has a row; key(4), never started, one with no attempts.
    assert sorted(rows) == [key(0), key(1), key(2), key(3), key(4)]
    assert (rows[key(4)].attempts, rows[key(4)].final_status) == (0, None)
    assert (rows[key(4)].task_id, rows[key(4)].variant_id) == ("t4", "default")
    assert rows[key(1)].final_status is FinalStatus.SUCCESS and rows[key(1)].attempts == 2
    assert rows[key(1)].error_message is None
    assert rows[key(3)].final_status is None and rows[key(3)].attempts == 2
    assert rows[key(3)].category is None and rows[key(3)].weighted_score is None
    assert rows[key(0)].duration_seconds == 2.5 and rows[key(0)].weighted_score == 1.0
    assert rows[key(0)].tags == ["smoke"] and rows[key(0)].task_id == "t0"


def test_budget_sub_counts_are_part_of_failed() -> None:
    statuses = [
        FinalStatus.TOKEN_BUDGET_EXCEEDED, FinalStatus.TOKEN_BUDGET_EXCEEDED,
        FinalStatus.COST_BUDGET_EXCEEDED, FinalStatus.TIMEOUT, FinalStatus.FAILURE,
        FinalStatus.SUCCESS, FinalStatus.BUILD_FAILED,
    ]
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(i) for i in range(8)])]
    for i, status in enumerate(statuses):
        events += [started(key(i)), completed(key(i), status)]
    # key(7) went over its token budget, then succeeded on a resume: not a budget case any more.
    events += [
        started(key(7)), completed(key(7), FinalStatus.TOKEN_BUDGET_EXCEEDED),
        started(key(7), attempt=2), completed(key(7), FinalStatus.SUCCESS, attempt=2),
        RunFinished(run_id=RUN, status=RunStatus.BUDGET_STOPPED),
    ]
    s = summarize(events)
    assert s.status == "budget_stopped"
    assert (s.tasks_run, s.tasks_succeeded, s.tasks_failed, s.tasks_error) == (8, 2, 5, 1)
    assert s.tasks_token_budget_exceeded == 2
    assert s.tasks_cost_budget_exceeded == 1
    # The ERROR is an infrastructure failure: 2 of 7 graded, Wilson's 95% interval.
    assert s.tasks_infra == 1 and s.graded == 7
    assert "| 8 | 8 | 2 | 5 | 2 | 1 | 1 | 0 | 0 | 28.6% [8.2%, 64.1%] |" in render_markdown(s)
    counted = summarize(events, count_infra=True)
    assert (counted.pass_rate, counted.graded, counted.tasks_infra) == (0.25, 8, 1)


def test_buckets_that_do_not_add_up_are_refused() -> None:
    s = summarize([RunStarted(run_id=RUN, planned=[key(0)]), started(key(0)),
                   completed(key(0), FinalStatus.FAILURE)])
    assert (s.tasks_run, s.tasks_failed) == (1, 1)
    data = json.loads(render_json(s))
    with pytest.raises(ValidationError, match="do not add up"):
        RunSummary.model_validate({**data, "tasks_run": 2})
    with pytest.raises(ValidationError, match="do not add up"):
        RunSummary.model_validate({**data, "tasks_error": 1})


def test_an_empty_run() -> None:
    s = summarize([RunStarted(run_id=RUN)])
    assert s.status == "running"
    assert (s.tasks_planned, s.tasks_run, s.pass_rate) == (0, 0, 0.0)
    assert s.total_cost_usd == 0.0 and s.cost_complete
    assert s.finished_at is None and s.duration_seconds is None
    assert s.tasks == [] and s.models == []


def test_a_run_the_ledger_never_saw() -> None:
    s = summarize([RunStarted(run_id="other", planned=[key(0)])])
    assert s.run_id == RUN and s.started_at is None and s.tasks_planned == 0


def test_future_event_types_and_stream_lines_change_nothing(ledger: Ledger) -> None:
    plain: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0)]),
        started(key(0)), usage(key(0), 0.25, input_tokens=10),
        completed(key(0), FinalStatus.SUCCESS),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ]
    noisy = [
        plain[0],
        OpaqueEvent(run_id=RUN, type="future.thing", payload={"tasks_run": 99}),
        plain[1],
        OpaqueEvent(run_id=RUN, task_key=key(0), type="task.future", payload={"cost_usd": 5}),
        TaskOutput(run_id=RUN, task_key=key(0), line="working", n=1),
        TaskEmitted(run_id=RUN, task_key=key(0), data={"type": "usage", "cost_usd": 9}, n=2),
        *plain[2:],
    ]
    ledger.append(noisy)
    assert render_json(summarize(noisy)) == render_json(summarize(plain))
    assert render_json(rebuilt(ledger)) == render_json(summarize(plain))
    # Fed every stored event, unfiltered, it still skips what it does not fold.
    assert render_json(fold(SummaryFold(RUN), ledger.events()).summary()) == render_json(
        summarize(plain)
    )


# -- versions --------------------------------------------------------------------------------


def test_version_consensus_and_drift_across_environment_info() -> None:
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(i) for i in range(5)]),
        started(key(0)), completed(key(0), FinalStatus.SUCCESS),
        started(key(1)), completed(key(1), FinalStatus.FAILURE,
                                   environment_info={**ENV, "exit_code": 1}),
        started(key(2)), completed(key(2), FinalStatus.ERROR,
                                   environment_info={**ENV, "python": "3.12.4",
                                                     "exit_code": None}),
        # Only the latest final attempt's environment counts.
        started(key(3)), completed(key(3), FinalStatus.FAILURE,
                                   environment_info={**ENV, "python": "3.10.0"}),
        started(key(3), attempt=2), completed(key(3), FinalStatus.SUCCESS, attempt=2),
        # Unfinished keys have no environment to count.
        started(key(4)),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ]
    s = summarize(events)
    assert s.version_consensus == {"evalledger": "0.1.0", "platform": "Linux-6.1-x86_64"}
    assert s.version_drift == {"python": {"3.11.9": 3, "3.12.4": 1}}
    # exit_code is per task by nature: neither a consensus nor a drift.
    assert "exit_code" not in s.version_consensus and "exit_code" not in s.version_drift
    md = render_markdown(s)
    assert "- evalledger: 0.1.0" in md
    assert "- platform: Linux-6.1-x86_64" in md
    assert "- **python differs across tasks**: 3.11.9 (3), 3.12.4 (1)" in md


def session_run() -> list[AnyEvent]:
    """Completions that leave their versions to the session that ran them (from 0.2),
    one that ran elsewhere (Ray: its own), an imported one, and a resume that upgraded."""
    host = {"hostname": "h", "pid": 1, **ENV}
    done = {"environment_info": {"exit_code": 0}}
    return [
        RunStarted(run_id=RUN, planned=[key(i) for i in range(4)], host=host),
        started(key(0)), completed(key(0), **done),
        started(key(1)), completed(key(1), environment_info={
            **ENV, "python": "3.12.4", "exit_code": 0}),
        started(key(2)), completed(key(2), imported={}, **done),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
        RunResumed(run_id=RUN, to_run=[key(3)], host={**host, "evalledger": "0.2.0"}),
        started(key(3)), completed(key(3), **done),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ]


def test_a_completion_takes_what_it_left_out_from_its_session() -> None:
    s = summarize(session_run())
    assert s.version_consensus == {"platform": ENV["platform"]}
    assert s.version_drift == {"evalledger": {"0.1.0": 2, "0.2.0": 1},
                               "python": {"3.11.9": 2, "3.12.4": 1}}


def test_a_fold_restored_mid_session_still_knows_its_session() -> None:
    events = session_run()
    live = fold(SummaryFold(RUN), events[:3])
    restored = SummaryFold.restore_json(RUN, json.dumps(live.state()))
    assert render_json(fold(restored, events[3:]).summary()) == render_json(summarize(events))


def test_what_a_page_reads_of_each_completion_is_what_the_fold_read(tmp_path: Path) -> None:
    from evalledger.ledger._page_queries import completion_environments

    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append(session_run())
        found = completion_environments(ledger, RUN)
    assert [(k, info.get("evalledger"), info.get("python")) for k, _, info in found] == [
        (key(0), "0.1.0", "3.11.9"), (key(1), "0.1.0", "3.12.4"), (key(2), None, None),
        (key(3), "0.2.0", "3.11.9")]


def test_all_tasks_agreeing_means_no_version_drift() -> None:
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0), key(1)])]
    for i in range(2):
        events += [started(key(i)), completed(key(i), FinalStatus.SUCCESS)]
    s = summarize(events)
    assert s.version_consensus == ENV
    assert s.version_drift == {}
    assert "differs across tasks" not in render_markdown(s)


# -- money -----------------------------------------------------------------------------------


def _money_run() -> list[AnyEvent]:
    return [
        RunStarted(run_id=RUN, planned=[key(i) for i in range(4)]),
        started(key(0)),
        usage(key(0), 0.1, input_tokens=100, output_tokens=10),
        usage(key(0), 0.2, input_tokens=50, cache_read_tokens=7),
        completed(key(0), FinalStatus.SUCCESS, cost_usd=0.3,
                  tokens=TokenCounts(input_tokens=150, output_tokens=10, cache_read_tokens=7)),
        started(key(1)),
        usage(key(1), None, input_tokens=1000, cache_write_tokens=3),
        usage(key(1), 0.05, output_tokens=20),
        completed(key(1), FinalStatus.FAILURE, cost_usd=0.05, cost_complete=False),
        # An interrupted attempt still spent money (and left a price hole).
        started(key(2)),
        usage(key(2), None, input_tokens=5),
        TaskInterrupted(run_id=RUN, task_key=key(2)),
        started(key(3)),
        completed(key(3), FinalStatus.SUCCESS, cost_usd=0.0),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ]


def test_unpriced_usage_makes_the_totals_floors() -> None:
    s = summarize(_money_run())
    assert s.total_cost_usd == pytest.approx(0.35)
    assert s.cost_complete is False
    assert s.tasks_cost_incomplete == 2  # key(1) and key(2): keys, not usage events
    assert s.tokens == TokenCounts(
        input_tokens=1155, output_tokens=30, cache_read_tokens=7, cache_write_tokens=3
    )
    assert s.models == ["m-1"]
    rows = {r.task_key: r for r in s.tasks}
    assert (rows[key(0)].cost_usd, rows[key(0)].cost_complete) == (0.3, True)
    assert (rows[key(1)].cost_usd, rows[key(1)].cost_complete) == (0.05, False)
    assert rows[key(2)].cost_usd is None
    md = render_markdown(s)
    assert "- Total cost: \u2265 $0.3500" in md  # a floor, shown as one
    assert "- Cost is a floor: 2 task(s) used a model with no price" in md
    assert f"| {key(1)} | FAILURE | 0.00 | 0.0s | 0 | \u2265 $0.0500 |" in md
    assert f"| {key(2)} | UNFINISHED | - | - | 0 | unknown |" in md
    assert json.loads(render_json(s))["cost_complete"] is False


def test_fully_priced_usage_is_a_complete_total() -> None:
    events = [
        # Every usage priced, and the completions say so (one that says its cost is
        # incomplete makes a floor of the total all the same: an imported TIMEOUT).
        e.model_copy(update={"cost_complete": True}) if isinstance(e, TaskCompleted) else e
        for e in _money_run()
        if not (isinstance(e, TaskUsage) and e.cost_usd is None)
    ]
    s = summarize(events)
    assert s.total_cost_usd == pytest.approx(0.35)
    assert s.cost_complete is True and s.tasks_cost_incomplete == 0
    md = render_markdown(s)
    assert "- Total cost: $0.3500\n" in md
    assert "floor" not in md


def test_a_run_with_only_unpriced_usage_books_no_zero_as_complete() -> None:
    s = summarize([
        RunStarted(run_id=RUN, planned=[key(0)]),
        started(key(0)), usage(key(0), None, input_tokens=3),
        completed(key(0), FinalStatus.SUCCESS, cost_usd=None, cost_complete=False),
    ])
    assert s.total_cost_usd == 0.0
    assert s.cost_complete is False and s.tasks_cost_incomplete == 1
    assert "- Total cost: unknown" in render_markdown(s)  # never $0 for unknown


# -- reports ---------------------------------------------------------------------------------


def test_json_report_round_trips_and_written_reports_match(
    tmp_path: Path, ledger: Ledger
) -> None:
    run = _money_run()
    ledger.append(run)
    s = summarize(run)
    text = render_json(s)
    assert text.endswith("}\n")
    assert RunSummary.model_validate_json(text) == s
    paths = write_reports(ledger, s, tmp_path / "out" / RUN)  # what run and resume write
    assert paths["json"].read_text(encoding="utf-8") == text
    assert paths["md"].read_text(encoding="utf-8") == render_markdown(s)


# -- a resumed run's status ------------------------------------------------------------------


def _runs_row(ledger: Ledger, run_id: str = RUN) -> tuple[Any, ...]:
    return ledger.db.execute(
        "SELECT status, started_at, finished_at, tasks_planned, tasks_succeeded, tasks_failed, "
        "tasks_error, cost_usd FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()


def test_a_resumed_run_is_running_until_its_next_run_finished(ledger: Ledger) -> None:
    start = RunStarted(run_id=RUN, planned=[key(0), key(1)])
    first_end = RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED)
    ledger.append([start, started(key(0)), usage(key(0), 0.5),
                   completed(key(0), FinalStatus.SUCCESS), first_end])
    s = rebuilt(ledger)
    assert (s.status, s.finished_at) == ("interrupted", first_end.ts)
    assert s.duration_seconds is not None and s.duration_seconds >= 0
    assert _runs_row(ledger)[:3] == ("interrupted", start.ts, first_end.ts)

    ledger.append([RunResumed(run_id=RUN, to_run=[key(1)]), started(key(1), attempt=1)])
    s = rebuilt(ledger)
    assert (s.status, s.finished_at, s.duration_seconds) == ("running", None, None)
    assert s.started_at == start.ts
    assert _runs_row(ledger) == ("running", start.ts, None, 2, 1, 0, 0, 0.5)
    # A stray run.finished of another run does not end this one.
    ledger.append([RunStarted(run_id="run-2"),
                   RunFinished(run_id="run-2", status=RunStatus.COMPLETED)])
    assert rebuilt(ledger).status == "running"
    assert _runs_row(ledger)[0] == "running"
    assert _runs_row(ledger, "run-2")[0] == "completed"

    last_end = RunFinished(run_id=RUN, status=RunStatus.COMPLETED)
    ledger.append([completed(key(1), FinalStatus.FAILURE), last_end])
    s = rebuilt(ledger)
    assert (s.status, s.finished_at) == ("completed", last_end.ts)
    assert _runs_row(ledger) == ("completed", start.ts, last_end.ts, 2, 1, 1, 0, 0.5)


def test_live_fold_status_follows_the_lifecycle() -> None:
    live = SummaryFold(RUN)
    assert live.summary().status == "running"
    live.apply(RunStarted(run_id=RUN, planned=[key(0)]))
    assert live.summary().status == "running"
    live.apply(RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED))
    assert live.summary().status == "interrupted"
    live.apply(RunResumed(run_id=RUN, to_run=[key(0)]))
    assert live.summary().status == "running"
    live.apply(started(key(0)))
    live.apply(completed(key(0), FinalStatus.SUCCESS))
    assert live.counts() == {Category.SUCCEEDED: 1, Category.FAILED: 0, Category.ERROR: 0,
                             Category.UNGRADED: 0}
    live.apply(RunFinished(run_id=RUN, status=RunStatus.COMPLETED))
    assert live.summary().status == "completed"


# -- schema 2: views and indexes -------------------------------------------------------------

# The first columns are the ones the first contract promised, in its order: kept
# stable for audits; later columns are appended.
SPEC_COLUMNS = {
    "runs": [
        "run_id", "experiment_id", "started_at", "finished_at", "status", "tasks_planned",
        "tasks_succeeded", "tasks_failed", "tasks_error", "cost_usd",
        "tasks_ungraded", "cost_complete", "grader_cost_usd",
    ],
    "task_attempts": [
        "run_id", "task_key", "task_id", "variant_id", "replicate_index", "attempt",
        "started_at", "completed_at", "final_status", "category", "duration_seconds",
        "input_tokens", "output_tokens", "cost_usd", "error_message",
        "tags", "model", "cache_read_tokens", "cache_write_tokens", "weighted_score",
        "exit_code", "isolation", "workspace_hash", "failure_class",
    ],
    "usage": [
        "run_id", "task_key", "attempt", "ts", "model", "input_tokens", "output_tokens",
        "cache_read_tokens", "cache_write_tokens", "cost_usd", "seq", "role",
    ],
}
SPEC_COLUMNS["task_results"] = SPEC_COLUMNS["task_attempts"]


def _plan(conn: sqlite3.Connection, sql: str, params: Any = ()) -> str:
    return " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_schema_two_has_the_views_and_the_run_level_index(ledger: Ledger) -> None:
    assert ledger.schema_version == SCHEMA_VERSION == 17
    objects = dict(ledger.db.execute(
        "SELECT name, type FROM sqlite_master WHERE type IN ('view', 'index')"
    ).fetchall())
    for view in ("runs", "task_attempts", "task_results", "usage"):
        assert objects.get(view) == "view"
        assert ledger.db[view].columns_dict.keys() == set(SPEC_COLUMNS[view])
        assert [c.name for c in ledger.db[view].columns] == SPEC_COLUMNS[view]
    assert objects.get("events_run_level") == "index"
    (index_sql,) = ledger.db.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'events_run_level'"
    ).fetchone()
    assert "WHERE task_key IS NULL" in index_sql
    plan = _plan(
        ledger.db.conn,
        "SELECT run_id FROM events WHERE task_key IS NULL AND type = 'run.started'",
    )
    assert "events_run_level" in plan, plan


def test_listing_runs_uses_the_run_level_index(ledger: Ledger) -> None:
    ledger.append([RunStarted(run_id="b"), RunStarted(run_id="a"), started(key(0), run_id="a")])
    issued: list[str] = []
    ledger.db.conn.set_trace_callback(issued.append)
    try:
        assert ledger.run_ids() == ["b", "a"]
    finally:
        ledger.db.conn.set_trace_callback(None)
    (sql,) = [s for s in issued if "run.started" in s]
    assert "events_run_level" in _plan(ledger.db.conn, sql)


def test_replaying_summary_types_reads_no_output_rows(ledger: Ledger) -> None:
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0)]), started(key(0))]
    events += [TaskOutput(run_id=RUN, task_key=key(0), line=f"l{i}", n=i) for i in range(200)]
    events += [usage(key(0), 0.1), completed(key(0), FinalStatus.SUCCESS),
               RunFinished(run_id=RUN, status=RunStatus.COMPLETED)]
    ledger.append(events)
    issued: list[str] = []
    ledger.db.conn.set_trace_callback(issued.append)
    try:
        rows = list(ledger.rows(RUN, types=SummaryFold.TYPES))
    finally:
        ledger.db.conn.set_trace_callback(None)
    assert [r.type for r in rows] == [
        "run.started", "task.started", "task.usage", "task.completed", "run.finished"
    ]
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    scans = [s for s in issued if s.lstrip().upper().startswith("SELECT")]
    assert scans
    for sql in scans:
        plan = _plan(ledger.db.conn, sql)
        # A range search of an index led by run_id whose entries are only lifecycle
        # events (the partial events_lifecycle: every type a summary reads is one),
        # never a scan of the table, never a re-sort.
        assert plan.startswith("SEARCH events USING"), plan
        assert "events_lifecycle" in plan, plan
        assert "run_id=?" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_a_schema_three_ledger_is_migrated_to_views_with_one_row_per_start(
    db_path: Path,
) -> None:
    # Migration 0004 recreates the views: an attempt recorded completed twice is
    # one task_attempts row (its last completion), as the summary fold counts it.
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0)]), started(key(0)),
                              completed(key(0), FinalStatus.FAILURE),
                              completed(key(0), FinalStatus.SUCCESS)]
    assert old_ledger(db_path, events, "0004_views_latest_completion") == "3"
    with Ledger(db_path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        _, rows = ledger.query("SELECT task_key, final_status FROM task_attempts")
        assert rows == [(key(0), "SUCCESS")]
        assert fold(SummaryFold(RUN), ledger.events(RUN)).summary().tasks_succeeded == 1


def _v1_ledger(path: Path, events: list[AnyEvent]) -> None:
    """A ledger file as the schema-1 program left it: events, no views, no v2 index."""
    assert old_ledger(path, events, "0002_views") == "1"
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert not names & {"runs", "task_attempts", "task_results", "events_run_level"}


def test_a_schema_one_ledger_is_migrated_and_gets_the_views(db_path: Path) -> None:
    start = RunStarted(run_id=RUN, planned=[key(0), key(1)], experiment_id="exp")
    end = RunFinished(run_id=RUN, status=RunStatus.COMPLETED)
    events: list[AnyEvent] = [
        start,
        started(key(0)), usage(key(0), 0.25, input_tokens=7),
        completed(key(0), FinalStatus.SUCCESS, cost_usd=0.25,
                  tokens=TokenCounts(input_tokens=7)),
        started(key(1)), completed(key(1), FinalStatus.BUILD_FAILED, error_message="no dir"),
        end,
    ]
    _v1_ledger(db_path, events)
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(db_path).execute("SELECT * FROM runs").fetchall()

    with Ledger(db_path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        assert verify(ledger).ok
        assert ledger.run_ids() == [RUN]
        assert ledger.db.execute("SELECT * FROM runs").fetchall() == [
            (RUN, "exp", start.ts, end.ts, "completed", 2, 1, 0, 1, 0.25, 0, 1, 0.0)
        ]
        assert ledger.db.execute(
            "SELECT task_key, attempt, final_status, category, input_tokens, cost_usd, "
            "error_message FROM task_results ORDER BY task_key"
        ).fetchall() == [
            (key(0), 1, "SUCCESS", "succeeded", 7, 0.25, None),
            (key(1), 1, "BUILD_FAILED", "error", 0, None, "no dir"),
        ]
        assert "events_run_level" in _plan(
            ledger.db.conn,
            "SELECT run_id FROM events WHERE task_key IS NULL AND type = 'run.started'",
        )
        s = rebuilt(ledger)
        assert (s.tasks_run, s.tasks_succeeded, s.tasks_error, s.status) == (
            2, 1, 1, "completed"
        )
    # Opening it again (read-only too) migrates nothing more.
    with Ledger(db_path, read_only=True) as reader:
        assert reader.schema_version == SCHEMA_VERSION
        assert reader.db.execute("SELECT count(*) FROM task_attempts").fetchone() == (2,)


def test_a_schema_two_ledger_is_given_the_lifecycle_index(db_path: Path) -> None:
    # Regression: the index once came in by editing 0002 in place, so schema-2 files
    # never got it. It is its own step now; a schema-2 file gains it on open.
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[key(0)]), started(key(0))]
    assert old_ledger(db_path, events, "0003_lifecycle_index") == "2"

    with Ledger(db_path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION == 17
        issued: list[str] = []
        ledger.db.conn.set_trace_callback(issued.append)
        try:
            assert len(list(ledger.rows(RUN, types=SummaryFold.TYPES))) == 2
        finally:
            ledger.db.conn.set_trace_callback(None)
        plans = [_plan(ledger.db.conn, s) for s in issued if s.lstrip().startswith("SELECT")]
        assert all("TEMP B-TREE" not in p for p in plans), plans
        assert any("events_lifecycle" in p for p in plans), plans
        assert verify(ledger).ok


def test_run_json_has_every_field_the_spec_lists() -> None:
    data = json.loads(render_json(summarize(_money_run())))
    assert {
        "run_id", "started_at", "finished_at", "duration_seconds", "tasks_run",
        "tasks_succeeded", "tasks_failed", "tasks_error", "tasks_token_budget_exceeded",
        "tasks_cost_budget_exceeded", "skipped_tasks", "max_parallel", "pass_rate", "tokens",
        "total_cost_usd", "cost_complete", "tasks_cost_incomplete", "version_consensus",
        "version_drift", "fingerprint_drift", "tasks",
    } <= data.keys()
    assert set(data["tokens"]) == {
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"
    }


def test_replicates_make_the_pass_rate_interval_clustered_and_pass_at_k_names_what_it_left_out(
) -> None:
    """D3 (#47): three replicates of a task are not three independent trials; D5: an
    infrastructure failure dropped a replicate of t1, so pass@3 is over t0 alone, and
    says so (it read as pass@k falling with k)."""
    outcomes = {"t0": [FinalStatus.SUCCESS] * 3,
                "t1": [FinalStatus.FAILURE, FinalStatus.FAILURE, FinalStatus.ERROR],
                "t2": [FinalStatus.SUCCESS, FinalStatus.FAILURE, FinalStatus.SUCCESS]}
    keys = [f"default/{t}/{i:02d}" for t in outcomes for i in range(3)]
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=keys)]
    for k in keys:
        task, replicate = k.split("/")[1], int(k.split("/")[2])
        events += [started(k), completed(k, outcomes[task][replicate])]
    s = summarize(events)
    [v] = s.variants
    assert (s.tasks_succeeded, s.graded, s.tasks_infra) == (5, 8, 1)
    assert s.pass_rate_stderr is not None and v.pass_rate_stderr == s.pass_rate_stderr
    # The graded outcomes (t1's infrastructure failure left out), clustered by task
    # (clustered_stderr is checked against statsmodels in test_intervals.py).
    ok, groups = [1.0, 1, 1, 0, 0, 1, 0, 1], ["t0"] * 3 + ["t1"] * 2 + ["t2"] * 3
    assert s.pass_rate_stderr == round(clustered_stderr(ok, groups) or 0, 6)
    assert s.pass_rate_interval == normal_interval(0.625, s.pass_rate_stderr, low=0.0,
                                                   high=1.0)
    assert s.pass_rate_interval != wilson(5, 8)
    assert v.pass_at_k_left_out == {"3": ["t1"]}


def test_a_live_runs_variants_count_the_tasks_planned_before_they_start() -> None:
    """Twelve planned, two started: the variants say 12 tasks, not 2 (a variant none of
    whose tasks started yet included), each with what ran of it."""
    planned = [f"{v}/t{i}/00" for v in ("a", "b") for i in range(6)]
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=planned),
        started("a/t0/00", variant_id="a"), completed("a/t0/00", FinalStatus.SUCCESS),
        started("a/t1/00", variant_id="a")]
    variants = {v.variant_id: (v.tasks, v.tasks_run) for v in summarize(events).variants}
    assert variants == {"a": (6, 1), "b": (6, 0)}


def test_a_models_cost_that_holds_an_estimate_is_a_floor_though_priced() -> None:
    """An attempt cut off before its agent reported: its usage read from its messages,
    priced; the model's cost is whole otherwise, and ``show``'s table says ``≥``."""
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0)]), started(key(0)),
        TaskUsage(run_id=RUN, task_key=key(0), model="m-1", cost_usd=0.25, estimate=True,
                  output_tokens=87),
        completed(key(0), FinalStatus.TIMEOUT)]
    (model,) = summarize(events).usage_by_model
    assert model.cost_complete and model.estimated and not model.whole
    assert model_table(summarize(events))[1] == [["m-1", "0", "87", "0", "0", "≥ $0.2500"]]
