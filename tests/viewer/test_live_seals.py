"""The live viewer of a signed run folds what the run's own processes sealed, never a
row someone else appended (ledger/_signing.py)."""

from __future__ import annotations

from pathlib import Path

from evalledger.ledger import Ledger, RunFinished, Signer
from evalledger.viewer._state import LedgerState
from tests.ledger.sealing import PASSED, RUN, commit, completed, opening, started


def test_the_live_viewer_folds_only_what_the_runs_processes_sealed(tmp_path: Path) -> None:
    """Found in review: the viewer followed new rows of every run unfiltered; a forged
    SUCCESS showed live (0 -> 1 succeeded) until the page was loaded afresh."""
    runner = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, runner, opening(runner))
        commit(ledger, runner, started("t"))
        commit(ledger, runner, completed("t"), RunFinished(run_id=RUN, status="completed"))
        state = LedgerState(tmp_path / "l.db")
        state.load()
        ledger.append([completed("t", 2, **PASSED)])  # forged, unsealed
        state._apply(state._read_since(state.seq))
        assert state.runs[RUN].summary_fold.headline().tasks_succeeded == 0
        commit(ledger, runner, started("u"))  # what the runner seals is followed
        state._apply(state._read_since(state.seq))
        assert state.runs[RUN].summary_fold.running == {"u"}
