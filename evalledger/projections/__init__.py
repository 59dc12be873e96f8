"""Projections: pure folds over ledger events. No SQLite, no trio, no I/O.

Resume partition, fingerprint drift, run summary, reports and diffs are all
computed by replaying events, so they can be rebuilt offline at any time.
"""

from ._diff import Change as Change
from ._diff import FailOn as FailOn
from ._diff import RunDiff as RunDiff
from ._diff import TaskDiff as TaskDiff
from ._diff import diff_runs as diff_runs
from ._fold import Fold as Fold
from ._fold import Projection as Projection
from ._fold import fold as fold
from ._fold import on as on
from ._fold import types_of as types_of
from ._junit import render_junit as render_junit
from ._reports import render_json as render_json
from ._reports import render_markdown as render_markdown
from ._reports import unpriced_line as unpriced_line
from ._reports import variant_table as variant_table
from ._resume import Drift as Drift
from ._resume import Partition as Partition
from ._resume import ResumeFold as ResumeFold
from ._resume import ResumePlan as ResumePlan
from ._resume import ResumeRefused as ResumeRefused
from ._resume import compute_drift as compute_drift
from ._resume import fingerprint as fingerprint
from ._resume import plan_resume as plan_resume
from ._summary import ModelUsage as ModelUsage
from ._summary import RunHeadline as RunHeadline
from ._summary import RunSummary as RunSummary
from ._summary import SkippedFile as SkippedFile
from ._summary import SummaryFold as SummaryFold
from ._summary import TagStats as TagStats
from ._summary import TaskRow as TaskRow
from ._summary import VariantStats as VariantStats
from ._summary import pass_at as pass_at
from ._summary import tag_stats as tag_stats

__all__ = [
    "Change",
    "Drift",
    "FailOn",
    "Fold",
    "ModelUsage",
    "Partition",
    "Projection",
    "ResumeFold",
    "ResumePlan",
    "ResumeRefused",
    "RunDiff",
    "RunHeadline",
    "RunSummary",
    "SkippedFile",
    "SummaryFold",
    "TagStats",
    "TaskDiff",
    "TaskRow",
    "VariantStats",
    "compute_drift",
    "diff_runs",
    "fingerprint",
    "fold",
    "on",
    "pass_at",
    "plan_resume",
    "render_json",
    "render_junit",
    "render_markdown",
    "tag_stats",
    "types_of",
    "unpriced_line",
    "variant_table",
]
