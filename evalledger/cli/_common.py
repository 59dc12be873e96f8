"""Helpers shared by commands: naming a run, rebuilding its summary from the ledger."""

from __future__ import annotations

from evalledger.ledger import Ledger
from evalledger.projections import ResumeFold, RunSummary, SummaryFold, fold

from ._errors import UserError


def resolve_run(ledger: Ledger, spec: str) -> str:
    """A run id from an id, a unique prefix of one, or ``latest``.

    Raises:
        UserError: no such run, or the prefix matches several (they are listed).
    """
    runs = ledger.run_ids()
    if not runs:
        raise UserError(f"no runs in {ledger.path}")
    if spec == "latest":
        return runs[-1]
    if spec in runs:
        return spec
    matches = [r for r in runs if r.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UserError(f"no run {spec!r} in {ledger.path} (see `evalledger runs`)")
    raise UserError(f"{spec!r} matches several runs: {', '.join(matches[:10])}")


def rebuild_summary(ledger: Ledger, run_id: str) -> RunSummary:
    """The run's summary, replayed from the ledger (only the event types it folds)."""
    return fold(SummaryFold(run_id), ledger.events(run_id, types=SummaryFold.TYPES)).summary()


def rebuild_resume(ledger: Ledger, run_id: str) -> ResumeFold:
    return fold(ResumeFold(run_id), ledger.events(run_id, types=ResumeFold.TYPES))
