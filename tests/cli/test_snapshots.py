"""Snapshots through the commands: written when a batch ends, read by runs, show and
report, trusted by nobody: verify --deep replays and compares."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalledger.app._repository import load_summary, write_snapshot
from evalledger.ledger import Ledger, RunSnapshot
from evalledger.projections import SummaryFold

from .helpers import evalledger, write_task
from .recorded import record_run

OK = "import sys; sys.exit(0)"
FAIL = "import sys; sys.exit(3)"


def snapshots(db: Path, run_id: str) -> list[RunSnapshot]:
    with Ledger(db, read_only=True) as ledger:
        return [e for e in ledger.events(run_id) if isinstance(e, RunSnapshot)]


def finished_seqs(db: Path, run_id: str) -> list[int]:
    with Ledger(db, read_only=True) as ledger:
        return [e.seq or 0 for e in ledger.events(run_id, types={"run.finished"})]


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    for name, code in (("good", OK), ("bad", FAIL)):
        write_task(tmp_path / "tasks" / f"{name}.yaml", [sys.executable, "-c", code])
    return tmp_path


def test_run_and_resume_each_end_with_a_snapshot_through_their_run_finished(
    suite: Path,
) -> None:
    db = suite / "l.db"
    first = evalledger(suite, db, "run", "tasks", "--run-id", "r")
    assert first.returncode == 1, first  # one task fails
    [end] = finished_seqs(db, "r")
    snaps = snapshots(db, "r")
    assert sorted(s.kind for s in snaps) == ["headline", "resume_fold", "summary",
                                             "summary_fold"]
    assert {s.through_seq for s in snaps} == {end}
    assert all((s.seq or 0) > end for s in snaps)

    again = evalledger(suite, db, "resume", "r", "--rerun-failed")
    assert again.returncode == 1, again
    ends = finished_seqs(db, "r")
    assert {s.through_seq for s in snapshots(db, "r")} == set(ends)
    # run.json written by the resume equals the report rebuilt (from the snapshot).
    rebuilt = evalledger(suite, db, "report", "r", "--format", "json")
    assert rebuilt.stdout == (suite / "runs" / "r" / "run.json").read_text("utf-8")
    deep = evalledger(suite, db, "verify", "--deep")
    assert deep.returncode == 0, deep
    assert "deep: 8 snapshot(s) of 1 run(s) checked against a full replay" in deep.stdout


def _forge_headline(db: Path, run_id: str, **changes: object) -> None:
    with Ledger(db) as ledger:
        [head] = [s for s in snapshots(db, run_id) if s.kind == "headline"]
        ledger.append([RunSnapshot(run_id=run_id, kind="headline",
                                   fold_version=head.fold_version, through_seq=head.through_seq,
                                   value={**head.value, **changes})])


def test_runs_lists_from_snapshots_and_verify_catches_a_forged_one(db_path: Path) -> None:
    from evalledger.statuses import FinalStatus

    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", {"default/a/00": FinalStatus.SUCCESS})
        assert write_snapshot(ledger, "run-1")
    honest = evalledger(db_path.parent, db_path, "runs", "--json")
    assert json.loads(honest.stdout)["tasks_succeeded"] == 1
    assert evalledger(db_path.parent, db_path, "verify", "--deep").returncode == 0

    # An appended snapshot keeps the hash chain valid: only a replay can tell it lies.
    _forge_headline(db_path, "run-1", tasks_succeeded=41)
    listed = evalledger(db_path.parent, db_path, "runs", "--json")
    assert json.loads(listed.stdout)["tasks_succeeded"] == 41  # runs read the snapshot
    plain = evalledger(db_path.parent, db_path, "verify")  # replays what snapshots claim
    assert plain.returncode == 1, plain
    assert "differs from a full replay of the run" in plain.stdout, plain.stdout
    deep = evalledger(db_path.parent, db_path, "verify", "--deep")
    assert deep.returncode == 1, deep
    assert deep.stdout.startswith("FAILED: ")
    assert ("snapshot: run run-1: the headline snapshot at seq" in deep.stdout
            and "differs from a full replay of the run" in deep.stdout), deep.stdout


def test_verify_deep_ignores_snapshots_of_another_version_and_flags_impossible_ones(
    db_path: Path,
) -> None:
    from evalledger.statuses import FinalStatus

    with Ledger(db_path) as ledger:
        record_run(ledger, "run-1", {"default/a/00": FinalStatus.SUCCESS})
        end = ledger.last_seq()
        ledger.append([
            RunSnapshot(run_id="run-1", kind="summary", fold_version=SummaryFold.VERSION + 1,
                        through_seq=end, value={"made": "by a newer evalledger"}),
            RunSnapshot(run_id="run-1", kind="headline", fold_version=SummaryFold.VERSION,
                        through_seq=end + 10, value={}),
        ])
        assert load_summary(ledger, "run-1").tasks_succeeded == 1  # neither was used
    deep = evalledger(db_path.parent, db_path, "verify", "--deep")
    assert deep.returncode == 1, deep
    assert "1 of another fold version ignored" in deep.stdout
    assert "claims events that come after it" in deep.stdout


def test_runs_takes_running_and_cut_off_runs_from_their_events(suite: Path) -> None:
    db = suite / "l.db"
    with Ledger(db) as ledger:
        from evalledger.ledger import RunStarted, TaskStarted

        ledger.append([RunStarted(run_id="cut", planned=["default/x/00"],
                                  host={"hostname": "elsewhere", "pid": 1}),
                       TaskStarted(run_id="cut", task_key="default/x/00", task_id="x")])
    listed = evalledger(suite, db, "runs", "--json")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["run_id"], row["status"], row["tasks_planned"]) == ("cut", "running", 1)
    assert snapshots(db, "cut") == []


def test_run_json_anchors_the_snapshot_so_cutting_it_off_is_seen(suite: Path) -> None:
    """The campaign cut a finished run's last row (a snapshot, after run.finished) and
    `verify --anchor run.json` still said OK: the anchor stopped at run.finished."""
    import sqlite3
    from contextlib import closing

    db = suite / "l.db"
    evalledger(suite, db, "run", "tasks", "--run-id", "r")
    report = suite / "runs" / "r" / "run.json"
    anchor = json.loads(report.read_text("utf-8"))["anchor"]
    # The run's last row: the seal of its snapshots, right after them.
    assert anchor["seq"] == max(s.seq or 0 for s in snapshots(db, "r")) + 1
    assert evalledger(suite, db, "verify", "--anchor", str(report)).returncode == 0
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)")
        conn.commit()
    cut = evalledger(suite, db, "verify", "--anchor", str(report))
    assert cut.returncode == 1 and "anchor:" in cut.stdout, cut
