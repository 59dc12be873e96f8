"""What a batch and a resume read back of a run's own ``task.started`` events (its
expectations, its definitions): of a signed run, only what its processes sealed."""

from __future__ import annotations

from pathlib import Path

from evalledger.app._batch import recorded_expectations
from evalledger.app._resume import recorded_definitions
from evalledger.ledger import Ledger, Signer, TaskStarted

from ..ledger.sealing import RUN, commit, opening


def _started(attempt: int, definition: dict[str, object], digest: str) -> TaskStarted:
    return TaskStarted(run_id=RUN, task_key="t", task_id="t", attempt=attempt,
                       definition_hash=digest, definition=definition)


def test_a_forged_later_attempt_changes_no_expectation_and_no_definition(
    tmp_path: Path,
) -> None:
    """The agent appends an unsealed attempt 2 whose definition expects failure (so its
    failure would count as met) and holds another definition (drift): both are read
    as if it were not there; sealed by the run's key, it would count."""
    signer = Signer(RUN)
    with Ledger(tmp_path / "l.db") as ledger:
        commit(ledger, signer, opening(signer), _started(1, {"command": "true"}, "h1"))
        ledger.append([_started(2, {"command": "false", "expect": "failed"}, "h2")])
        assert recorded_expectations(ledger, RUN) == {}
        assert recorded_definitions(ledger, RUN, ["h1", "h2"]) == {"h1": {"command": "true"}}
        commit(ledger, signer, _started(3, {"command": "false", "expect": "failed"}, "h3"))
        assert recorded_expectations(ledger, RUN) == {"t": "failed"}
        assert recorded_definitions(ledger, RUN, ["h3"]) == {
            "h3": {"command": "false", "expect": "failed"}}
