"""The run headline is declared once: ``RunSummary`` extends ``RunHeadline`` instead of
repeating its fields, and the names that the runs listing relies on (``HEADLINE_KEYS``,
the ``runs`` columns) are checked against the fields ``RunHeadline`` marks ``LISTED``."""

from __future__ import annotations

from evalledger.app._repository import RUN_COLUMNS as COLUMNS
from evalledger.ledger import RunFinished
from evalledger.projections import RunHeadline, RunSummary, SummaryFold, fold
from evalledger.projections._snapshots import HEADLINE_KEYS
from evalledger.statuses import FinalStatus, RunStatus

from .builders import RUN, completed, key, started, usage

# Columns of the runs view that are not a headline field under their own name.
RENAMED = {"cost_usd": "total_cost_usd", "grader_cost_usd": "usage_by_role"}


def test_the_summary_declares_none_of_the_headline_fields_again() -> None:
    assert issubclass(RunSummary, RunHeadline)
    own = RunSummary.__annotations__.keys()
    assert not own & RunHeadline.model_fields.keys()
    assert list(RunSummary.model_fields)[:len(RunHeadline.model_fields)] == list(
        RunHeadline.model_fields)


def test_a_summary_holds_the_headline_its_fold_gives() -> None:
    events = [started(key(0)), usage(key(0), 0.5), completed(key(0), FinalStatus.SUCCESS),
              started(key(1)), completed(key(1), FinalStatus.FAILURE),
              RunFinished(run_id=RUN, status=RunStatus.COMPLETED)]
    summary_fold = fold(SummaryFold(RUN), events)
    summary = summary_fold.summary()
    headline = RunHeadline.model_validate(summary.model_dump(include=set(
        RunHeadline.model_fields)))
    assert headline == summary_fold.headline()
    assert (headline.tasks_run, headline.tasks_succeeded, headline.total_cost_usd) == (
        2, 1, 0.5)


def test_headline_keys_are_the_fields_the_headline_marks_listed() -> None:
    """_snapshots keeps them as text (listing runs imports no model): checked here."""
    assert RunHeadline.listed() == HEADLINE_KEYS


def test_every_column_runs_lists_is_a_listed_headline_field() -> None:
    named = {RENAMED.get(c, c) for c in COLUMNS}
    assert named - {"usage_by_role"} <= RunHeadline.listed()
    assert named <= RunHeadline.model_fields.keys()
