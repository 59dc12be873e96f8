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


def _suite(tmp_path: Path) -> Path:
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    write_task(tmp_path / "tasks" / "fails.yaml", "exit 1")
    write_task(tmp_path / "tasks" / "broken.yaml", "true",
               criteria=[{"type": "exit_code", "equals": 0}])
    (tmp_path / "tasks" / "broken.yaml").write_text(
        (tmp_path / "tasks" / "broken.yaml").read_text() + "workdir: missing\n")
    return tmp_path / "tasks"


def _resumed(db: Path, run_id: str) -> list:
    with Ledger(db, read_only=True) as ledger:
        return list(ledger.events(run_id, types={"run.resumed"}))


def test_resume_reruns_failures_chosen_keys_and_adds_new_tasks(tmp_path: Path) -> None:
    tasks = _suite(tmp_path)
    db = tmp_path / "l.db"
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r").returncode == 1
    # Nothing unfinished: a plain resume has nothing to do.
    assert "nothing to resume" in evalledger(tmp_path, db, "resume", "r").stdout
    (tasks / "fails.yaml").write_text((tasks / "fails.yaml").read_text().replace(
        "exit 1", "echo fixed"))
    again = evalledger(tmp_path, db, "resume", "r", "--rerun-failed")
    assert again.returncode == 1  # broken (BUILD_FAILED, an error) is still there
    rows = {r["task_key"]: r for r in run_json(tmp_path, "r")["tasks"]}
    assert (rows["default/fails/00"]["final_status"], rows["default/fails/00"]["attempts"]) == (
        "SUCCESS", 2)
    assert rows["default/broken/00"]["attempts"] == 1  # not asked for
    chosen = evalledger(tmp_path, db, "resume", "r", "--rerun", "default/o*")
    assert chosen.returncode == 1
    assert {r["task_key"]: r["attempts"] for r in run_json(tmp_path, "r")["tasks"]}[
        "default/ok/00"] == 2
    assert "--rerun 'nope/*' matches no task key" in evalledger(
        tmp_path, db, "resume", "r", "--rerun", "nope/*").stderr
    write_task(tasks / "new.yaml", "echo new")  # a task defined since the run began
    refused = evalledger(tmp_path, db, "resume", "r", "--strict")
    assert refused.returncode == 2 and "task default/new/00: new" in refused.stderr
    added = evalledger(tmp_path, db, "resume", "r")
    assert "adding 1 new task(s) to the run: default/new/00" in added.stderr
    summary = run_json(tmp_path, "r")
    assert summary["tasks_planned"] == 4 and summary["tasks_succeeded"] == 3
    first, second, third = _resumed(db, "r")[-3:]  # what each resume asked, recorded
    assert (first.rerun_failed, first.rerun, first.added) == (True, [], [])
    assert (second.rerun_failed, second.rerun) == (False, ["default/o*"])
    assert third.added == ["default/new/00"] and third.to_run == ["default/new/00"]


def test_model_override_and_a_reproducible_sample(tmp_path: Path) -> None:
    for i in range(6):
        line = json.dumps({"type": "usage", "input_tokens": 10})
        write_task(tmp_path / "tasks" / f"t{i}.yaml", f"echo '{line}'")
    db = tmp_path / "l.db"
    first = evalledger(tmp_path, db, "run", "tasks", "--run-id", "s1", "--sample", "3",
                       "--model", "claude-haiku-4-5")
    seed = int(first.stderr.split("--seed ")[1].split()[0])
    second = evalledger(tmp_path, db, "run", "tasks", "--run-id", "s2", "--sample", "3",
                        "--seed", str(seed), "--model", "claude-haiku-4-5")
    assert first.returncode == second.returncode == 0
    keys = [[r["task_key"] for r in run_json(tmp_path, run)["tasks"]] for run in ("s1", "s2")]
    assert len(keys[0]) == 3 and keys[0] == keys[1]  # the same seed, the same subset
    summary = run_json(tmp_path, "s1")
    assert summary["models"] == ["claude-haiku-4-5"] and summary["cost_complete"]
    with Ledger(db, read_only=True) as ledger:
        [opening] = ledger.events("s1", types={"run.started"})
    assert (opening.config.sample, opening.config.seed, opening.config.model) == (
        3, seed, "claude-haiku-4-5")
    # A resume resolves the same subset: nothing drifted, nothing new.
    resumed = evalledger(tmp_path, db, "resume", "s1", "--strict")
    assert "nothing to resume" in resumed.stdout, resumed.stderr


def test_skipped_files_are_said_and_fail_the_run_unless_allowed(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks" / "ok.yaml", "echo ok")
    (tmp_path / "tasks" / "Fix-Discount.yaml").write_text("command: echo hi\n")
    (tmp_path / "tasks" / "later.yaml").write_text("command: echo hi\nskip: true\n")
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", "tasks", "--run-id", "k")
    assert result.returncode == 1
    assert "1 of 1 tasks run, 1 succeeded, 0 failed, 0 error; 1 task file(s) skipped" in (
        result.stdout)
    assert "Fix-Discount.yaml" in result.stderr and "later.yaml: skip: true" in result.stderr
    skipped = {Path(k["path"]).name: k for k in run_json(tmp_path, "k")["skipped_tasks"]}
    assert skipped["later.yaml"]["deliberate"] and skipped["later.yaml"]["reason"] == "skip: true"
    assert not skipped["Fix-Discount.yaml"]["deliberate"]
    allowed = evalledger(tmp_path, db, "run", "tasks", "--allow-skipped")
    assert allowed.returncode == 0
    (tmp_path / "tasks" / "Fix-Discount.yaml").unlink()
    assert evalledger(tmp_path, db, "run", "tasks").returncode == 0  # skip: true alone
