"""Projections: pure folds over ledger events. No SQLite, no trio.

Resume partition, fingerprint drift, run summary and reports are all computed by
replaying events, so they can be rebuilt offline at any time.
"""

from ._diff import RunDiff as RunDiff
from ._diff import TaskDiff as TaskDiff
from ._diff import diff_runs as diff_runs
from ._fold import Projection as Projection
from ._fold import fold as fold
from ._fold import types_of as types_of
from ._reports import render_json as render_json
from ._reports import render_markdown as render_markdown
from ._reports import write_reports as write_reports
from ._resume import OPERATIONAL_OPTIONS as OPERATIONAL_OPTIONS
from ._resume import Drift as Drift
from ._resume import Partition as Partition
from ._resume import ResumeFold as ResumeFold
from ._resume import compute_drift as compute_drift
from ._summary import RunSummary as RunSummary
from ._summary import SummaryFold as SummaryFold
from ._summary import TaskRow as TaskRow

__all__ = [
    "OPERATIONAL_OPTIONS",
    "Drift",
    "Partition",
    "Projection",
    "ResumeFold",
    "RunDiff",
    "RunSummary",
    "SummaryFold",
    "TaskDiff",
    "TaskRow",
    "compute_drift",
    "diff_runs",
    "fold",
    "render_json",
    "render_markdown",
    "types_of",
    "write_reports",
]
