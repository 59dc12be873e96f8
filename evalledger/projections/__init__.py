"""Projections: pure folds over ledger events. No SQLite, no trio, no I/O.

Resume partition, fingerprint drift, run summary, diffs, comparisons and a run's
shown status are all computed from events handed in, so they can be rebuilt offline at
any time. What they say as text (``run.md``, JUnit, a table's cells, the HTML report) is
``evalledger.render``'s; reading events for them, and snapshots of them, is the
application's read side (``evalledger.app._repository``).

Names are imported on first use: ``show`` needs the summary, not the diff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

if TYPE_CHECKING:
    from ._compare import TEST as TEST
    from ._compare import Comparison as Comparison
    from ._compare import Side as Side
    from ._compare import compare_runs as compare_runs
    from ._compare import compare_to_baseline as compare_to_baseline
    from ._diff import Change as Change
    from ._diff import FailOn as FailOn
    from ._diff import RunDiff as RunDiff
    from ._diff import TaskDiff as TaskDiff
    from ._diff import diff_runs as diff_runs
    from ._digest import MODEL_API as MODEL_API
    from ._digest import error_digest as error_digest
    from ._digest import failure_kinds as failure_kinds
    from ._digest import last_error as last_error
    from ._flaky import FlakyTask as FlakyTask
    from ._flaky import flaky_history as flaky_history
    from ._fold import Fold as Fold
    from ._fold import Projection as Projection
    from ._fold import fold as fold
    from ._fold import on as on
    from ._fold import types_of as types_of
    from ._intervals import Interval as Interval
    from ._results import ModelUsage as ModelUsage
    from ._results import RoleUsage as RoleUsage
    from ._results import RunHeadline as RunHeadline
    from ._results import RunSummary as RunSummary
    from ._results import SkippedFile as SkippedFile
    from ._results import TagStats as TagStats
    from ._results import TaskRow as TaskRow
    from ._results import VariantStats as VariantStats
    from ._results import tag_stats as tag_stats
    from ._resume import Drift as Drift
    from ._resume import Partition as Partition
    from ._resume import ResumeFold as ResumeFold
    from ._resume import ResumePlan as ResumePlan
    from ._resume import ResumeRefused as ResumeRefused
    from ._resume import ResumeRequest as ResumeRequest
    from ._resume import compute_drift as compute_drift
    from ._resume import fingerprint as fingerprint
    from ._resume import plan_resume as plan_resume
    from ._status import shown_status as shown_status
    from ._summary import ORIGINAL as ORIGINAL
    from ._summary import SummaryFold as SummaryFold
    from ._summary import UnknownGrades as UnknownGrades
    from ._summary import pass_at as pass_at
    from ._summary import pass_hat as pass_hat

_WHERE = {
    "Change": "_diff",
    "FailOn": "_diff",
    "RunDiff": "_diff",
    "TaskDiff": "_diff",
    "diff_runs": "_diff",
    "compare_runs": "_compare",
    "compare_to_baseline": "_compare",
    "pass_hat": "_summary",
    "Comparison": "_compare",
    "Side": "_compare",
    "TEST": "_compare",
    "Fold": "_fold",
    "FlakyTask": "_flaky",
    "flaky_history": "_flaky",
    "Projection": "_fold",
    "fold": "_fold",
    "on": "_fold",
    "types_of": "_fold",
    "shown_status": "_status",
    "error_digest": "_digest",
    "failure_kinds": "_digest",
    "last_error": "_digest",
    "Drift": "_resume",
    "Partition": "_resume",
    "ResumeFold": "_resume",
    "ResumePlan": "_resume",
    "ResumeRefused": "_resume",
    "ResumeRequest": "_resume",
    "compute_drift": "_resume",
    "fingerprint": "_resume",
    "plan_resume": "_resume",
    "ModelUsage": "_results",
    "RoleUsage": "_results",
    "RunHeadline": "_results",
    "RunSummary": "_results",
    "SkippedFile": "_results",
    "SummaryFold": "_summary",
    "ORIGINAL": "_summary",
    "UnknownGrades": "_summary",
    "TagStats": "_results",
    "TaskRow": "_results",
    "VariantStats": "_results",
    "pass_at": "_summary",
    "tag_stats": "_results",
    "MODEL_API": "_digest",
    "Interval": "_intervals",
}

__getattr__ = _attributes(__name__, _WHERE)

__all__ = [
    "MODEL_API",
    "ORIGINAL",
    "TEST",
    "Change",
    "Comparison",
    "Drift",
    "FailOn",
    "FlakyTask",
    "Fold",
    "Interval",
    "ModelUsage",
    "Partition",
    "Projection",
    "ResumeFold",
    "ResumePlan",
    "ResumeRefused",
    "ResumeRequest",
    "RoleUsage",
    "RunDiff",
    "RunHeadline",
    "RunSummary",
    "Side",
    "SkippedFile",
    "SummaryFold",
    "TagStats",
    "TaskDiff",
    "TaskRow",
    "UnknownGrades",
    "VariantStats",
    "compare_runs",
    "compare_to_baseline",
    "compute_drift",
    "diff_runs",
    "error_digest",
    "failure_kinds",
    "fingerprint",
    "flaky_history",
    "fold",
    "last_error",
    "on",
    "pass_at",
    "pass_hat",
    "plan_resume",
    "shown_status",
    "tag_stats",
    "types_of",
]
