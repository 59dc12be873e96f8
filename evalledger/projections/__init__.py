"""Projections: pure folds over ledger events. No SQLite, no trio, no I/O.

Resume partition, fingerprint drift, run summary, reports, diffs and a run's shown
status are all computed from events handed in, so they can be rebuilt offline at any
time. Reading events for them, and snapshots of them, is the application's read side
(``evalledger.app._repository``).

Names are imported on first use: ``show`` needs the summary, not the diff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

if TYPE_CHECKING:
    from ._compare import Comparison as Comparison
    from ._compare import compare_runs as compare_runs
    from ._compare import compare_to_baseline as compare_to_baseline
    from ._compare_reports import comparison_junit as comparison_junit
    from ._compare_reports import comparison_markdown as comparison_markdown
    from ._compare_reports import comparison_text as comparison_text
    from ._compare_reports import p_value_line as p_value_line
    from ._compare_reports import power_line as power_line
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
    from ._junit import render_junit as render_junit
    from ._reports import calls_line as calls_line
    from ._reports import cost_line as cost_line
    from ._reports import infra_note as infra_note
    from ._reports import interval_kind as interval_kind
    from ._reports import isolation_counts as isolation_counts
    from ._reports import isolation_line as isolation_line
    from ._reports import model_table as model_table
    from ._reports import rate_cell as rate_cell
    from ._reports import render_json as render_json
    from ._reports import render_markdown as render_markdown
    from ._reports import status_text as status_text
    from ._reports import status_word as status_word
    from ._reports import success_cost_line as success_cost_line
    from ._reports import unpriced_line as unpriced_line
    from ._reports import variant_table as variant_table
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
    "Fold": "_fold",
    "FlakyTask": "_flaky",
    "flaky_history": "_flaky",
    "Projection": "_fold",
    "fold": "_fold",
    "on": "_fold",
    "types_of": "_fold",
    "render_junit": "_junit",
    "shown_status": "_status",
    "cost_line": "_reports",
    "error_digest": "_digest",
    "failure_kinds": "_digest",
    "last_error": "_digest",
    "render_json": "_reports",
    "render_markdown": "_reports",
    "isolation_counts": "_reports",
    "calls_line": "_reports",
    "isolation_line": "_reports",
    "infra_note": "_reports",
    "status_word": "_reports",
    "status_text": "_reports",
    "unpriced_line": "_reports",
    "model_table": "_reports",
    "variant_table": "_reports",
    "interval_kind": "_reports",
    "rate_cell": "_reports",
    "success_cost_line": "_reports",
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
    "p_value_line": "_compare_reports",
    "power_line": "_compare_reports",
    "MODEL_API": "_digest",
    "Interval": "_intervals",
    "comparison_junit": "_compare_reports",
    "comparison_markdown": "_compare_reports",
    "comparison_text": "_compare_reports",
}

__getattr__ = _attributes(__name__, _WHERE)

__all__ = [
    "MODEL_API",
    "ORIGINAL",
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
    "SkippedFile",
    "SummaryFold",
    "TagStats",
    "TaskDiff",
    "TaskRow",
    "UnknownGrades",
    "VariantStats",
    "calls_line",
    "compare_runs",
    "compare_to_baseline",
    "comparison_junit",
    "comparison_markdown",
    "comparison_text",
    "compute_drift",
    "cost_line",
    "diff_runs",
    "error_digest",
    "failure_kinds",
    "fingerprint",
    "flaky_history",
    "fold",
    "infra_note",
    "interval_kind",
    "isolation_counts",
    "isolation_line",
    "last_error",
    "model_table",
    "on",
    "p_value_line",
    "pass_at",
    "pass_hat",
    "plan_resume",
    "power_line",
    "rate_cell",
    "render_json",
    "render_junit",
    "render_markdown",
    "shown_status",
    "status_text",
    "status_word",
    "success_cost_line",
    "tag_stats",
    "types_of",
    "unpriced_line",
    "variant_table",
]
