"""``resume``, drift, budgets and concurrent use of one ledger.

The races run real ``evalledger`` processes against one file; everything else runs
in-process. The races are made deterministic by holding the ledger's write lock
from the test (``BEGIN IMMEDIATE``): both processes pass their "is this run free?"
check while they wait for the lock, then both append when it is released.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from evalledger.ledger import Ledger

from .helpers import (
    PATIENCE,
    SUMMARY,
    Result,
    assert_one_line_error,
    count_events,
    evalledger,
    events,
    of_type,
    run_json,
    spawn,
    wait_until,
    write_task,
)

COST = 0.6
USAGE = json.dumps({"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 10,
                    "output_tokens": 5, "cost_usd": COST})


def _broken(path: Path) -> Path:
    """A task whose workdir is missing: BUILD_FAILED (error) until ``<dir>/wd`` exists."""
    task = write_task(path, "true")
    task.write_text(task.read_text() + "workdir: wd\n")
    return task


def _costly(path: Path) -> Path:
    return write_task(path, f"echo '{USAGE}'")


@contextmanager
def _write_lock(db: Path) -> Iterator[None]:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def _sandboxes(run_id: str) -> list[Path]:
    """The sandbox folders of the batches of ``run_id`` running now. A batch makes its
    folder (in TMPDIR, the test's own) just before it appends its opening event:
    once it exists, the process has decided everything it decides before the lock."""
    return list(Path(tempfile.gettempdir()).glob(f"evalledger-{run_id}-*"))


def _finish(procs: Sequence[subprocess.Popen[str]]) -> list[Result]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=PATIENCE)
        results.append(Result(proc.returncode, out, err))
    return results


def _kill(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=PATIENCE)


def _summary(result: Result) -> dict[str, str]:
    found = next((m for line in result.out_lines if (m := SUMMARY.match(line))), None)
    assert found is not None, result
    return found.groupdict()


# -- concurrency -----------------------------------------------------------------------------


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_two_runs_with_the_same_run_id_at_once_one_is_refused(tmp_path: Path) -> None:
    # Bug: `run` checks "run id already in the ledger?" before run.started is
    # committed, so two processes started together both pass and both run as the
    # same run: two run.started, two attempt-1 task.started per key, and the
    # first to end SIGKILLs the other's tasks (kill_marked on EVALLEDGER_RUN_ID).
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    write_task(tasks / "ok.yaml", "true")
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "first").returncode == 0
    procs: list[subprocess.Popen[str]] = []
    try:
        with _write_lock(db):
            for n in (1, 2):
                procs.append(spawn(tmp_path, db, "run", str(tasks), "--run-id", "twin"))
                # Past every check made before the lock; it now waits for the lock.
                wait_until(lambda n=n: len(_sandboxes("twin")) == n,
                           f"run {n} to reach the write lock")
        results = _finish(procs)
    finally:
        _kill(procs)
    assert sorted(r.returncode for r in results) == [0, 2], results
    assert "already exists" in assert_one_line_error(
        next(r for r in results if r.returncode == 2)
    )
    evs = events(db, "twin")
    assert len(of_type(evs, "run.started")) == 1
    assert [e.attempt for e in of_type(evs, "task.started")] == [1]
    assert evalledger(tmp_path, db, "verify").returncode == 0


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_two_resumes_of_one_run_at_once_run_its_tasks_once(tmp_path: Path) -> None:
    # Bug: the "still running on this host" check reads the last run.started /
    # run.resumed before this resume's run.resumed is committed: two resumes
    # started together both pass it and both re-run the same key, as the same
    # attempt number.
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    _broken(tasks / "broken.yaml")
    assert evalledger(tmp_path, db, "run", str(tasks), "--run-id", "r").returncode == 1
    (tasks / "wd").mkdir()
    procs: list[subprocess.Popen[str]] = []
    errs = [tmp_path / "err0", tmp_path / "err1"]
    try:
        with _write_lock(db):
            for err in errs:
                with err.open("w") as sink:
                    procs.append(spawn(tmp_path, db, "resume", "r", "--retry-errors",
                                       stderr=sink))
            # Both printed "resuming": both decided the run is free; now they wait.
            wait_until(lambda: all("resuming" in e.read_text() for e in errs),
                       "both resumes to decide")
        for proc in procs:
            proc.wait(timeout=PATIENCE)
    finally:
        _kill(procs)
    results = [Result(p.returncode, p.stdout.read() if p.stdout else "", e.read_text())
               for p, e in zip(procs, errs, strict=True)]
    assert sorted(r.returncode for r in results) == [0, 2], results
    assert_one_line_error(next(r for r in results if r.returncode == 2))
    evs = events(db, "r")
    assert len(of_type(evs, "run.resumed")) == 1
    assert [e.attempt for e in of_type(evs, "task.started")] == [1, 2]
    assert evalledger(tmp_path, db, "verify").returncode == 0


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_concurrent_runs_and_a_resume_share_one_ledger(tmp_path: Path) -> None:
    # Two `run`s and a `resume` of a third run append to one file at the same time:
    # every run stays whole, seqs have no gap, the chain verifies. The runs' tasks
    # start their output only once all three have begun, so the appends overlap
    # however slowly each process starts.
    db, tasks, fix = tmp_path / "l.db", tmp_path / "tasks", tmp_path / "fix"
    gate = tmp_path / "gate"
    chatty = (f'while [ ! -e "$GATE" ]; do sleep 0.05; done; '
              f"for i in $(seq 1 200); do echo line $i; done; echo '{USAGE}'")
    for i in range(4):
        write_task(tasks / f"t{i}.yaml", chatty, env={"GATE": str(gate)}, timeout=600)
    _broken(fix / "broken.yaml")
    assert evalledger(tmp_path, db, "run", str(fix), "--run-id", "fix").returncode == 1
    (fix / "wd").mkdir()
    procs = [
        spawn(tmp_path, db, "run", str(tasks), "--run-id", "A", "-j", "2"),
        spawn(tmp_path, db, "run", str(tasks), "--run-id", "B", "-j", "2"),
        spawn(tmp_path, db, "resume", "fix", "--retry-errors"),
    ]
    try:
        wait_until(lambda: any(p.poll() is not None for p in procs) or (
            count_events(db, "A", "task.started") and count_events(db, "B", "task.started")
            and count_events(db, "fix", "run.resumed")
        ), "both runs to start tasks and the resume to begin")
        gate.touch()
        a, b, fixed = _finish(procs)
    finally:
        gate.touch()  # whatever happened: no task is left waiting
        _kill(procs)
    for result in (a, b):
        assert result.returncode == 0, result
        assert "locked" not in result.stderr
        assert (_summary(result)["run"], _summary(result)["succeeded"]) == ("4", "4")
    assert fixed.returncode == 0, fixed
    for run_id in ("A", "B"):
        report = run_json(tmp_path, run_id)
        assert report["status"] == "completed"
        assert abs(report["total_cost_usd"] - 4 * COST) < 1e-9
        evs = events(db, run_id)
        assert len(of_type(evs, "task.output")) == 4 * 200
        assert evs[0].type == "run.started"
        assert evs[-1].type == "run.finished"
    with Ledger(db, read_only=True) as ledger:
        # Gapless: every seq up to the last is one event (a chunk's lines each have one).
        assert [row.seq for row in ledger.rows()] == list(range(1, ledger.last_seq() + 1))
    assert evalledger(tmp_path, db, "verify").returncode == 0


# -- drift -----------------------------------------------------------------------------------


def test_resume_after_deleting_a_finished_tasks_file_named_on_the_command_line(
    tmp_path: Path,
) -> None:
    # Bug: the run was given task files by name; deleting one whose task already
    # finished makes `resume` fail ("no such task file or folder", exit 2) instead
    # of printing the removal as drift and running what is left.
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    done = write_task(tasks / "done.yaml", "true")
    _broken(tasks / "broken.yaml")
    first = evalledger(tmp_path, db, "run", str(done), str(tasks / "broken.yaml"),
                       "--run-id", "r")
    assert first.returncode == 1, first
    done.unlink()
    (tasks / "wd").mkdir()
    resumed = evalledger(tmp_path, db, "resume", "r", "--retry-errors")
    assert resumed.returncode == 0, resumed
    assert "drift: task default/done/00: no longer defined" in resumed.err_lines
    starts = of_type(events(db, "r"), "task.started")
    assert [(e.task_key, e.attempt) for e in starts][-1] == ("default/broken/00", 2)


# -- budgets ---------------------------------------------------------------------------------


def _budget_stopped_run(tmp_path: Path) -> tuple[Path, Path]:
    """a and b cost 0.6 each; the run's budget of 1.0 stops it before c (broken)."""
    db, tasks = tmp_path / "l.db", tmp_path / "tasks"
    _costly(tasks / "a.yaml")
    _costly(tasks / "b.yaml")
    _broken(tasks / "c.yaml")
    first = evalledger(tmp_path, db, "run", str(tasks), "--run-id", "b", "-j", "1",
                       "--max-cost", "1.0")
    assert first.returncode == 1, first
    assert _summary(first)["status"] == "budget_stopped"
    return db, tasks


def test_budget_stopped_resume_needs_a_higher_budget(tmp_path: Path) -> None:
    db, _ = _budget_stopped_run(tmp_path)
    refused = evalledger(tmp_path, db, "resume", "b")
    assert "--max-cost" in assert_one_line_error(refused)
    assert not of_type(events(db, "b"), "run.resumed")
    # 1.2 spent, 1.0 was the budget: 1.1 is still too little, nothing may start.
    still = evalledger(tmp_path, db, "resume", "b", "--max-cost", "1.1")
    assert_one_line_error(still)
    raised = evalledger(tmp_path, db, "resume", "b", "--max-cost", "10")
    assert raised.returncode == 1, raised  # c is BUILD_FAILED
    report = run_json(tmp_path, "b")
    assert report["status"] == "completed"
    assert (report["tasks_run"], report["tasks_error"]) == (3, 1)
    assert abs(report["total_cost_usd"] - 2 * COST) < 1e-9


def test_a_budget_raised_by_resume_holds_for_the_next_resume(tmp_path: Path) -> None:
    # Bug (low): `resume --max-cost 10` raises the run's budget, and run.resumed
    # records it, but the next plain `resume` goes back to run.started's 1.0 and
    # refuses: "already spent $1.2000 of its $1.0000 budget".
    db, tasks = _budget_stopped_run(tmp_path)
    assert evalledger(tmp_path, db, "resume", "b", "--max-cost", "10").returncode == 1
    (tasks / "wd").mkdir()
    retried = evalledger(tmp_path, db, "resume", "b", "--retry-errors")
    assert retried.returncode == 0, retried
    assert _summary(retried)["succeeded"] == "3"
