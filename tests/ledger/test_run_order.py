"""The one order of runs: by start time (the ts of a run's first run.started), whatever
order they were appended in. ``Ledger.run_ids`` is it, ``latest`` is its last, and the
``runs`` view's ``started_at`` is the same start."""

from __future__ import annotations

from pathlib import Path

from evalledger.ledger import Ledger, RunFinished, RunStarted
from evalledger.statuses import RunStatus


def _started(run_id: str, ts: str) -> RunStarted:
    return RunStarted(run_id=run_id, ts=ts)


def test_runs_go_by_start_time_not_by_when_they_were_appended(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([_started("today", "2026-12-01T10:00:00.000000Z")])
        # Imported afterwards: a run of last spring, then one of last year.
        ledger.append([_started("spring", "2026-03-01T10:00:00.000000Z"),
                       RunFinished(run_id="spring", status=RunStatus.COMPLETED)])
        ledger.append([_started("last-year", "2025-06-01T09:00:00.000000Z")])
        assert ledger.run_ids() == ["last-year", "spring", "today"]
        assert ledger.resolve_run("latest") == "today"
        _, rows = ledger.query("SELECT run_id FROM runs ORDER BY started_at")
        assert [r for (r,) in rows] == ledger.run_ids()


def test_a_run_merged_from_shards_starts_with_its_first_run_started(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.append([_started("other", "2026-12-01T11:00:00.000000Z")])
        ledger.append([_started("sharded", "2026-12-01T10:00:00.000000Z")])
        # The second shard's run.started, merged in later: the run still started at 10.
        ledger.append([_started("sharded", "2026-12-01T12:00:00.000000Z")])
        assert ledger.run_ids() == ["sharded", "other"]
        assert ledger.resolve_run("latest") == "other"
