"""Rendering: what a run, a comparison or a page says, as text, markdown, JUnit XML or
HTML. Pure functions of the values handed in (a ``RunSummary``, a ``Comparison``, a
page's rows): no ledger, no clock, no environment.

- ``_cells``: a run's figures as text cells and lines, the same words in ``show``,
  ``runs``, ``run``'s closing lines, ``run.md`` and the viewer;
- ``_reports``: ``run.json`` and ``run.md``; ``_junit``: a run as JUnit XML;
- ``_comparison``: ``compare``'s text, markdown and JUnit XML;
- ``_html``, ``_table``, ``_transcript``, ``_charts``, ``_ansi``, ``_highlight``,
  ``templates/``, ``static/``: the viewer's pages and the HTML report, one set of
  templates (``_report``: the run page as one file);
- ``_memo``: what a page computes from a summary, computed once per summary.

Layering: below ``app`` (which reads what a report shows and writes it) and the front
ends, above the projections (which count, and say nothing). Names are imported on
first use: Jinja loads only when a page or an HTML report is rendered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

if TYPE_CHECKING:
    from ._cells import calls_line as calls_line
    from ._cells import cost_line as cost_line
    from ._cells import infra_note as infra_note
    from ._cells import interval_kind as interval_kind
    from ._cells import isolation_counts as isolation_counts
    from ._cells import isolation_line as isolation_line
    from ._cells import model_table as model_table
    from ._cells import rate_cell as rate_cell
    from ._cells import status_text as status_text
    from ._cells import status_word as status_word
    from ._cells import success_cost_line as success_cost_line
    from ._cells import unpriced_line as unpriced_line
    from ._cells import variant_table as variant_table
    from ._comparison import comparison_junit as comparison_junit
    from ._comparison import comparison_markdown as comparison_markdown
    from ._comparison import comparison_text as comparison_text
    from ._comparison import p_value_line as p_value_line
    from ._comparison import power_line as power_line
    from ._html import STATIC as STATIC
    from ._html import compile_templates as compile_templates
    from ._html import not_started as not_started
    from ._html import render_page as render_page
    from ._html import run_charts as run_charts
    from ._html import runs_cost_pass as runs_cost_pass
    from ._html import script as script
    from ._html import segment as segment
    from ._html import stylesheet as stylesheet
    from ._html import summary_tags as summary_tags
    from ._html import usage_chart as usage_chart
    from ._junit import render_junit as render_junit
    from ._memo import per_summary as per_summary
    from ._report import CHANGED_CHARS as CHANGED_CHARS
    from ._report import CHANGED_FILES as CHANGED_FILES
    from ._report import CHANGED_TASKS as CHANGED_TASKS
    from ._report import TAIL_CHARS as TAIL_CHARS
    from ._report import TAIL_LINES as TAIL_LINES
    from ._report import TailLine as TailLine
    from ._report import report_html as report_html
    from ._reports import render_json as render_json
    from ._reports import render_markdown as render_markdown
    from ._table import CLAIMED as CLAIMED
    from ._table import DEFAULT_SORT as DEFAULT_SORT
    from ._table import SORTS as SORTS
    from ._table import TABLE_OUTCOMES as TABLE_OUTCOMES
    from ._table import Neighbours as Neighbours
    from ._table import TableQuery as TableQuery
    from ._table import neighbours as neighbours
    from ._transcript import AttemptMark as AttemptMark
    from ._transcript import Said as Said
    from ._transcript import conversation as conversation
    from ._transcript import with_marks as with_marks

_WHERE = {
    "calls_line": "_cells",
    "cost_line": "_cells",
    "infra_note": "_cells",
    "interval_kind": "_cells",
    "isolation_counts": "_cells",
    "isolation_line": "_cells",
    "model_table": "_cells",
    "rate_cell": "_cells",
    "status_text": "_cells",
    "status_word": "_cells",
    "success_cost_line": "_cells",
    "unpriced_line": "_cells",
    "variant_table": "_cells",
    "comparison_junit": "_comparison",
    "comparison_markdown": "_comparison",
    "comparison_text": "_comparison",
    "p_value_line": "_comparison",
    "power_line": "_comparison",
    "STATIC": "_html",
    "compile_templates": "_html",
    "not_started": "_html",
    "render_page": "_html",
    "run_charts": "_html",
    "runs_cost_pass": "_html",
    "script": "_html",
    "segment": "_html",
    "stylesheet": "_html",
    "summary_tags": "_html",
    "usage_chart": "_html",
    "render_junit": "_junit",
    "per_summary": "_memo",
    "CHANGED_CHARS": "_report",
    "CHANGED_FILES": "_report",
    "CHANGED_TASKS": "_report",
    "TAIL_CHARS": "_report",
    "TAIL_LINES": "_report",
    "TailLine": "_report",
    "report_html": "_report",
    "render_json": "_reports",
    "render_markdown": "_reports",
    "CLAIMED": "_table",
    "DEFAULT_SORT": "_table",
    "Neighbours": "_table",
    "SORTS": "_table",
    "TABLE_OUTCOMES": "_table",
    "TableQuery": "_table",
    "neighbours": "_table",
    "AttemptMark": "_transcript",
    "Said": "_transcript",
    "conversation": "_transcript",
    "with_marks": "_transcript",
}

__getattr__ = _attributes(__name__, _WHERE)

__all__ = [
    "CHANGED_CHARS",
    "CHANGED_FILES",
    "CHANGED_TASKS",
    "CLAIMED",
    "DEFAULT_SORT",
    "SORTS",
    "STATIC",
    "TABLE_OUTCOMES",
    "TAIL_CHARS",
    "TAIL_LINES",
    "AttemptMark",
    "Neighbours",
    "Said",
    "TableQuery",
    "TailLine",
    "calls_line",
    "comparison_junit",
    "comparison_markdown",
    "comparison_text",
    "compile_templates",
    "conversation",
    "cost_line",
    "infra_note",
    "interval_kind",
    "isolation_counts",
    "isolation_line",
    "model_table",
    "neighbours",
    "not_started",
    "p_value_line",
    "per_summary",
    "power_line",
    "rate_cell",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_page",
    "report_html",
    "run_charts",
    "runs_cost_pass",
    "script",
    "segment",
    "status_text",
    "status_word",
    "stylesheet",
    "success_cost_line",
    "summary_tags",
    "unpriced_line",
    "usage_chart",
    "variant_table",
    "with_marks",
]
