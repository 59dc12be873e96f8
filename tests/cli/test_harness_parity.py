"""What users of the old harness rely on (issue 12), end to end on real runs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from evalledger.ledger import Ledger, TaskCompleted

from .helpers import evalledger, run_json, write_task

CLAUDE_INIT = ('{"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", '
               '"claude_code_version": "%s", "session_id": "s"}')


def test_a_task_without_criteria_runs_and_is_not_graded(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "plain.yaml", "echo hi", criteria=[])
    (tmp_path / "tasks" / "plain.yaml").write_text("command: echo hi\n")
    write_task(tmp_path / "tasks" / "judged.yaml", "echo hi")
    write_task(tmp_path / "tasks" / "broken.yaml", "exit 3")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "g")
    assert result.returncode == 1  # broken failed; NOT_GRADED alone would not fail the run
    summary = run_json(tmp_path, "g")
    assert (summary["tasks_run"], summary["tasks_succeeded"], summary["tasks_failed"],
            summary["tasks_error"], summary["tasks_ungraded"]) == (3, 1, 1, 0, 1)
    assert summary["pass_rate"] == 0.5  # over the two graded tasks
    rows = {r["task_key"]: r for r in summary["tasks"]}
    assert rows["default/plain/00"]["final_status"] == "NOT_GRADED"
    assert rows["default/plain/00"]["category"] == "ungraded"
    assert rows["default/plain/00"]["weighted_score"] is None
    assert "1 ungraded" in result.stdout
    view = evalledger(tmp_path, tmp_path / "l.db", "sql",
                      "SELECT tasks_ungraded FROM runs WHERE run_id = 'g'")
    assert view.stdout.splitlines() == ["tasks_ungraded", "1"]
    assert "NOT_GRADED" in (tmp_path / "runs" / "g" / "run.md").read_text()
    only = tmp_path / "only"
    (only / "plain.yaml").parent.mkdir()
    (only / "plain.yaml").write_text("command: echo hi\n")
    assert evalledger(tmp_path, tmp_path / "l.db", "run", str(only)).returncode == 0


def test_versions_the_agent_states_are_agreed_on_or_drift(tmp_path: Path) -> None:
    for name, version in (("a", "2.0.14"), ("b", "2.0.14"), ("c", "2.0.15")):
        write_task(tmp_path / "tasks" / f"{name}.yaml", f"echo '{CLAUDE_INIT % version}'")
        data = yaml.safe_load((tmp_path / "tasks" / f"{name}.yaml").read_text())
        data["stream_format"] = "claude-code"
        (tmp_path / "tasks" / f"{name}.yaml").write_text(yaml.safe_dump(data))
    write_task(tmp_path / "tasks" / "native.yaml",
               "echo '{\"type\": \"version\", \"my-agent\": \"1.2.3\"}'")
    assert evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "v"
                      ).returncode == 0
    summary = run_json(tmp_path, "v")
    assert summary["version_drift"]["claude_code_version"] == {"2.0.14": 2, "2.0.15": 1}
    assert "claude_code_version" not in summary["version_consensus"]
    with Ledger(tmp_path / "l.db", read_only=True) as ledger:
        completed = {e.task_key: e for e in ledger.events("v", types={"task.completed"})
                     if isinstance(e, TaskCompleted)}
    assert completed["default/native/00"].environment_info["my-agent"] == "1.2.3"
    assert completed["default/a/00"].environment_info["claude_code_version"] == "2.0.14"
    md = (tmp_path / "runs" / "v" / "run.md").read_text()
    assert "**claude_code_version differs across tasks**: 2.0.14 (2), 2.0.15 (1)" in md


def test_the_models_actually_used_are_recorded_and_agreed_on(tmp_path: Path) -> None:
    for name, model in (("a", "claude-sonnet-4-5"), ("b", "claude-haiku-4-5")):
        line = json.dumps({"type": "usage", "model": model, "input_tokens": 10})
        write_task(tmp_path / "tasks" / f"{name}.yaml", f"echo '{line}'")
    evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "m")
    summary = run_json(tmp_path, "m")
    assert summary["version_drift"]["model"] == {"claude-haiku-4-5": 1, "claude-sonnet-4-5": 1}
    models = evalledger(tmp_path, tmp_path / "l.db", "sql",
                        "SELECT task_key, model FROM task_results ORDER BY task_key")
    assert models.stdout.splitlines()[1:] == ["default/a/00\tclaude-sonnet-4-5",
                                              "default/b/00\tclaude-haiku-4-5"]


def test_unpriced_models_are_named_with_their_tokens(tmp_path: Path) -> None:
    line = json.dumps({"type": "usage", "model": "house-llm", "input_tokens": 1200,
                       "output_tokens": 34})
    write_task(tmp_path / "tasks" / "t.yaml", f"echo '{line}'")
    result = evalledger(tmp_path, tmp_path / "l.db", "run", "tasks", "--run-id", "u")
    assert "a model with no price: house-llm (1,234 tokens)" in result.stdout
    show = evalledger(tmp_path, tmp_path / "l.db", "show", "u")
    assert "cost is a floor: a model with no price: house-llm (1,234 tokens)" in show.stdout
    md = (tmp_path / "runs" / "u" / "run.md").read_text()
    assert "house-llm (1,234 tokens)" in md and "Total cost: unknown" in md
