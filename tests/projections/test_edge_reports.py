"""Edge cases of the projections and their reports, on event streams built by hand.

Every stream goes through a real ``Ledger`` file where it matters (offline rebuilds,
SQL views, the CLI). Each test states the behaviour a user can rely on; the ones
that fail name a bug in what a summary computes or how a report renders it.
"""

from __future__ import annotations

import json
import math
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from evalledger.cli import cli
from evalledger.executor._usage import UsageMeter
from evalledger.ledger import (
    AnyEvent,
    Ledger,
    RunFinished,
    RunStarted,
    TaskInterrupted,
    TaskSkipped,
    TaskUsage,
    TokenCounts,
)
from evalledger.pricing import DEFAULT_RATES, Rate
from evalledger.projections import ResumeFold, RunSummary, diff_runs, fold
from evalledger.render import render_json, render_markdown
from evalledger.statuses import FinalStatus, RunStatus
from tests.cli.helpers import assert_one_line_error, evalledger
from tests.render.markdown import table_rows

from .builders import RUN, completed, rebuilt, started, summarize

K0, K1 = "default/t0/00", "default/t1/00"


def store(path: Path, events: list[AnyEvent]) -> Path:
    with Ledger(path) as ledger:
        ledger.append(events)
    return path


def rebuild(path: Path, run_id: str = RUN) -> RunSummary:
    with Ledger(path, read_only=True) as reader:
        return rebuilt(reader, run_id)


def invoke(db: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--ledger", str(db), *args])


# -- show: text from the ledger must not change its lines -------------------------------------


def test_show_prints_one_line_per_task_even_with_a_carriage_return(tmp_path: Path) -> None:
    # In a pipe, `show` prints tab-separated lines and replaces "\t" and "\n", not "\r":
    # a program reading the lines (universal newlines) sees a task split in two.
    db = store(tmp_path / "l.db", [
        RunStarted(run_id=RUN, planned=[K0]), started(K0),
        completed(K0, FinalStatus.ERROR, error_message="left\r\nright"),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    result = invoke(db, "show", RUN)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines[1:]] == ["task", K0], lines


# -- SQL views against the Python projections on odd streams ---------------------------------


def test_a_duplicate_completion_of_one_attempt_is_counted_once_everywhere(
    tmp_path: Path,
) -> None:
    # The same attempt completed twice (two event ids: a merged or re-imported ledger,
    # a writer retry that minted new ids). The summary keeps the last one; the views
    # join every completion to the start, so task_attempts has two rows for one
    # task.started, task_results two rows for one key, and `runs` counts one task as
    # both succeeded and failed.
    db = store(tmp_path / "l.db", [
        RunStarted(run_id=RUN, planned=[K0]), started(K0),
        completed(K0, FinalStatus.SUCCESS), completed(K0, FinalStatus.FAILURE),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    s = rebuild(db)
    assert (s.tasks_run, s.tasks_succeeded, s.tasks_failed) == (1, 0, 1)
    conn = sqlite3.connect(db)
    try:
        (attempts,) = conn.execute("SELECT count(*) FROM task_attempts").fetchone()
        results = conn.execute("SELECT task_key, final_status FROM task_results").fetchall()
        runs = conn.execute(
            "SELECT tasks_succeeded, tasks_failed, tasks_error FROM runs"
        ).fetchone()
    finally:
        conn.close()
    assert attempts == 1  # one row per task.started
    assert results == [(K0, s.tasks[0].final_status.value)]
    assert runs == (s.tasks_succeeded, s.tasks_failed, s.tasks_error)


def test_resume_and_summary_agree_on_a_completion_without_a_start(tmp_path: Path) -> None:
    # A planned key with a task.completed but no task.started: the summary (and the
    # SQL views) call it unfinished, the resume partition keeps it as finished, so
    # `show` reports 1 unfinished task and `resume` says there is nothing to resume.
    db = store(tmp_path / "l.db", [
        RunStarted(run_id=RUN, planned=[K0]), completed(K0, FinalStatus.SUCCESS),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ])
    s = rebuild(db)
    with Ledger(db, read_only=True) as reader:
        part = fold(ResumeFold(RUN), reader.events(RUN, types=ResumeFold.TYPES)).partition()
    assert (s.tasks_run, s.tasks_unfinished) == (len(part.kept), len(part.to_run))


# -- version consensus -----------------------------------------------------------------------


def test_version_consensus_does_not_merge_different_json_values() -> None:
    # Non-text values are compared by repr(): None and "None", 3 and "3", True and
    # "True" become the same text, so tasks that disagree are reported as agreeing.
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[K0, K1]),
                              started(K0), started(K1),
                              completed(K0, environment_info={"gpu": None, "workers": 3}),
                              completed(K1, environment_info={"gpu": "None", "workers": "3"})]
    s = summarize(events)
    assert "gpu" not in s.version_consensus and "workers" not in s.version_consensus
    assert set(s.version_drift) == {"gpu", "workers"}


def test_version_consensus_of_non_text_values_is_not_python_syntax() -> None:
    # run.json is JSON: an agreed null or object must not come out as the Python
    # repr "None" / "{'name': 'linux'}".
    env = {"gpu": None, "os": {"name": "linux"}}
    s = summarize([RunStarted(run_id=RUN, planned=[K0]), started(K0),
                   completed(K0, environment_info=env)])
    report = json.loads(render_json(s))["version_consensus"]
    assert report["gpu"] != "None"
    assert "'" not in json.dumps(report["os"])


# -- money: non-finite numbers ---------------------------------------------------------------


@pytest.mark.parametrize("text", [".inf", "1e400"])
def test_a_pricing_file_with_an_infinite_price_is_refused(tmp_path: Path, text: str) -> None:
    # `ge=0` lets +inf through; price() then answers inf, or NaN (0 tokens x inf).
    path = tmp_path / "prices.yaml"
    path.write_text(f"house: {{input: {text}, output: 1}}\n")
    with pytest.raises(ValueError, match="house"):
        DEFAULT_RATES.with_file(path)
    with pytest.raises(ValidationError):
        Rate(input=math.inf, output=1)


def test_a_pricing_file_with_yes_as_a_price_is_refused(tmp_path: Path) -> None:
    # Task files refuse `yes` where a number goes (README); the rate card takes it as 1.0.
    path = tmp_path / "prices.yaml"
    path.write_text("house: {input: yes, output: 1}\n")
    with pytest.raises(ValueError, match="house"):
        DEFAULT_RATES.with_file(path)


def test_an_infinite_cost_on_a_usage_line_is_not_booked() -> None:
    # json.loads reads 1e400 (and Infinity) as inf; `cost >= 0` accepted it. A cost that
    # is not a number is ignored: the line is priced from the rate card instead.
    meter = UsageMeter("native", "claude-sonnet-4-5")
    (got,) = meter.observe({"type": "usage", "input_tokens": 10, "cost_usd": math.inf})
    priced = DEFAULT_RATES.price("claude-sonnet-4-5", TokenCounts(input_tokens=10))
    assert priced is not None and math.isfinite(priced)
    assert got.cost_usd == pytest.approx(priced)
    assert meter.cost_usd == pytest.approx(priced)


@pytest.mark.parametrize("cost", [math.inf, math.nan])
def test_a_non_finite_usage_cost_folds_the_same_live_and_offline(cost: float) -> None:
    # The ledger stores a non-finite float as JSON null: live the fold added inf/NaN
    # (and run.json said total null, cost complete), rebuilt it read an unpriced
    # usage (total 0.0, cost incomplete). The event is refused: no fold ever sees one.
    with pytest.raises(ValidationError, match="finite"):
        TaskUsage(run_id=RUN, task_key=K0, model="m", input_tokens=5, cost_usd=cost)


PRICING_SUITE = {
    "prices.yaml": "house-model: {input: .inf, output: 1}\n",
    "tasks/spend.yaml": """\
        command: ["python3", "-c", "print('{\\"type\\": \\"usage\\", \\"output_tokens\\": 10}')"]
        model: house-model
        success_criteria:
          - {type: exit_code, equals: 0}
        """,
}


def test_a_run_with_an_infinite_price_in_its_pricing_file_is_refused(tmp_path: Path) -> None:
    # README: `report --format json` is byte-identical to runs/<id>/run.json. With an
    # infinite rate the live fold booked NaN (stored as null): run.json said
    # "total_cost_usd": null (not even a valid RunSummary), the rebuild said 0.0. Such
    # a pricing file is refused before anything runs: one line, exit 2, no run.
    for name, text in PRICING_SUITE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    db = tmp_path / "l.db"

    done = evalledger(tmp_path, db, "run", "tasks", "--run-id", "r-inf",
                      "--pricing", "prices.yaml")

    assert "house-model" in assert_one_line_error(done)
    assert not (tmp_path / "runs" / "r-inf").exists()
    if db.exists():
        with Ledger(db, read_only=True) as reader:
            assert list(reader.events("r-inf")) == []


# -- timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end"),
    [("2025-01-01T10:00:00", "2025-01-01T10:00:05Z"), ("2025-01-01T10:00:00Z", "soon")],
)
def test_odd_timestamps_never_crash_the_summary_or_show(
    tmp_path: Path, start: str, end: str
) -> None:
    # The ledger accepts any ts text and `verify` calls such a ledger intact, but the
    # duration subtracts a naive from an aware datetime (TypeError) or parses a
    # non-ISO text (ValueError): `show` and `report` die with a traceback.
    run: list[AnyEvent] = [RunStarted(run_id=RUN, ts=start),
                           RunFinished(run_id=RUN, ts=end, status=RunStatus.COMPLETED)]
    db = store(tmp_path / "l.db", run)
    assert invoke(db, "verify").exit_code == 0
    result = invoke(db, "show", RUN)
    assert result.exception is None, repr(result.exception)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"run {RUN} completed:")
    assert summarize(run).started_at == start


# -- diff -------------------------------------------------------------------------------------


def _two_runs() -> tuple[RunSummary, RunSummary]:
    a = summarize([
        RunStarted(run_id="a", planned=[K0, K1]),
        started(K0, run_id="a"), completed(K0, run_id="a", weighted_score=1.0),
        started(K1, run_id="a"), completed(K1, run_id="a", weighted_score=1.0),
        RunFinished(run_id="a", status=RunStatus.COMPLETED),
    ], "a")
    # b planned both keys but was interrupted before it started K1.
    b = summarize([
        RunStarted(run_id="b", planned=[K0, K1]),
        started(K0, run_id="b"), completed(K0, run_id="b", weighted_score=1.0),
        RunFinished(run_id="b", status=RunStatus.INTERRUPTED),
    ], "b")
    return a, b


def test_diff_calls_a_planned_but_never_started_key_not_run() -> None:
    # Every planned key has a summary row (a never-started one with no attempts), so K1
    # (planned in both runs, never started in b) is "not run" in b: neither removed,
    # nor added the other way round, nor a fix or a regression.
    a, b = _two_runs()
    assert b.tasks_planned == 2 and b.tasks_unfinished == 1
    assert {r.task_key: r.attempts for r in b.tasks}[K1] == 0
    forward = {t.task_key: t for t in diff_runs(a, b).tasks}
    assert (forward[K1].change, forward[K1].after) == ("not_run", "NOT RUN")
    backward = {t.task_key: t for t in diff_runs(b, a).tasks}
    assert (backward[K1].change, backward[K1].before) == ("not_run", "NOT RUN")


def test_diff_of_runs_without_tasks_exits_alike_as_a_table_and_as_json(tmp_path: Path) -> None:
    # The table form prints the (empty) diff, then fails with exit 2 ("usage, config
    # or ledger error"); `--json` of the same two runs exits 0.
    db = store(tmp_path / "l.db", [
        RunStarted(run_id="e1"), TaskSkipped(run_id="e1", path="a.yaml", reason="bad"),
        RunFinished(run_id="e1", status=RunStatus.COMPLETED),
        RunStarted(run_id="e2"), RunFinished(run_id="e2", status=RunStatus.COMPLETED),
    ])
    as_json = invoke(db, "diff", "e1", "e2", "--json")
    as_table = invoke(db, "diff", "e1", "e2")
    assert as_json.exit_code == as_table.exit_code, (as_json.output, as_table.output)


# -- behaviour that holds (not covered elsewhere) ---------------------------------------------


def test_diff_of_a_run_with_itself_keeps_none_deltas_for_unfinished_and_unpriced() -> None:
    s = summarize([
        RunStarted(run_id=RUN, planned=[K0, K1]),
        started(K0), completed(K0, FinalStatus.FAILURE, cost_usd=None, cost_complete=False),
        started(K1), TaskInterrupted(run_id=RUN, task_key=K1),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
    ])
    d = diff_runs(s, s)
    assert d.counts["unchanged"] == 1 and d.counts["not_run"] == 1
    assert sum(d.counts.values()) == 2
    by_key = {t.task_key: t for t in d.tasks}
    assert by_key[K0].cost_delta is None and by_key[K0].score_delta == 0.0
    assert by_key[K1].before == by_key[K1].after == "NOT RUN"
    assert by_key[K1].score_delta is None and by_key[K1].duration_delta is None


def test_runs_with_no_task_only_skipped_files_or_only_interruptions_render(
    tmp_path: Path,
) -> None:
    streams: dict[str, list[AnyEvent]] = {
        "empty": [RunStarted(run_id="empty"),
                  RunFinished(run_id="empty", status=RunStatus.COMPLETED)],
        "skips": [RunStarted(run_id="skips"),
                  TaskSkipped(run_id="skips", path="ü/bad | one.yaml", reason="ünïcode | bad"),
                  RunFinished(run_id="skips", status=RunStatus.COMPLETED)],
        "stops": [RunStarted(run_id="stops", planned=[K0]), started(K0, run_id="stops"),
                  TaskUsage(run_id="stops", task_key=K0, input_tokens=7, cost_usd=None),
                  TaskInterrupted(run_id="stops", task_key=K0),
                  RunFinished(run_id="stops", status=RunStatus.INTERRUPTED)],
    }
    db = store(tmp_path / "l.db", [e for events in streams.values() for e in events])
    for run_id, events in streams.items():
        live = summarize(events, run_id)
        assert render_json(live) == render_json(rebuild(db, run_id))
        assert (live.tasks_run, live.tasks_succeeded, live.pass_rate) == (0, 0, 0.0)
        md = render_markdown(live)
        summary_rows = [r for r in table_rows(md) if len(r) == 11]
        assert len(summary_rows) == 2
        result = invoke(db, "report", run_id)
        assert result.exit_code == 0 and result.stdout == md
    stops = summarize(streams["stops"], "stops")
    assert stops.tasks_unfinished == 1 and not stops.cost_complete
    assert stops.tasks_cost_incomplete == 1 and stops.tokens.input_tokens == 7
    assert "Total cost: unknown" in render_markdown(stops)


def _variant_run(run_id: str, variant: str, failing: set[str]) -> RunSummary:
    keys = [f"{variant}/t{i}/00" for i in range(3)]
    events: list = [RunStarted(run_id=run_id, planned=keys)]
    for k in keys:
        status = FinalStatus.FAILURE if k.split("/")[1] in failing else FinalStatus.SUCCESS
        events += [started(k, run_id=run_id, variant_id=variant),
                   completed(k, status, run_id=run_id)]
    return summarize([*events, RunFinished(run_id=run_id, status=RunStatus.COMPLETED)], run_id)


def test_runs_of_one_variant_each_pair_by_task_whatever_the_variants_are_named() -> None:
    """An agent's run named by its model against the next model's: its tasks pair (a
    regression found), not 3 added and 3 removed."""
    a, b = _variant_run("a", "opus", set()), _variant_run("b", "sonnet", {"t1"})
    found = diff_runs(a, b)
    assert found.variants == {"opus": "sonnet"}
    assert {t.task_key: t.change for t in found.tasks} == {
        "sonnet/t0/00": "unchanged", "sonnet/t1/00": "regression",
        "sonnet/t2/00": "unchanged"}
    # Asked for: pairs as given; none given, each key with its own name only.
    assert diff_runs(a, b, {}).counts["added"] == 3
    assert diff_runs(a, b, {"opus": "sonnet"}).counts["regression"] == 1
    assert diff_runs(a, a).variants == {}
