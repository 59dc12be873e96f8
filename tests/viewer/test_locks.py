"""A serving viewer keeps SQLite's locks: a burst of page loads, then a run finishing in
another process, and the viewer still sees the ledger as it is.

On POSIX, closing any descriptor of a file drops every lock the process holds on it.
A ``Ledger`` that opened its file with Python's ``open()`` while other connections of
the process were open dropped their shared lock; the next writer to close then deleted
``-wal`` and ``-shm`` under the viewer, which never saw another event.
"""

from __future__ import annotations

import json
import os
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.helpers import PATIENCE, evalledger, spawn, write_task
from tests.waiting import wait_until

from .serving import start, stop

# How soon a run another process finished shows in a live viewer (it reads every 0.25 s).
LIVE = 2.0
LOADS = 50


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=PATIENCE) as response:
        body: bytes = response.read()
        assert response.status == 200
        return body


def _deleted_ledger_files(pid: int, ledger: Path) -> list[str]:
    """The viewer's open descriptors of the ledger's files that now name a deleted file."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith(str(ledger)) and target.endswith("(deleted)"):
            found.append(target)
    return found


def _runs(url: str) -> dict[str, str]:
    return {r["run_id"]: r["status"] for r in json.loads(_get(url + "api/runs"))["runs"]}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/PID/fd")
def test_a_burst_of_page_loads_never_costs_the_viewer_its_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the runs' sandboxes stay here
    db = tmp_path / "ledger.db"
    # A long transcript: each page that reads it keeps a worker thread busy a while, so
    # the burst is served by many threads at once, each with its own reader.
    write_task(tmp_path / "tasks" / "ok.yaml", "seq 1 3000")
    first = evalledger(tmp_path, db, "run", "tasks", "--run-id", "first")
    assert first.returncode == 0, first.stderr
    process, url = start("--ledger", str(db), "view", "--port", "0")
    try:
        routes = ["", "runs/first", "api/runs", "api/runs/first", "api/runs/first/summary",
                  "runs/first/tasks/default/ok/00", "runs/first/run.json",
                  "api/runs/first/transcript/default/ok/00"]
        # Every route at once, from many connections: the server opens a reader per
        # worker thread, each a new Ledger while the others' connections are open.
        with ThreadPoolExecutor(LOADS) as pool:
            bodies = list(pool.map(_get, [url + routes[i % len(routes)]
                                          for i in range(LOADS)]))
        assert all(bodies)
        assert _deleted_ledger_files(process.pid, db) == []

        run = spawn(tmp_path, db, "run", "tasks", "--run-id", "second")
        _, err = run.communicate(timeout=PATIENCE)
        assert run.returncode == 0, err
        # The writer's last close checkpoints and may delete -wal/-shm only when no other
        # process holds the database: the viewer does, so they are the same files.
        assert _deleted_ledger_files(process.pid, db) == []
        wait_until(lambda: _runs(url).get("second") == "completed",
                   "the viewer to show run `second` completed", timeout=LIVE, every=0.05)
        assert _deleted_ledger_files(process.pid, db) == []
    finally:
        assert stop(process) == 0
