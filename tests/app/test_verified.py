"""The verified-through anchor and a run's closing check (``app/_verified.py``).

The adversary is the command under test: with ``isolation: none`` it runs as the user
and can open the ledger. The closing check reads what the run wrote before the run
says how it went, so an edit made behind the triggers' back during the run ends the
run with exit code 2, not a trusted result.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.app._verified import check_ledger, verified_through
from evalledger.ledger import Ledger

from ..cli.helpers import evalledger, write_task

# The agent under test: it drops the triggers, edits its run's run.started (committed
# before any task starts; no re-chaining), puts the triggers back, and exits 0.
FORGER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
triggers = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
conn.execute("DROP TRIGGER events_no_update")
conn.execute("UPDATE events SET ts = '2020-01-01T00:00:00Z' WHERE type = 'run.started'")
for trigger in triggers:
    if "no_update" in trigger:
        conn.execute(trigger)
"""


def _suite(folder: Path, command: list[str]) -> Path:
    write_task(folder / "tasks" / "t.yaml", command)
    return folder / "tasks"


def test_a_run_ends_by_checking_what_it_wrote(tmp_path: Path) -> None:
    db = tmp_path / "evalledger.db"
    tasks = _suite(tmp_path, ["python3", "-c", "print('one'); print('two')"])

    first = evalledger(tmp_path, db, "run", str(tasks))
    second = evalledger(tmp_path, db, "run", str(tasks))

    assert first.returncode == second.returncode == 0, (first, second)
    with Ledger(db, read_only=True) as ledger:
        last = ledger.last_seq()
        anchor = verified_through(ledger)
    # A new ledger is read whole; the second run goes on from where the first got to.
    assert first.err_lines[-1].startswith("ledger: intact, "), first.stderr
    seq = int(first.err_lines[-1].rsplit(" ", 1)[1])
    assert second.err_lines[-1] == (f"ledger: intact, {last - seq} events after seq {seq} "
                                    f"checked through seq {last}"), second.stderr
    assert anchor is not None and anchor.seq == last


def test_an_agent_that_edits_the_ledger_during_its_run_fails_the_run(tmp_path: Path) -> None:
    db = tmp_path / "evalledger.db"
    script = tmp_path / "forger.py"
    script.write_text(f"print('tests fail')\n{FORGER}", encoding="utf-8")
    tasks = _suite(tmp_path, ["python3", str(script), str(db)])

    out = evalledger(tmp_path, db, "run", str(tasks))

    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    broken = [line for line in out.err_lines if "hash chain broken at seq" in line]
    assert broken and broken[0].startswith("ledger check: hash chain broken at seq "), out.stderr
    assert out.err_lines[-1].startswith("the ledger is not intact after run "), out.stderr
    # Nothing was recorded as verified: the next check reads the whole ledger again.
    with Ledger(db, read_only=True) as ledger:
        assert verified_through(ledger) is None


def test_a_check_from_another_anchor_does_not_move_the_record(tmp_path: Path) -> None:
    db = tmp_path / "evalledger.db"
    tasks = _suite(tmp_path, ["true"])
    assert evalledger(tmp_path, db, "run", str(tasks)).returncode == 0
    with Ledger(db, read_only=True) as ledger:
        recorded = verified_through(ledger)
        earlier = ledger.anchor(until_seq=3)
        assert recorded is not None and earlier is not None
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")  # any later change
    with Ledger(db, read_only=True) as ledger:
        report, _ = check_ledger(ledger, since=earlier)
        assert not report.ok  # the unexpected meta key
        assert verified_through(ledger) == recorded


def test_many_rows_written_beside_a_run_are_left_to_verify(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evalledger.app._verified as verified
    from evalledger.ledger import RunStarted, TaskOutput

    db = tmp_path / "evalledger.db"
    tasks = _suite(tmp_path, ["true"])
    assert evalledger(tmp_path, db, "run", str(tasks)).returncode == 0
    with Ledger(db) as ledger:  # another writer: a merge, an import
        recorded = verified_through(ledger)
        ledger.append([RunStarted(run_id="other", planned=["k"], ledger_id=ledger.ledger_id),
                       *(TaskOutput(run_id="other", task_key="k", line=str(n), n=n)
                         for n in range(1, 21))])
        before = ledger.last_seq()
    monkeypatch.setattr(verified, "BESIDE", 5)

    out = evalledger(tmp_path, db, "run", str(tasks))

    assert out.returncode == 0, out
    assert f" events after seq {before} checked through seq " in out.err_lines[-1], out.stderr
    with Ledger(db, read_only=True) as ledger:
        assert verified_through(ledger) == recorded


def test_snapshots_are_said_in_their_order_and_not_checked_past_a_missing_prefix(
    tmp_path: Path,
) -> None:
    """Two forged snapshots of a run, one of each fold: each fold is replayed apart,
    and what differs is said in the order the snapshots were stored. From an anchor the
    ledger no longer holds, nothing is checked (nor counted) at all."""
    from evalledger.ledger import RunSnapshot
    from evalledger.projections import ResumeFold, SummaryFold

    db = tmp_path / "evalledger.db"
    ran = evalledger(tmp_path, db, "run", str(_suite(tmp_path, ["true"])), "--run-id", "r")
    assert ran.returncode == 0, ran.stderr
    with Ledger(db) as ledger:
        through = ledger.last_seq()
        ledger.append([RunSnapshot(run_id="r", kind="resume_fold", through_seq=through,
                                   fold_version=ResumeFold.VERSION, value={"bogus": 1})])
        ledger.append([RunSnapshot(run_id="r", kind="summary", through_seq=through,
                                   fold_version=SummaryFold.VERSION, value={"bogus": 2})])
        anchor = ledger.anchor()
    with Ledger(db, read_only=True) as ledger:
        report, snapshots = check_ledger(ledger)
        assert [line.split(" snapshot at")[0] for line in report.derived] == [
            "snapshot: run r: the resume_fold", "snapshot: run r: the summary"]
        elsewhere = anchor.model_copy(update={"hash": "0" * 64, "seq": 2})
        report, snapshots = check_ledger(ledger, since=elsewhere)
    assert not report.ok and report.anchors and not report.derived
    assert snapshots.checked == snapshots.runs == 0
