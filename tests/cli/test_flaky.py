"""``evalledger flaky``: a task whose verdict flips across runs with its definition and
model unchanged is listed; one whose definition changed between the runs is not."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import evalledger, write_tasks


def test_a_flip_without_a_change_is_flaky_and_a_changed_task_is_not(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    db = tmp_path / "l.db"

    def run(run_id: str, passes: bool, changed_command: str) -> None:
        if passes:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)
        write_tasks(tmp_path / "tasks", {
            "coin": {"command": f"test -e {flag}", "success_criteria": [{"type": "exit_code"}]},
            "steady": {"command": "true", "success_criteria": [{"type": "exit_code"}]},
            "edited": {"command": changed_command, "success_criteria": [{"type": "exit_code"}]},
        })
        evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), "--run-id", run_id)

    run("one", True, "true")
    run("two", False, "false")  # coin flips; edited flips too, but it is another task now
    run("three", True, "false")
    done = evalledger(tmp_path, db, "flaky", "--json")
    assert done.returncode == 0, done
    [coin] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (coin["task_id"], coin["passed"], coin["failed"]) == (
        "coin", {"one": 1, "three": 1}, {"two": 1})
    # Only the runs named: the coin never flipped between these two.
    assert evalledger(tmp_path, db, "flaky", "one", "three", "--json").stdout == ""
    text = evalledger(tmp_path, db, "flaky")
    assert "coin\tone, three\ttwo" in text.stdout
    assert "1 flaky task(s) over 3 run(s)" in text.stderr
