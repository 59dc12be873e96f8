"""Reading a ledger from Python: a run's summary, the runs a ledger holds (as Inspect's
``read_eval_log`` and ``list_eval_logs``). What ``show``, ``report --format json`` and
``runs --format json`` print, as values.

Each opens the ledger read-only (never creating one: a missing file is
``LedgerNotFound``) and names a run as the CLI does: an id, a unique prefix of one, or
``latest``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalledger.ledger import Ledger

from . import DEFAULT_LEDGER

if TYPE_CHECKING:
    from evalledger.projections import RunSummary


def summary(run: str = "latest", *, ledger: Path | str = DEFAULT_LEDGER,
            grades: str | None = None, count_infra: bool = False) -> RunSummary:
    """The run's summary, every task row included, anchored to the ledger as run.json is
    (``RunSummary.anchor``): what ``report RUN --format json`` prints. Read from the
    run's snapshot when it has a current one, else replayed from its events.

    ``grades``: judged by that grade set of a ``regrade`` (default: the run's default
    grade set); ``count_infra``: infrastructure failures counted in the pass rates.

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
        RunNotFound: no run answers to ``run``, or a prefix names several.
        UnknownGrades: the run has no grade set ``grades``.
    """
    from ._repository import load_summary

    with Ledger(ledger, read_only=True) as opened:
        run_id = opened.resolve_run(run)
        found = load_summary(opened, run_id, grades=grades, count_infra=count_infra)
        return found.anchored(opened.anchor(run_id))


def list_runs(*, ledger: Path | str = DEFAULT_LEDGER,
              limit: int | None = None) -> list[dict[str, Any]]:
    """The ledger's runs, newest first by start time, each as ``runs --format json``
    prints it: the columns of the ``runs`` SQL view, and ``cut_off`` (the run stopped
    without a ``run.finished`` and nothing runs it now: resume it). ``limit``: the
    newest that many (None: all).

    Raises:
        LedgerNotFound: no ledger at ``ledger``.
    """
    from ._repository import listed_runs as listed

    with Ledger(ledger, read_only=True) as opened:
        return [{**run.columns, "cut_off": run.cut_off}
                for run in listed(opened, sys.maxsize if limit is None else limit)]
