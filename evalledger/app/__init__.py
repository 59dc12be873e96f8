"""The application layer: the commands that run, resume, import and carry runs.

A command takes typed options (``RunOptions``, what a run records; ``RunSettings``,
what it does not; ``ResumeRequest``), does its work and returns an outcome value
(``RunOutcome``, ``ImportOutcome``, ``TransferOutcome``). It prints nothing and never
exits: what a person sees as it goes is told to ``Callbacks`` (the CLI shows it, a
Python caller may), and the exit code is the caller's (the CLI maps the outcome to
one). Every error a user can act on is an ``EvalledgerError``; no command converts one
into another. ``evalledger.run`` and ``evalledger.resume`` are ``start_run`` and
``resume_run``: the CLI calls exactly these.

Layering: this package may import every package below it (ledger, suite, importers,
projections, executor, render); only the CLI and the viewer import it.

Names are imported on first use (PEP 562): ``evalledger export`` needs neither trio
nor the executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

# Where a command finds the ledger when none is named (the CLI: no --ledger and no
# $EVALLEDGER_LEDGER). Here, not in a module: the CLI reads it on every start.
DEFAULT_LEDGER = "evalledger.db"

if TYPE_CHECKING:
    from evalledger._workspace_diff import WorkspaceChanges as WorkspaceChanges
    from evalledger.projections import ResumeRequest as ResumeRequest

    from ._batch import Ending as Ending
    from ._batch import RunOutcome as RunOutcome
    from ._batch import Verdict as Verdict
    from ._callbacks import Callbacks as Callbacks
    from ._events import run_events as run_events
    from ._import import ImportOutcome as ImportOutcome
    from ._import import RunImport as RunImport
    from ._import import import_runs as import_runs
    from ._pages import Attempt as Attempt
    from ._pages import EverySearch as EverySearch
    from ._pages import Found as Found
    from ._pages import Past as Past
    from ._pages import Reading as Reading
    from ._pages import RunFound as RunFound
    from ._pages import RunSearch as RunSearch
    from ._pages import TranscriptPage as TranscriptPage
    from ._pages import attempt_at as attempt_at
    from ._pages import attempts as attempts
    from ._pages import claimed_success as claimed_success
    from ._pages import row_before as row_before
    from ._pages import search_run as search_run
    from ._pages import search_runs as search_runs
    from ._pages import summary_at as summary_at
    from ._pages import transcript as transcript
    from ._pages import usage_curves as usage_curves
    from ._prepare import shard_spec as shard_spec
    from ._read import compare as compare
    from ._read import compared as compared
    from ._read import list_runs as list_runs
    from ._read import regrade as regrade
    from ._read import summary as summary
    from ._regrade import RegradeRequest as RegradeRequest
    from ._regrade import grade_again as grade_again
    from ._reports import FORMATS as FORMATS
    from ._reports import render_report as render_report
    from ._reports import report_html as report_html
    from ._reports import variant_bound as variant_bound
    from ._reports import write_text as write_text
    from ._repository import RUN_COLUMNS as RUN_COLUMNS
    from ._repository import ListedRun as ListedRun
    from ._repository import flaky_tasks as flaky_tasks
    from ._repository import listed_runs as listed_runs
    from ._repository import load_fold as load_fold
    from ._repository import load_folds as load_folds
    from ._repository import load_summary as load_summary
    from ._repository import load_summary_page as load_summary_page
    from ._repository import recent_runs as recent_runs
    from ._repository import run_is_over as run_is_over
    from ._repository import run_status as run_status
    from ._repository import snapshot_summary as snapshot_summary
    from ._repository import status_of as status_of
    from ._resume import resume_run as resume_run
    from ._run import start_run as start_run
    from ._scan import scan as scan
    from ._schema import schema_columns as schema_columns
    from ._search import Hit as Hit
    from ._search import search as search
    from ._search import search_ledger as search_ledger
    from ._settings import RunSettings as RunSettings
    from ._settings import open_ledger as open_ledger
    from ._transcripts import Line as Line
    from ._transcripts import transcript_line as transcript_line
    from ._transfer import ExportOutcome as ExportOutcome
    from ._transfer import TransferOutcome as TransferOutcome
    from ._transfer import export as export
    from ._transfer import import_events as import_events
    from ._transfer import merge as merge
    from ._verified import check_ledger as check_ledger
    from ._verified import checkpoint as checkpoint
    from ._verified import verified_through as verified_through
    from ._workspace import workspace_changes as workspace_changes

_WHERE = {
    "ResumeRequest": "evalledger.projections",
    "Ending": "_batch",
    "RunOutcome": "_batch",
    "Verdict": "_batch",
    "Callbacks": "_callbacks",
    "run_events": "_events",
    "ImportOutcome": "_import",
    "RunImport": "_import",
    "import_runs": "_import",
    "list_runs": "_read",
    "compare": "_read",
    "compared": "_read",
    "regrade": "_read",
    "search": "_search",
    "summary": "_read",
    "resume_run": "_resume",
    "start_run": "_run",
    "RunSettings": "_settings",
    "shard_spec": "_prepare",
    "ExportOutcome": "_transfer",
    "TransferOutcome": "_transfer",
    "export": "_transfer",
    "import_events": "_transfer",
    "merge": "_transfer",
    "load_summary": "_repository",
    "run_is_over": "_repository",
    "run_status": "_repository",
    "flaky_tasks": "_repository",
    "recent_runs": "_repository",
    "open_ledger": "_settings",
    "RegradeRequest": "_regrade",
    "grade_again": "_regrade",
    "FORMATS": "_reports",
    "render_report": "_reports",
    "report_html": "_reports",
    "variant_bound": "_reports",
    "Line": "_transcripts",
    "transcript_line": "_transcripts",
    "write_text": "_reports",
    "ListedRun": "_repository",
    "RUN_COLUMNS": "_repository",
    "scan": "_scan",
    "Hit": "_search",
    "schema_columns": "_schema",
    "search_ledger": "_search",
    "load_summary_page": "_repository",
    "check_ledger": "_verified",
    "checkpoint": "_verified",
    "verified_through": "_verified",
    "snapshot_summary": "_repository",
    "workspace_changes": "_workspace",
    "load_fold": "_repository",
    "WorkspaceChanges": "evalledger._workspace_diff",
    "load_folds": "_repository",
    "status_of": "_repository",
    "listed_runs": "_repository",
    "Past": "_pages",
    "summary_at": "_pages",
    "Attempt": "_pages",
    "attempts": "_pages",
    "attempt_at": "_pages",
    "TranscriptPage": "_pages",
    "transcript": "_pages",
    "row_before": "_pages",
    "Found": "_pages",
    "RunSearch": "_pages",
    "search_run": "_pages",
    "RunFound": "_pages",
    "EverySearch": "_pages",
    "search_runs": "_pages",
    "Reading": "_pages",
    "usage_curves": "_pages",
    "claimed_success": "_pages",
}

__getattr__ = _attributes(__name__, _WHERE)

__all__ = [
    "DEFAULT_LEDGER",
    "FORMATS",
    "RUN_COLUMNS",
    "Attempt",
    "Callbacks",
    "Ending",
    "EverySearch",
    "ExportOutcome",
    "Found",
    "Hit",
    "ImportOutcome",
    "Line",
    "ListedRun",
    "Past",
    "Reading",
    "RegradeRequest",
    "ResumeRequest",
    "RunFound",
    "RunImport",
    "RunOutcome",
    "RunSearch",
    "RunSettings",
    "TranscriptPage",
    "TransferOutcome",
    "Verdict",
    "WorkspaceChanges",
    "attempt_at",
    "attempts",
    "check_ledger",
    "checkpoint",
    "claimed_success",
    "compare",
    "compared",
    "export",
    "flaky_tasks",
    "grade_again",
    "import_events",
    "import_runs",
    "list_runs",
    "listed_runs",
    "load_fold",
    "load_folds",
    "load_summary",
    "load_summary_page",
    "merge",
    "open_ledger",
    "recent_runs",
    "regrade",
    "render_report",
    "report_html",
    "resume_run",
    "row_before",
    "run_events",
    "run_is_over",
    "run_status",
    "scan",
    "schema_columns",
    "search",
    "search_ledger",
    "search_run",
    "search_runs",
    "shard_spec",
    "snapshot_summary",
    "start_run",
    "status_of",
    "summary",
    "summary_at",
    "transcript",
    "transcript_line",
    "usage_curves",
    "variant_bound",
    "verified_through",
    "workspace_changes",
    "write_text",
]
