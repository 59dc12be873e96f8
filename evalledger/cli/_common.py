"""Helpers shared by commands: naming a run, rebuilding its summary from the ledger,
the word for its status."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from evalledger.ledger import Ledger
    from evalledger.projections import RunSummary


class PositiveNumber(click.FloatRange):
    """A float above 0, and finite: click's range lets NaN through (every comparison
    with NaN is false), and JSON, so the ledger, has no spelling for inf or NaN."""

    name = "positive number"

    def __init__(self) -> None:
        super().__init__(min=0, min_open=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def resolve_run(ledger: Ledger, spec: str) -> str:
    """A run id from an id, a unique prefix of one, or ``latest``.

    Raises:
        RunNotFound: no such run, or the prefix matches several (they are listed).
    """
    return ledger.resolve_run(spec)


def rebuild_summary(ledger: Ledger, run_id: str, grades: str | None = None,
                    count_infra: bool = False) -> RunSummary:
    """The run's summary as ``run.json`` holds it (as grade set ``grades`` judges it:
    default, the latest complete one; its rates counting infrastructure failures when
    ``count_infra``), anchored in the ledger."""
    from evalledger.app import load_summary

    return load_summary(ledger, run_id, grades=grades,
                        count_infra=count_infra).anchored(ledger.anchor(run_id))


# The option of every reader that shows rates.
count_infra_option = click.option(
    "--count-infra", is_flag=True,
    help="Count infrastructure failures (failure class infra: a stall, a sandbox, a "
         "process that could not start, a judge's API) in the pass rates; by default they "
         "are left out, and said how many.")


# The option of every reader that shows verdicts.
grades_option = click.option(
    "--grades", metavar="NAME",
    help="The grade set whose verdicts to show: `original` (the run's own grading) or a "
         "regrade's name (default: the latest complete one).")


def run_is_over(ledger: Ledger, run_id: str) -> bool:
    """Whether the run is over: its latest boundary is a run.finished (a resume
    reopens it), or the process that was running it on this host is gone."""
    from evalledger.app import run_is_over as over

    return over(ledger, run_id)


def is_cut_off(ledger: Ledger, run_id: str, status: str) -> bool:
    """Whether a run the ledger calls ``running`` was cut off: the process running it
    is gone without recording ``run.finished`` (``resume`` finishes it). What turns
    its status into ``cut off`` (``status_word``) in ``runs``, ``show`` and ``report``."""
    from evalledger.app import run_status
    from evalledger.statuses import ShownStatus

    return run_status(ledger, run_id, status) is ShownStatus.CUT_OFF
