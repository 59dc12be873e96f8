"""evalledger import: old-harness run folders, built from the field list of
docs/import.md (both token shapes, a nested sub-run, a malformed file, a file without
final_status, an unpriced model, a version that differs on one task), into a real
ledger; the summary is checked against what the files imply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalledger.ledger import Ledger, TaskCompleted, TaskEmitted, TaskStarted
from evalledger.legacy import key_of, read_run

from .helpers import evalledger

RUN = "2026-03-01_10-00-00"


def task_json(task_id: str, status: str | None, *, tokens: str = "new",
              cost: float | None = 0.01, model: str = "claude-sonnet-4-5",
              cli: str = "1.0.0", variant: str = "default", **extra: Any) -> dict[str, Any]:
    usage: dict[str, Any] = (
        {"uncached_input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 5,
         "cache_read_input_tokens": 7, "input_tokens": 112, "total_cost_usd": cost}
        if tokens == "new" else {"input_tokens": 100, "output_tokens": 20,
                                 "total_cost_usd": cost})
    data: dict[str, Any] = {
        "task_id": task_id, "task_description": f"do {task_id}", "variant_id": variant,
        "agent_type": "claude-code", "model_used": model,
        "started_at": "2026-03-01T10:00:05.250000", "completed_at": "2026-03-01T10:01:05",
        "duration_seconds": 59.75, "weighted_score": 1.0 if status == "SUCCESS" else 0.0,
        "success_criteria_results": [
            {"criterion_type": "file_exists", "score": 1.0 if status == "SUCCESS" else 0.0,
             "details": "out.py", "pass_threshold": 0.9}],
        "environment_info": {"cli_version": cli, "coder_eval": "0.9.1"},
        "total_token_usage": usage, "iteration_count": 3, "some_future_field": {"kept": True},
        **extra,
    }
    if status is not None:
        data["final_status"] = status
    return data


def write(folder: Path, relative: str, data: Any) -> Path:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def old_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    run = root / RUN
    write(run, "run.json", {
        "run_id": RUN, "start_time": "2026-03-01T10:00:00", "end_time": "2026-03-01T10:30:00",
        "max_parallel": 4, "skipped_tasks": [{"path": "tasks/broken.yaml", "reason": "bad"}],
        "task_results": [
            {"task_id": "t1", "variant_id": "default", "replicate_index": 0,
             "status": "SUCCESS", "tags": ["smoke"]},
            # A batch-level failure: a row, no task.json.
            {"task_id": "crashed", "variant_id": "default", "replicate_index": None,
             "status": "ERROR", "duration": 1.5, "error_message": "docker build failed",
             "input_tokens": 0, "output_tokens": 0, "total_cost_usd": None},
        ],
    })
    write(run, "default/t1/00/task.json", task_json("t1", "SUCCESS"))
    write(run, "default/t1/01/task.json", task_json("t1", "FAILURE", tokens="old", cost=0.02))
    write(run, "default/suite/row-1/00/task.json", task_json(
        "suite/row-1", "ERROR", error_message="agent crashed",
        error_details={"error_category": "agent_crash"}))
    write(run, "default/t2/00/task.json", task_json("t2", "NOT_GRADED", weighted_score=None))
    write(run, "default/t3/00/task.json", task_json("t3", "TIMEOUT", cost=None,
                                                    model="mystery-model"))
    write(run, "default/t4/00/task.json", task_json("t4", "SUCCESS", cli="2.0.0"))
    write(run, "default/turns/00/task.json", task_json(
        "turns", "MAX_TURNS_EXHAUSTED", iterations=[
            {"iteration": 1, "model_used": "m-a",
             "token_usage": {"input_tokens": 10, "output_tokens": 1, "total_cost_usd": 0.5}},
            {"iteration": 2, "model_used": "m-b",
             "token_usage": {"input_tokens": 20, "output_tokens": 2, "total_cost_usd": None}},
        ]))
    write(run, "default/bad/00/task.json", "{not json")
    write(run, "default/nostatus/00/task.json", task_json("nostatus", None))
    # Not results: a pre-grade snapshot and a half-written file.
    write(run, "default/t1/00/task.execute.json", task_json("t1", "FAILURE"))
    write(run, "default/t1/00/task.json.tmp", "{")
    # A nested sub-run (say, a task that ran the harness itself): a run of its own.
    inner = run / "default/t1/00/artifacts/inner"
    write(inner, "run.json", {"run_id": "inner-run", "start_time": "2026-03-01T10:00:10"})
    write(inner, "default/x/00/task.json", task_json("x", "SUCCESS"))
    return root


def summary(db: Path, run_id: str) -> dict[str, Any]:
    result = evalledger(db.parent, db, "show", run_id, "--json")
    assert result.returncode == 0, result
    return json.loads(result.stdout)


def test_an_old_run_is_imported_with_the_counts_its_files_imply(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    result = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert result.returncode == 1, result  # two files could not be imported: said, exit 1
    assert f"{RUN}: imported 8 attempt(s), 2 unfinished" in result.stdout
    assert "inner-run: imported 1 attempt(s), 0 unfinished" in result.stdout
    assert "default/bad/00/task.json: not JSON" in result.stderr
    assert "default/nostatus/00/task.json: no final_status" in result.stderr

    s = summary(db, RUN)
    assert (s["tasks_planned"], s["tasks_run"], s["tasks_unfinished"]) == (10, 8, 2)
    assert (s["tasks_succeeded"], s["tasks_failed"], s["tasks_error"],
            s["tasks_ungraded"]) == (2, 3, 2, 1)
    assert s["status"] == "completed"
    assert (s["started_at"], s["finished_at"]) == ("2026-03-01T10:00:00.000000Z",
                                                   "2026-03-01T10:30:00.000000Z")
    assert s["max_parallel"] == 4
    assert [k["path"] for k in s["skipped_tasks"]] == ["tasks/broken.yaml"]
    # A missing price stays missing: the totals are floors, never booked as $0.
    assert s["cost_complete"] is False
    assert s["total_cost_usd"] == pytest.approx(0.01 * 4 + 0.02 + 0.5)  # t3: no price
    unpriced = {m["model"] for m in s["usage_by_model"] if not m["cost_complete"]}
    assert unpriced == {"mystery-model", "m-b"}
    # Both token shapes: the old one's input_tokens is the uncached slice.
    rows = {r["task_key"]: r for r in s["tasks"]}
    assert rows["default/t1/00"]["tokens"] == {"input_tokens": 100, "output_tokens": 20,
                                               "cache_write_tokens": 5,
                                               "cache_read_tokens": 7}
    assert rows["default/t1/01"]["tokens"]["input_tokens"] == 100
    assert rows["default/t1/01"]["tokens"]["cache_read_tokens"] == 0
    assert rows["default/suite/row-1/00"]["task_id"] == "suite/row-1"
    assert rows["default/crashed/00"]["final_status"] == "ERROR"
    assert rows["default/crashed/00"]["error_message"] == "docker build failed"
    assert rows["default/t1/00"]["tags"] == ["smoke"]
    assert rows["default/bad/00"]["final_status"] is None  # unfinished
    # A version that differs on one task is drift; the rest agree.
    assert s["version_drift"]["cli_version"] == {"1.0.0": 6, "2.0.0": 1}
    assert s["version_consensus"]["coder_eval"] == "0.9.1"

    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(RUN))
    completed = {e.task_key: e for e in events if isinstance(e, TaskCompleted)}
    assert completed["default/suite/row-1/00"].imported == {"error_category": "agent_crash"}
    assert [c.passed for c in completed["default/t1/00"].criteria] == [True]
    started = [e for e in events if isinstance(e, TaskStarted)]
    assert {e.imported["source"] for e in started if e.imported} >= {
        "default/t1/00/task.json", "run.json#default/crashed/00"}
    # The file itself is kept whole: fields this reader does not map are not lost.
    [kept] = [e for e in events if isinstance(e, TaskEmitted)
              and e.data["imported_from"] == "default/t1/00/task.json"]
    assert kept.data["record"]["some_future_field"] == {"kept": True}
    # Every reader sees it: the SQL views too.
    sql = evalledger(old_runs.parent, db, "sql", "SELECT count(*) FROM task_results WHERE "
                     f"run_id = '{RUN}'", "--format", "json")
    assert json.loads(sql.stdout) == {"count(*)": 8}
    assert evalledger(old_runs.parent, db, "verify", "--deep").returncode == 0


def test_a_second_import_adds_nothing_and_a_changed_file_is_named(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    with Ledger(db, read_only=True) as ledger:
        before = ledger.count()
    again = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert f"{RUN}: imported 0 attempt(s), 2 unfinished, 8 already imported" in again.stdout
    assert "(0 events)" in again.stdout
    with Ledger(db, read_only=True) as ledger:
        assert ledger.count() == before

    write(old_runs / RUN, "default/t4/00/task.json", task_json("t4", "FAILURE"))
    changed = evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    assert ("changed since it was imported (kept as imported): "
            f"{old_runs / RUN / 'default/t4/00/task.json'}") in changed.stderr
    assert summary(db, RUN)["tasks_succeeded"] == 2  # as imported
    with Ledger(db, read_only=True) as ledger:
        assert ledger.count() == before


def test_event_ids_come_from_the_files_not_the_ledger(old_runs: Path, tmp_path: Path) -> None:
    ids = []
    for name in ("a.db", "b.db"):
        evalledger(tmp_path, tmp_path / name, "import", str(old_runs / RUN), "--tz", "UTC")
        with Ledger(tmp_path / name, read_only=True) as ledger:
            ids.append([e.event_id for e in ledger.events(RUN) if e.type != "run.snapshot"])
    assert ids[0] == ids[1] and len(ids[0]) > 20


def test_times_without_an_offset_are_read_in_the_zone_given(old_runs: Path) -> None:
    run = read_run(old_runs / RUN, tz=__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert run.events[0].ts == "2026-03-01T09:00:00.000000Z"  # UTC+1 in March


def test_dry_run_appends_nothing(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    result = evalledger(old_runs.parent, db, "import", str(old_runs), "--dry-run")
    assert f"{RUN}: would import 8 attempt(s), 2 unfinished" in result.stdout
    assert not db.exists()


def test_a_native_run_of_the_same_id_is_not_overwritten(old_runs: Path) -> None:
    db = old_runs.parent / "l.db"
    suite = old_runs.parent / "suite"
    write(suite, "t.yaml", "command: 'true'\n")
    assert evalledger(old_runs.parent, db, "run", str(suite), "--run-id", RUN).returncode == 0
    result = evalledger(old_runs.parent, db, "import", str(old_runs / RUN))
    assert result.returncode == 1
    assert f"{RUN}: not imported from" in result.stderr and "(not imported)" in result.stderr
    assert summary(db, RUN)["tasks_planned"] == 1


@pytest.mark.parametrize(("relative", "key"), [
    ("default/t1/00/task.json", ("default", "t1", 0)),
    ("v2/suite/row/07/task.json", ("v2", "suite/row", 7)),
    ("default/t1/task.json", ("default", "t1", 0)),
])
def test_keys_come_from_the_folder_layout(relative: str, key: tuple[str, str, int]) -> None:
    assert key_of(Path(relative)) == key


def test_no_run_folder_is_one_line(tmp_path: Path) -> None:
    result = evalledger(tmp_path, tmp_path / "l.db", "import", str(tmp_path))
    assert result.returncode == 2 and "no run.json under" in result.stderr


def test_imported_runs_show_in_the_viewer(old_runs: Path) -> None:
    from starlette.testclient import TestClient

    from evalledger.viewer import create_app

    db = old_runs.parent / "l.db"
    evalledger(old_runs.parent, db, "import", str(old_runs), "--tz", "UTC")
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        assert RUN in client.get("/").text
        api = client.get(f"/api/runs/{RUN}/summary").json()
        assert api["tasks_run"] == 8 and api["tasks_unfinished"] == 2
        page = client.get(f"/runs/{RUN}/tasks/default/suite/row-1/00")
        assert page.status_code == 200 and "agent crashed" in page.text
