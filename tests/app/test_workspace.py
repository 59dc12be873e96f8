"""``workspace_changes``: a task's kept workspace against the folder its attempt started
from, both found from what the run recorded."""

from __future__ import annotations

from pathlib import Path

from evalledger.app import workspace_changes
from evalledger.ledger import Ledger
from tests.cli.helpers import evalledger, write_tasks


def test_a_run_names_its_kept_workspace_and_starting_folder(tmp_path: Path) -> None:
    start = tmp_path / "start"
    start.mkdir()
    (start / "a.txt").write_text("one\n")
    tasks = write_tasks(tmp_path / "tasks", {"edit": {
        "command": "echo two > a.txt", "workdir": str(start),
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "l.db"
    done = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    with Ledger(db, read_only=True) as ledger:
        changes = workspace_changes(ledger, "r1", "default/edit/00")
        unknown = workspace_changes(ledger, "r1", "default/none/00")
    assert [(f.path, f.kind) for f in changes.files] == [("a.txt", "modified")]
    assert unknown.why_not == "the task has not started" and not unknown.files
