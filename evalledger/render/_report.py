"""The HTML report: a run as one self-contained file.

The run page of the viewer, rendered in ``file`` mode (``_html``): the stylesheet
inline, charts as inline SVG, no script and nothing fetched from a network. Each task
carries the tail of its latest attempt's transcript: its last ``TAIL_LINES`` lines,
whole lines as many as fit in ``TAIL_CHARS`` characters, an agent's JSON lines read as
its conversation (docs/cli.md, "report"); the ledger holds the rest. Every task's
section is open, so a link from the task table lands on what it names. The first
``CHANGED_TASKS`` tasks that did not succeed (errors and failures, as the table puts
them first) also say which files their agent changed, the first ``CHANGED_FILES`` of
them with their diffs folded; the viewer's task page has every file of every task.

What the page shows besides the summary is read by the application layer
(``app/_reports``: the tails, the changed files, the fields the variants define) and
handed in: rendering reads no ledger.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from evalledger.projections import RunSummary

from ._table import TableQuery

TAIL_LINES = 20
TAIL_CHARS = 2000
CHANGED_TASKS = 50
CHANGED_FILES = 20
CHANGED_CHARS = 2_000_000


class TailLine(NamedTuple):
    """A line of the report's transcript tail: what it is (stdout, stderr, json, or a
    conversation line's kind: assistant, tool, result, ...) and its text."""

    kind: str
    text: str


def report_html(summary: RunSummary, *, tails: Mapping[str, Sequence[TailLine]],
                variant_bound: Collection[str] = frozenset(),
                imported: Mapping[str, Any] | None = None,
                changes: Mapping[str, Any] | None = None) -> str:
    """The run page of ``summary`` as one file: ``tails``, per task key, its transcript's
    tail; ``variant_bound``, the drifted environment fields its variants define;
    ``imported``, where the run came from when it was imported; ``changes``, per task key,
    the files its agent changed (``app.WorkspaceChanges``)."""
    # Jinja (and Pygments, for the diffs) loaded here: a batch's run.md needs neither.
    from ._highlight import REPORT_SECONDS, Budget
    from ._html import not_started, render_page, run_charts, summary_tags

    return render_page(
        "run.html", mode="file", summary=summary, status=summary.status,
        charts=run_charts(summary), rows=summary.tasks, table=TableQuery(), tails=tails,
        tags=summary_tags(summary), at=None, total_rows=len(summary.tasks),
        pages=1, tail_lines=TAIL_LINES, tail_chars=TAIL_CHARS, running=frozenset(),
        not_started=not_started(summary), variant_bound=variant_bound, imported=imported,
        changes=changes or {}, changed_tasks=CHANGED_TASKS,
        highlight_budget=Budget(REPORT_SECONDS), changed_files=CHANGED_FILES,
    )
