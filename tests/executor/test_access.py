"""What attempts open of their task folder (docs/isolation.md, "Reads of the task
folder"): real runs, a root runner holding each attempt in a cgroup, fanotify."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from evalledger.executor import _access, _limits

from ..cli.helpers import evalledger, events, of_type, write_tasks
from ..needs import root, unavailable


@pytest.fixture
def watched() -> None:
    """A runner that watches here, or a skip saying why not; CI (root, cgroup v1)
    must watch."""
    root("watching task folders (fanotify)")
    if _limits.pool() is None:
        unavailable("CGROUPS", "no cgroup v1 memory and pids hierarchy this user may write")
    if _access.watch() is None:
        pytest.fail("a root runner with cgroups could not start fanotify here")


SNEAK = "cat \"$EVALLEDGER_TASK_DIR/hidden/tests.txt\" > /dev/null; cat a.py > /dev/null"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_each_attempt_records_what_its_processes_opened_of_its_task_folder(
    tmp_path: Path, watched: None
) -> None:
    """Replicates at once, each its own: one reads the hidden tests silently (a child
    of a child), one opens nothing; its grader's read of the task file, the runner's
    copy of the workdir and the agent's reads of that copy are not the attempt's."""
    tasks = tmp_path / "tasks"
    (tasks / "hidden").mkdir(parents=True)
    (tasks / "hidden" / "tests.txt").write_text("assert add(2, 3) == 5\n")
    (tasks / "work").mkdir()
    (tasks / "work" / "a.py").write_text("print('work')\n")
    grader = [{"type": "run_command", "command": 'cat "$EVALLEDGER_TASK_DIR/sneak.yaml"'}]
    write_tasks(tasks, {
        "sneak": {"command": "sh -c " + shlex.quote("sh -c " + shlex.quote(SNEAK)),
                  "workdir": "work",
                  "success_criteria": grader},
        "honest": {"command": "cat a.py", "workdir": "work"},
    })
    db = tmp_path / "ledger.db"
    ran = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r", "-j", "6",
                     "--repeats", "3")
    assert ran.returncode == 0, ran.stderr
    evs = events(db, "r")
    [started] = of_type(evs, "run.started")
    assert started.host["folder_reads"] == "fanotify"
    reads = {e.task_key: e.folder_reads for e in of_type(evs, "task.completed")}
    assert reads == {**{f"default/sneak/{i:02d}": ["hidden/tests.txt"] for i in range(3)},
                     **{f"default/honest/{i:02d}": [] for i in range(3)}}


def test_scan_flags_a_silent_read_but_not_what_binds_hand_the_agent(
    tmp_path: Path, watched: None
) -> None:
    tasks = tmp_path / "tasks"
    (tasks / "hidden").mkdir(parents=True)
    (tasks / "hidden" / "tests.txt").write_text("secret\n")
    (tasks / "data.csv").write_text("1,2\n")
    write_tasks(tasks, {
        "sneak": {"command": 'cat "$EVALLEDGER_TASK_DIR/hidden/tests.txt" >/dev/null'},
        "bound": {"command": 'cat "$DATA" >/dev/null', "binds": {"DATA": "data.csv"}},
    })
    db = tmp_path / "ledger.db"
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r").returncode == 0
    [sneak, bound] = [next(e for e in of_type(events(db, "r"), "task.completed")
                           if e.task_key == f"default/{name}/00")
                      for name in ("sneak", "bound")]
    assert (sneak.folder_reads, bound.folder_reads) == (["hidden/tests.txt"], ["data.csv"])

    scanned = evalledger(tmp_path, db, "scan", "r")

    assert scanned.returncode == 1, scanned.stderr
    flags = of_type(events(db, "r"), "task.flagged")
    assert [(f.task_key, f.rule) for f in flags] == [("default/sneak/00", "folder-read")]
    assert [e.excerpt for e in flags[0].evidence] == ["hidden/tests.txt: opened (task folder)"]
    assert "unchecked" not in scanned.stderr


def test_a_run_that_did_not_watch_says_its_reads_were_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fanotify (here: the runner's switch off, as on a machine it cannot run on)."""
    monkeypatch.setattr(_access, "_watch", [None])
    tasks = write_tasks(tmp_path / "tasks", {"t": {"command": "cat t.yaml 2>/dev/null; :"}})
    db = tmp_path / "ledger.db"
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r").returncode == 0
    [started] = of_type(events(db, "r"), "run.started")
    assert "folder_reads" not in started.host

    scanned = evalledger(tmp_path, db, "scan", "r")

    assert scanned.returncode == 0, scanned.stderr
    assert "unchecked reads of the task folder: not watched in this run" in scanned.stderr


def test_an_open_the_watch_cannot_attribute_is_still_allowed(tmp_path: Path,
                                                             watched: None) -> None:
    """A process gone before it is looked up (or any failure to look it up): the open
    goes on; nothing is ever refused or held."""
    watch = _access.watch()
    assert watch is not None
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "f").write_text("x")
    assert watch.mark(folder, None)
    with watch.follow("evalledger-no-such-group", folder) as reads:
        for _ in range(200):
            assert (folder / "f").read_text() == "x"
    assert (reads.paths, reads.opens) == ([], 0)
