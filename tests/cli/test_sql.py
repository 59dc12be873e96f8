"""``evalledger sql``: the README's audit queries run as pasted (comment line and
``:run`` included) with ``--param``; ``sql --help`` lists the views as they are.

Real processes on a real ledger.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
)
from evalledger.statuses import FinalStatus, RunStatus

from ..ledger.audits import QUERIES, README
from .helpers import COMMAND, PATIENCE, _env

K1, K2 = "default/add/00", "default/sub/00"


def pasted() -> dict[str, str]:
    """Each README audit as a person copies it from the README: its `-- name: ...`
    comment line, then the query (as tests/ledger/test_audit_queries.py extracts it)."""
    text = README.read_text(encoding="utf-8")
    comments = {line[3:].partition(":")[0]: line for line in text.splitlines()
                if line.startswith("-- ")}
    return {name: f"{comments[name]}\n{query}" for name, query in QUERIES.items()}


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sql") / "l.db"
    with Ledger(db) as ledger:
        for run_id, add, sub in (("run-a", FinalStatus.SUCCESS, FinalStatus.SUCCESS),
                                 ("run-b", FinalStatus.FAILURE, FinalStatus.SUCCESS)):
            ledger.append([
                RunStarted(run_id=run_id, planned=[K1, K2]),
                TaskStarted(run_id=run_id, task_key=K1, task_id="add", tags=["math"]),
                TaskUsage(run_id=run_id, task_key=K1, model="claude-sonnet-4-5",
                          input_tokens=10, cost_usd=0.5),
                TaskCompleted(run_id=run_id, task_key=K1, final_status=add,
                              category=add.category, duration_seconds=3.0),
                TaskStarted(run_id=run_id, task_key=K2, task_id="sub", tags=["math"]),
                TaskUsage(run_id=run_id, task_key=K2, model="claude-sonnet-4-5",
                          input_tokens=5, cost_usd=0.25),
                TaskInterrupted(run_id=run_id, task_key=K2),
                TaskStarted(run_id=run_id, task_key=K2, task_id="sub", tags=["math"],
                            attempt=2),
                TaskCompleted(run_id=run_id, task_key=K2, attempt=2, final_status=sub,
                              category=sub.category, duration_seconds=1.0),
                RunFinished(run_id=run_id, status=RunStatus.COMPLETED),
            ])
    return db


def sql(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "--ledger", str(db), "sql", *args], cwd=db.parent,
                          env=_env(), capture_output=True, text=True, timeout=PATIENCE,
                          check=False)


def rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()[1:]]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_every_readme_audit_runs_as_pasted_with_params(audited: Path) -> None:
    queries = pasted()
    assert len(queries) == 5 and all(q.startswith("-- ") for q in queries.values())
    expected = {
        "cost per model": [["claude-sonnet-4-5", "0.75", "0", "15"]],
        "failures per tag": [["math", "0", "0", "2"]],
        "slowest tasks": [[K1, "3.0", "SUCCESS"], [K2, "1.0", "SUCCESS"]],
        "regressions between two runs": [[K1, "SUCCESS", "FAILURE"]],
        "spend of interrupted attempts": [[K2, "1", "0.25", "5"]],
    }
    for name, query in queries.items():
        params = (["--param", "a=run-a", "--param", "b=run-b"] if ":a" in query
                  else ["--param", "run=run-a"])
        done = sql(audited, query, *params)
        assert done.returncode == 0, (name, done.stderr)
        assert rows(done.stdout) == expected[name], (name, done.stdout)
        # The query first or last, options before or after it: the same answer.
        again = sql(audited, *params, query)
        assert again.stdout == done.stdout, (name, again.stderr)


def test_a_parameter_the_query_names_and_nobody_gives_is_one_line(audited: Path) -> None:
    done = sql(audited, pasted()["slowest tasks"])
    assert done.returncode == 2
    assert done.stderr == "Error: the query names :run: give its value with --param run=VALUE\n"
    bad = sql(audited, "SELECT :run", "--param", "run")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "'run' is not NAME=VALUE" in bad.stderr


def test_sql_help_names_every_view_and_column_there_is(tmp_path: Path) -> None:
    done = subprocess.run([*COMMAND, "sql", "--help"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=PATIENCE, check=True)
    help_text = re.sub(r"\s+", " ", done.stdout)
    with Ledger(tmp_path / "fresh.db") as ledger:  # the schema as this version makes it
        _, views = ledger.query("SELECT name FROM sqlite_master WHERE type = 'view'")
    conn = sqlite3.connect(tmp_path / "fresh.db")
    try:
        for name in [v for (v,) in views] + ["events"]:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({name})")]
            assert f"{name}: " in help_text, name
            listed = help_text.split(f"{name}: ", 1)[1]
            assert ", ".join(columns) in listed, (name, columns)
    finally:
        conn.close()


def test_a_float_reads_as_its_decimal_not_its_last_bits(audited: Path) -> None:
    """#49: `sql` printed 0.5308000000000002; JSON and CSV keep every bit."""
    done = sql(audited, "SELECT 0.1 + 0.2 AS x, 1.0 / 3 AS third")
    assert done.returncode == 0, done.stderr
    assert rows(done.stdout)[-1] == ["0.3", "0.333333333333333"]
    kept = sql(audited, "SELECT 0.1 + 0.2 AS x", "--format", "json")
    assert kept.stdout.strip() == '{"x": 0.30000000000000004}'
