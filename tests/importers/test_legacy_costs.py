"""evalledger import, what an old run cost: its judges' and simulated user's spend booked as
grading (``task.usage`` with ``role: grader``), so the imported total is run.json's own and
every report shows it with its parts; run.json's own count of rows whose cost was
incomplete (a TIMEOUT too); a ``skip: true`` entry left out on purpose; and one line
saying what still differs from run.json's totals.

Real folders in the old harness's layout (docs/import.md), imported by real ``evalledger``
processes, then read by real ``show``, ``report``, ``runs`` and ``sql`` processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalledger.ledger import Ledger, TaskSkipped, TaskUsage
from tests.cli.helpers import COMMAND, PATIENCE, _env

from .old_runs import task_json, write

# The run: run.json said $14.19094, of which $0.01574 was judging.
AGENT, GRADER, TOTAL = 14.1752, 0.01574, 14.19094
COST_LINE = "$14.1909 (agent $14.1752, grader $0.0157)"


def cli(cwd: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "--ledger", str(db), *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=3 * PATIENCE, check=False)


def judged(cost: float | None, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A judge criterion's result as the newer harness writes it."""
    return {"criterion_type": "llm_judge", "result_kind": "judge", "score": 1.0,
            "details": "looks right", "findings": ["it works"],
            "token_usage": {"uncached_input_tokens": input_tokens, "output_tokens": output_tokens,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                            "input_tokens": input_tokens, "total_cost_usd": cost}}


def row(task_id: str, status: str, agent: float | None, *, judge: float | None = None,
        simulator: float | None = None, complete: bool = True) -> dict[str, Any]:
    """A run.json row of the newer harness: its total is the agent's and grading's."""
    priced = [c for c in (agent, judge, simulator) if c is not None]
    return {"task_id": task_id, "variant_id": "default", "replicate_index": 0,
            "status": status, "agent_cost_usd": agent, "judge_cost_usd": judge,
            "simulator_cost_usd": simulator, "total_cost_usd": sum(priced) if priced else None,
            "cost_complete": complete}


def turn(n: int, cost: float | None, input_tokens: int = 1000,
         model: str = "claude-sonnet-4-5") -> dict[str, Any]:
    return {"iteration": n, "model_used": model,
            "token_usage": {"uncached_input_tokens": input_tokens, "output_tokens": 100,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                            "total_cost_usd": cost}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """An old run whose judges and simulated user cost $0.01574 beside the agents' $14.1752,
    each the way one version or another recorded it, imported by a real process."""
    cwd = tmp_path_factory.mktemp("graded")
    run = cwd / "runs" / "r-graded"
    write(run, "run.json", {
        "run_id": "r-graded", "start_time": "2026-03-01T10:00:00",
        "end_time": "2026-03-01T10:30:00",
        "tasks_run": 4, "tasks_succeeded": 3, "tasks_failed": 1, "tasks_error": 0,
        "tasks_not_graded": 0, "tasks_cost_incomplete": 0, "cost_complete": True,
        "agent_cost_usd": AGENT, "eval_overhead_cost_usd": GRADER, "total_cost_usd": TOTAL,
        "task_results": [row("judged", "SUCCESS", 10.0, judge=0.01),
                         row("post-failure", "FAILURE", 4.0, judge=0.002),
                         row("older-file", "SUCCESS", 0.1, judge=0.001),
                         row("dialog", "SUCCESS", 0.0752, simulator=0.00274)],
    })
    # Judged per criterion, the agent's cost per turn.
    write(run, "default/judged/00/task.json", task_json(
        "judged", "SUCCESS", iterations=[turn(1, 6.0), turn(2, 4.0)],
        success_criteria_results=[judged(0.01, 2000, 100)]))
    # A judge run after the failure, as evidence: it was paid for all the same.
    write(run, "default/post-failure/00/task.json", task_json(
        "post-failure", "FAILURE", cost=4.0,
        post_failure_criteria_results=[judged(0.002, 500, 50)]))
    # A file whose criteria say nothing of their cost: the row's judge_cost_usd does.
    write(run, "default/older-file/00/task.json", task_json("older-file", "SUCCESS", cost=0.1))
    # Dialog mode: the simulated user's tokens in the file, its price in the row.
    write(run, "default/dialog/00/task.json", task_json(
        "dialog", "SUCCESS", cost=0.0752,
        simulation={"simulator_input_tokens": 1000, "simulator_output_tokens": 200,
                    "simulator_model": "claude-haiku-4-5", "replicate_index": 0}))
    db = cwd / "l.db"
    result = cli(cwd, db, "import", str(cwd / "runs"), "--tz", "UTC")
    assert result.returncode == 0, result
    assert "r-graded: imported 4 attempt(s), 0 unfinished" in result.stdout
    assert "  differs" not in result.stdout, result.stdout  # run.json's totals, each of them
    return cwd, db, "r-graded"


def test_grading_spend_is_booked_as_grader_usage_so_the_total_is_run_jsons(
        graded: tuple[Path, Path, str]) -> None:
    cwd, db, run_id = graded
    s = json.loads(cli(cwd, db, "show", run_id, "--json").stdout)
    assert s["total_cost_usd"] == pytest.approx(TOTAL, abs=1e-9)
    assert s["cost_complete"] is True and s["tasks_cost_incomplete"] == 0
    roles = {r["role"]: r for r in s["usage_by_role"]}
    assert [r["role"] for r in s["usage_by_role"]] == ["agent", "grader"]
    assert roles["agent"]["cost_usd"] == pytest.approx(AGENT, abs=1e-9)
    assert roles["grader"]["cost_usd"] == pytest.approx(GRADER, abs=1e-9)
    # The judges' and the simulated user's tokens are grading's, not the agent's.
    assert roles["grader"]["tokens"]["input_tokens"] == 2000 + 500 + 1000
    assert roles["grader"]["tokens"]["output_tokens"] == 100 + 50 + 200
    rows = {r["task_id"]: r for r in s["tasks"]}
    assert rows["judged"]["cost_usd"] == pytest.approx(10.01)  # the row's whole bill
    assert rows["older-file"]["cost_usd"] == pytest.approx(0.101)

    with Ledger(db, read_only=True) as ledger:
        grader = [e for e in ledger.events(run_id)
                  if isinstance(e, TaskUsage) and e.role == "grader"]
    assert {e.task_key for e in grader} == {"default/judged/00", "default/post-failure/00",
                                            "default/older-file/00", "default/dialog/00"}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_show_report_and_runs_show_the_agents_and_the_graders_cost_apart(
        graded: tuple[Path, Path, str]) -> None:
    cwd, db, run_id = graded
    show = cli(cwd, db, "show", run_id)
    assert show.returncode == 0, show
    assert f"; cost {COST_LINE}" in show.stdout.splitlines()[0]

    markdown = cli(cwd, db, "report", run_id)
    assert f"- Total cost: {COST_LINE}" in markdown.stdout
    report = json.loads(cli(cwd, db, "report", run_id, "--format", "json").stdout)
    assert report["total_cost_usd"] == pytest.approx(TOTAL, abs=1e-9)
    assert [(r["role"], round(r["cost_usd"], 6)) for r in report["usage_by_role"]] == [
        ("agent", AGENT), ("grader", GRADER)]

    listed = cli(cwd, db, "runs")  # a pipe: the words a person reads, nothing cut
    assert COST_LINE in listed.stdout, listed.stdout
    (line,) = cli(cwd, db, "runs", "--format", "json").stdout.splitlines()
    exact = json.loads(line)
    assert exact["cost_usd"] == pytest.approx(TOTAL, abs=1e-9)
    assert exact["grader_cost_usd"] == pytest.approx(GRADER, abs=1e-9)


def test_the_sql_views_name_each_usages_role(graded: tuple[Path, Path, str]) -> None:
    cwd, db, _ = graded
    by_role = cli(cwd, db, "sql", "SELECT role, round(sum(cost_usd), 6) AS cost FROM usage "
                  "GROUP BY role ORDER BY role", "--format", "json")
    assert [json.loads(line) for line in by_role.stdout.splitlines()] == [
        {"role": "agent", "cost": AGENT}, {"role": "grader", "cost": GRADER}]
    runs = cli(cwd, db, "sql", "SELECT round(cost_usd, 6) AS cost, round(grader_cost_usd, 6) "
               "AS grader, cost_complete FROM runs", "--format", "json")
    assert json.loads(runs.stdout) == {"cost": TOTAL, "grader": GRADER, "cost_complete": 1}


def test_the_viewers_run_page_and_list_show_whose_cost_it_was(
        graded: tuple[Path, Path, str]) -> None:
    from starlette.testclient import TestClient

    from evalledger.viewer import create_app

    _, db, run_id = graded
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        page = client.get(f"/runs/{run_id}").text
        assert "(agent $14.1752, grader $0.0157)" in page
        assert "differ from its own run.json" not in page
        assert "agent $14.1752, grader $0.0157" in client.get("/").text


def test_a_row_without_its_file_books_the_agent_and_the_judge_apart(tmp_path: Path) -> None:
    # A batch-level failure left a row and no task.json; its total is both halves.
    run = tmp_path / "runs" / "r-row"
    write(run, "run.json", {"run_id": "r-row", "total_cost_usd": 0.03, "agent_cost_usd": 0.02,
                            "eval_overhead_cost_usd": 0.01,
                            "task_results": [row("crashed", "ERROR", 0.02, judge=0.01)]})
    db = tmp_path / "l.db"
    result = cli(tmp_path, db, "import", str(tmp_path / "runs"))
    assert result.returncode == 0 and "  differs" not in result.stdout, result
    s = json.loads(cli(tmp_path, db, "show", "r-row", "--json").stdout)
    assert [(r["role"], r["cost_usd"]) for r in s["usage_by_role"]] == [
        ("agent", pytest.approx(0.02)), ("grader", pytest.approx(0.01))]
    assert s["total_cost_usd"] == pytest.approx(0.03)


def incomplete_run(cwd: Path, *, flagged: bool) -> Path:
    """A run with two rows whose cost the old harness knew to be incomplete: a model with
    no price, and a TIMEOUT whose recorded turns were all priced (the turn it killed
    never reported). ``flagged``: run.json as the newer harness writes it (each row's
    ``cost_complete``, the run's ``tasks_cost_incomplete``); else an older one, with
    neither."""
    run = cwd / "runs" / "r-floor"
    rows = [row("unpriced", "FAILURE", None, complete=False),
            row("timed-out", "TIMEOUT", 0.15, complete=False),
            row("fine", "SUCCESS", 0.05)]
    summary: dict[str, Any] = {"run_id": "r-floor", "start_time": "2026-03-01T10:00:00",
                               "task_results": rows}
    if flagged:
        summary.update(tasks_cost_incomplete=2, cost_complete=False, total_cost_usd=0.2,
                       agent_cost_usd=0.2)
    else:
        for r in rows:
            for name in ("cost_complete", "agent_cost_usd", "judge_cost_usd",
                         "simulator_cost_usd"):
                del r[name]
    write(run, "run.json", summary)
    write(run, "default/unpriced/00/task.json", task_json(
        "unpriced", "FAILURE", model="mystery-model",
        iterations=[turn(1, None, model="mystery-model")]))
    write(run, "default/timed-out/00/task.json", task_json(
        "timed-out", "TIMEOUT", iterations=[turn(1, 0.15, input_tokens=40_000)]))
    write(run, "default/fine/00/task.json", task_json("fine", "SUCCESS", cost=0.05))
    return cwd / "runs"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("flagged", [True, False], ids=["rows-flagged", "older-run-json"])
def test_tasks_cost_incomplete_is_the_old_harness_count(tmp_path: Path, flagged: bool) -> None:
    db = tmp_path / "l.db"
    result = cli(tmp_path, db, "import", str(incomplete_run(tmp_path, flagged=flagged)))
    assert result.returncode == 0, result
    assert "  differs" not in result.stdout, result.stdout

    s = json.loads(cli(tmp_path, db, "show", "r-floor", "--json").stdout)
    assert s["tasks_cost_incomplete"] == 2  # run.json's count: the import read 1
    assert s["cost_complete"] is False
    assert s["total_cost_usd"] == pytest.approx(0.2)  # a floor
    rows = {r["task_id"]: r for r in s["tasks"]}
    assert (rows["timed-out"]["cost_usd"], rows["timed-out"]["cost_complete"]) == (
        pytest.approx(0.15), False)
    assert rows["fine"]["cost_complete"] is True
    show = cli(tmp_path, db, "show", "r-floor")
    assert "; cost \u2265 $0.2000" in show.stdout.splitlines()[0]
    # The SQL view says what the summary says.
    sql = cli(tmp_path, db, "sql", "SELECT cost_complete FROM runs", "--format", "json")
    assert json.loads(sql.stdout) == {"cost_complete": 0}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_spend_never_reported_is_said_so_where_no_model_lacked_a_price(
        tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r-killed"
    write(run, "run.json", {"run_id": "r-killed", "tasks_cost_incomplete": 1,
                            "task_results": [row("timed-out", "TIMEOUT", 0.15,
                                                 complete=False)]})
    write(run, "default/timed-out/00/task.json", task_json(
        "timed-out", "TIMEOUT", iterations=[turn(1, 0.15, input_tokens=40_000)]))
    db = tmp_path / "l.db"
    assert cli(tmp_path, db, "import", str(tmp_path / "runs")).returncode == 0
    show = cli(tmp_path, db, "show", "r-killed")
    assert "cost is a floor: spend never reported in full" in show.stdout, show.stdout
    report = cli(tmp_path, db, "report", "r-killed").stdout
    assert "- Cost is a floor: 1 task(s) with spend never reported in full" in report


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_skip_true_entry_is_left_out_on_purpose(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r-skips"
    write(run, "run.json", {"run_id": "r-skips", "skipped_tasks": [
        # As the old harness writes them: an opt-out, then a file that did not load.
        {"path": "/suite/wip.yaml", "reason": "skip: true (task_id='wip')"},
        {"path": "/suite/broken.yaml",
         "reason": "ValueError: Invalid task definition: 1 validation error"},
    ]})
    write(run, "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    db = tmp_path / "l.db"
    result = cli(tmp_path, db, "import", str(tmp_path / "runs"))
    assert result.returncode == 0, result

    s = json.loads(cli(tmp_path, db, "show", "r-skips", "--json").stdout)
    assert [(k["path"], k["deliberate"]) for k in s["skipped_tasks"]] == [
        ("/suite/wip.yaml", True), ("/suite/broken.yaml", False)]
    line = cli(tmp_path, db, "show", "r-skips").stdout.splitlines()[0]
    assert "; 1 task file(s) skipped;" in line, line  # the broken one, not the opt-out
    with Ledger(db, read_only=True) as ledger:
        skipped = [e for e in ledger.events("r-skips") if isinstance(e, TaskSkipped)]
    assert [e.deliberate for e in skipped] == [True, False]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_what_still_differs_from_run_json_is_said_in_one_line(tmp_path: Path) -> None:
    # A task.json that no longer parses: run.json counted its row and its cost, the
    # ledger cannot.
    run = tmp_path / "runs" / "r-short"
    write(run, "run.json", {
        "run_id": "r-short", "tasks_run": 2, "tasks_succeeded": 2, "tasks_failed": 0,
        "tasks_error": 0, "tasks_cost_incomplete": 0, "cost_complete": True,
        "total_cost_usd": 0.03, "agent_cost_usd": 0.02, "eval_overhead_cost_usd": 0.01,
        "task_results": [row("good", "SUCCESS", 0.01, judge=0.005),
                         row("lost", "SUCCESS", 0.01, judge=0.005)]})
    write(run, "default/good/00/task.json", task_json(
        "good", "SUCCESS", success_criteria_results=[judged(0.005, 10, 1)]))
    write(run, "default/lost/00/task.json", "{cut short")
    db = tmp_path / "l.db"
    result = cli(tmp_path, db, "import", str(tmp_path / "runs"))
    assert result.returncode == 1, result  # for the file, as before
    differs = [line for line in result.stdout.splitlines() if line.startswith("  differs")]
    assert differs == [
        "  differs from its run.json: cost $0.015 (run.json $0.03), agent cost $0.01 "
        "(run.json $0.02), grader cost $0.005 (run.json $0.01), tasks_run 1 (run.json 2), "
        "tasks_succeeded 1 (run.json 2)"]
    dry = cli(tmp_path, tmp_path / "other.db", "import", str(tmp_path / "runs"), "--dry-run")
    assert differs[0] in dry.stdout.splitlines()

    from starlette.testclient import TestClient

    from evalledger.viewer import create_app

    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        page = client.get("/runs/r-short").text
    assert "Where they differ from its own run.json" in page
    assert "tasks_run 1 (run.json 2)" in page
