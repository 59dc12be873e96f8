"""``run --stall-timeout``, ``--retries`` and ``--max-infra-failures`` from the command
line: the breaker's exit code and line, and a resume once the machine is mended."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import evalledger, write_tasks


def test_the_breaker_exits_3_with_one_line_and_a_resume_finishes_the_run(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "agent"  # missing: every attempt fails to start
    write_tasks(tmp_path / "tasks", {f"t{i}": {"command": [str(agent)],
                                               "success_criteria": [{"type": "exit_code"}]}
                                     for i in range(5)})
    db = tmp_path / "l.db"
    ran = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "r", "-j", "1",
                     "--max-infra-failures", "2")
    assert ran.returncode == 3, ran
    said = [line for line in ran.stderr.splitlines() if line.startswith("run r stopped")]
    assert said == [said[0]] and "infrastructure failures in a row reached " \
        "--max-infra-failures" in said[0] and "resume r" in said[0]
    shown = json.loads(evalledger(tmp_path, db, "show", "r", "--json").stdout)
    assert shown["status"] == "infra_stopped" and shown["tasks_infra"] >= 2
    assert {t["failure_class"] for t in shown["tasks"] if t["final_status"]} == {"infra"}
    agent.write_text("#!/bin/sh\necho ok\n")
    agent.chmod(0o755)
    resumed = evalledger(tmp_path, db, "resume", "r", "--retry-errors")
    assert resumed.returncode == 0, resumed
    shown = json.loads(evalledger(tmp_path, db, "show", "r", "--json").stdout)
    assert (shown["status"], shown["tasks_succeeded"], shown["tasks_infra"]) == (
        "completed", 5, 0)


def test_stall_and_retries_from_the_command_line(tmp_path: Path) -> None:
    """A task that hangs in silence on its first try only: --stall-timeout ends it,
    --retries tries it again, and the run succeeds with both attempts recorded."""
    marker = tmp_path / "tried"
    write_tasks(tmp_path / "tasks", {"once": {
        "command": f"if [ -e {marker} ]; then echo fine; else touch {marker}; sleep 600; fi",
        "timeout": 300, "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "l.db"
    ran = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "s",
                     "--stall-timeout", "0.5", "--retries", "2", "--retry-backoff", "0")
    assert ran.returncode == 0, ran
    assert "STALLED" in ran.stdout  # the first attempt's line
    assert "[default/once/00] stalled: no output for" in ran.stderr
    [row] = json.loads(evalledger(tmp_path, db, "show", "s", "--json").stdout)["tasks"]
    assert (row["final_status"], row["attempts"]) == ("SUCCESS", 2)
    stalls = evalledger(tmp_path, db, "sql", "SELECT count(*) FROM events "
                        "WHERE type = 'task.stalled'").stdout.split()
    assert stalls[-1] == "1"


def test_pass_rates_leave_infrastructure_failures_out_and_say_so(tmp_path: Path) -> None:
    """Two succeed, one fails its criteria, one cannot start: 2 of 3, the fourth said."""
    write_tasks(tmp_path / "tasks", {
        "ok1": {"command": "true", "success_criteria": [{"type": "exit_code"}]},
        "ok2": {"command": "true", "success_criteria": [{"type": "exit_code"}]},
        "bad": {"command": "false", "success_criteria": [{"type": "exit_code"}]},
        "broken": {"command": [str(tmp_path / "missing")],
                   "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "l.db"
    evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", "r")
    shown = evalledger(tmp_path, db, "show", "r").stdout.splitlines()[0]
    assert ("pass rate 66.7% [20.8%, 93.9%] (95% Wilson) (1 infrastructure failure(s) left "
            "out; --count-infra counts them)") in shown
    counted = evalledger(tmp_path, db, "show", "r", "--count-infra").stdout.splitlines()[0]
    assert "pass rate 50.0% [15.0%, 85.0%] (95% Wilson) (1 infrastructure failure(s) " \
           "counted)" in counted
    rows = evalledger(tmp_path, db, "sql", "SELECT graded, infra, pass_rate, pass_rate_low "
                      "FROM run_pass_rates", "--format", "json").stdout
    assert json.loads(rows) == {"graded": 3, "infra": 1, "pass_rate": 0.666667,
                                "pass_rate_low": 0.20766}  # show's 20.8%
    classes = evalledger(tmp_path, db, "sql", "SELECT task_key, failure_class FROM "
                         "task_results ORDER BY task_key", "--format", "json").stdout
    assert {r["task_key"]: r["failure_class"]
            for r in map(json.loads, classes.splitlines())} == {
        "default/bad/00": "agent", "default/broken/00": "infra", "default/ok1/00": None,
        "default/ok2/00": None}
