"""The reading commands: runs, show, events (and --follow), sql, diff.

The ledger is real: two runs recorded with the event models, as the executor
would; ``--follow`` (run in-process) is checked against a real writer in another process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalledger.cli import cli
from evalledger.ledger import (
    Ledger,
)
from evalledger.statuses import FinalStatus

from .helpers import PATIENCE, no_hang, wait_until
from .recorded import KEYS, record_run


@pytest.fixture
def two_runs(db_path: Path) -> Path:
    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", {KEYS[0]: FinalStatus.SUCCESS, KEYS[1]: FinalStatus.FAILURE})
        record_run(ledger, "run-2", {KEYS[0]: FinalStatus.FAILURE, KEYS[1]: FinalStatus.SUCCESS,
                                     KEYS[2]: FinalStatus.SUCCESS})
    return db_path


def invoke(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--ledger", str(db), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_runs_lists_newest_first_and_as_json(two_runs: Path) -> None:
    code, out, _ = invoke(two_runs, "runs", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["run_id"] for r in rows] == ["run-2", "run-1"]
    assert rows[0] | {"started_at": None, "finished_at": None} == {
        "run_id": "run-2", "experiment_id": None, "started_at": None, "finished_at": None,
        "status": "completed", "tasks_planned": 3, "tasks_succeeded": 2, "tasks_failed": 1,
        "tasks_error": 0, "cost_usd": 1.5, "tasks_ungraded": 0, "cost_complete": True,
        "grader_cost_usd": 0.0, "cut_off": False,
    }
    code, out, _ = invoke(two_runs, "runs", "--limit", "1")
    assert code == 0
    assert out.splitlines()[0].split("\t")[0] == "run_id"
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == ["run-2"]


def test_show_table_and_json(two_runs: Path) -> None:
    code, out, _ = invoke(two_runs, "show", "run-1")
    assert code == 0
    assert out.splitlines()[0].startswith("run run-1 completed: 2/3 run, 1 succeeded, 1 failed")
    assert "default/b/00\tFAILURE" in out
    code, out, _ = invoke(two_runs, "show", "latest", "--json")
    summary = json.loads(out)
    assert summary["run_id"] == "run-2" and summary["tasks_succeeded"] == 2


def test_ambiguous_and_unknown_runs_are_one_line_errors(two_runs: Path) -> None:
    code, _, err = invoke(two_runs, "show", "run-")
    assert code == 2
    assert err.count("\n") == 1 and "run-1" in err and "run-2" in err
    code, _, err = invoke(two_runs, "show", "nope")
    assert code == 2 and "no run 'nope'" in err


def test_events_ndjson_filters(two_runs: Path) -> None:
    code, out, _ = invoke(two_runs, "events", "run-2", "--type", "task.completed")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [e["task_key"] for e in lines] == KEYS
    assert {e["type"] for e in lines} == {"task.completed"}
    assert lines[0]["payload"]["final_status"] == "FAILURE"
    code, out, _ = invoke(two_runs, "events", "run-1", "--task", KEYS[1])
    types = [json.loads(line)["type"] for line in out.splitlines()]
    assert types == ["task.started", "task.output", "task.usage", "task.completed"]
    seqs = [json.loads(line)["seq"] for line in out.splitlines()]
    assert seqs == sorted(seqs)


def test_sql_formats_and_counts(two_runs: Path) -> None:
    code, out, _ = invoke(two_runs, "sql", "SELECT count(*) AS n FROM task_results")
    assert code == 0 and out.split() == ["n", "5"]
    code, out, _ = invoke(two_runs, "sql", "SELECT run_id, final_status FROM task_results "
                          "WHERE task_key = 'default/a/00' ORDER BY run_id", "--format", "json")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"run_id": "run-1", "final_status": "SUCCESS"},
        {"run_id": "run-2", "final_status": "FAILURE"},
    ]
    code, out, _ = invoke(two_runs, "sql", "SELECT run_id, tasks_failed FROM runs ORDER BY 1",
                          "--format", "csv")
    assert out.splitlines() == ["run_id,tasks_failed", "run-1,1", "run-2,1"]


@pytest.mark.parametrize("statement", [
    "DELETE FROM events", "UPDATE events SET type = 'x'", "DROP TABLE events",
    "INSERT INTO meta VALUES ('k', 'v')", "CREATE TABLE t (x)",
])
def test_sql_refuses_writes(two_runs: Path, statement: str) -> None:
    before = Path(two_runs).read_bytes()
    with Ledger(two_runs, read_only=True) as ledger:
        count = ledger.count()
    code, _, err = invoke(two_runs, "sql", statement)
    assert code == 2
    assert err.startswith("Error:") and err.count("\n") == 1 and "Traceback" not in err
    assert Path(two_runs).read_bytes() == before
    with Ledger(two_runs, read_only=True) as ledger:
        assert ledger.count() == count == 24


def test_sql_syntax_error_is_one_line(two_runs: Path) -> None:
    code, _, err = invoke(two_runs, "sql", "SELEC 1")
    assert code == 2 and "syntax error" in err and err.count("\n") == 1


def test_diff_marks_regressions_fixes_and_added(two_runs: Path) -> None:
    code, out, _ = invoke(two_runs, "diff", "run-1", "run-2", "--json")
    assert code == 1  # a regression gates CI (--fail-on regression, the default)
    result = json.loads(out)
    changes = {t["task_key"]: t["change"] for t in result["tasks"]}
    # KEYS[2] was planned in run-1 and never started there: not run, not "added".
    assert changes == {KEYS[0]: "regression", KEYS[1]: "fix", KEYS[2]: "not_run"}
    assert result["counts"]["regression"] == 1 and result["counts"]["fix"] == 1
    first = result["tasks"][0]
    assert first["score_delta"] == -1.0 and first["cost_delta"] == 0.0
    code, out, _ = invoke(two_runs, "diff", "run-1", "run-2")
    assert code == 1
    assert ("1 regression, 1 fix, 0 changed, 1 not run, 0 added, 0 removed, 0 unchanged"
            in out)
    # Regressions first, then fixes, then the rest.
    assert [line.split("\t")[1] for line in out.splitlines()[1:4]] == [
        "regression", "fix", "not_run"]
    assert invoke(two_runs, "diff", "run-1", "run-2", "--fail-on", "never")[0] == 0
    assert invoke(two_runs, "diff", "run-2", "run-2", "--fail-on", "any-change")[0] == 0
    assert invoke(two_runs, "diff", "run-2", "run-1", "--fail-on", "any-change")[0] == 1


WRITER = """
import sys, time
from evalledger.ledger import Ledger, RunStarted, TaskOutput, RunFinished
ledger = Ledger(sys.argv[1])
ledger.append([RunStarted(run_id="live", planned=["default/t/00"])])
for i in range(5):
    time.sleep(0.15)
    ledger.append([TaskOutput(run_id="live", task_key="default/t/00", line=f"l{i}", n=i)])
ledger.append([RunFinished(run_id="live", status="completed")])
"""


def _has_run(db: Path, run_id: str) -> bool:
    with Ledger(db, read_only=True) as ledger:
        return run_id in ledger.run_ids()


def test_events_follow_tails_a_run_until_it_finishes(db_path: Path) -> None:
    Ledger(db_path).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path)])
    try:
        wait_until(lambda: _has_run(db_path, "live") or writer.poll() is not None,
                   "the writer to start the run")
        with no_hang():  # in-process, against the writer in its own process
            result = CliRunner().invoke(cli, ["--ledger", str(db_path), "events", "live",
                                              "--follow"])
        assert writer.wait(timeout=PATIENCE) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert result.exception is None or isinstance(result.exception, SystemExit), result
    assert result.exit_code == 0, result.stderr
    types = [json.loads(line)["type"] for line in result.stdout.splitlines()]
    assert types == ["run.started"] + ["task.output"] * 5 + ["run.finished"]


def test_diff_pairs_runs_of_one_variant_each_and_says_so(tmp_path: Path) -> None:
    """Two experiments' runs, their one variant named apart (opus, sonnet): their tasks
    pair, and the regression is found; --variants pairs as asked."""
    import yaml

    from .helpers import evalledger, write_tasks

    write_tasks(tmp_path / "tasks", {name: {"success_criteria": [{"type": "exit_code"}]}
                                     for name in ("t0", "t1")})
    db = tmp_path / "l.db"
    for variant, command in (("opus", "true"), ("sonnet", 'test "$EVALLEDGER_TASK_KEY" '
                                                           '!= sonnet/t1/00')):
        (tmp_path / f"{variant}.yaml").write_text(yaml.safe_dump({
            "experiment_id": variant, "tasks": ["tasks/"],
            "variants": [{"variant_id": variant, "command": command}]}))
        evalledger(tmp_path, db, "run", "-e", str(tmp_path / f"{variant}.yaml"),
                   "--run-id", variant)
    done = evalledger(tmp_path, db, "diff", "opus", "sonnet", "--json")
    assert done.returncode == 1  # a regression
    found = json.loads(done.stdout)
    assert found["variants"] == {"opus": "sonnet"}
    assert {t["task_key"]: t["change"] for t in found["tasks"]} == {
        "sonnet/t0/00": "unchanged", "sonnet/t1/00": "regression"}
    assert done.stderr == "variant opus of opus paired with sonnet of sonnet\n"
    apart = evalledger(tmp_path, db, "diff", "opus", "sonnet", "--json", "--variants",
                       "x=y")
    assert json.loads(apart.stdout)["counts"]["added"] == 2 and apart.returncode == 0
    bad = evalledger(tmp_path, db, "diff", "opus", "sonnet", "--variants", "opus")
    assert bad.returncode == 2 and "is not A=B" in bad.stderr
