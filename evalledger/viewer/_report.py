"""The HTML report: a run as one self-contained file, rebuilt from the ledger.

The run page of the viewer, rendered in ``file`` mode (``_render``): the
stylesheet inline, charts as inline SVG, no script and nothing fetched from a
network. Each task carries the tail of its latest attempt's transcript: its last
``TAIL_LINES`` lines, whole lines as many as fit in ``TAIL_CHARS`` characters, an agent's
JSON lines read as its conversation (docs/cli.md, "report"); the ledger holds the rest.
Every task's section is open, so a link from the task table lands on what it names.
The first ``CHANGED_TASKS`` tasks that did not succeed (errors and failures, as the table
puts them first) also say which files their agent changed (``app/_workspace``: the kept
workspace against its starting folder), the first ``CHANGED_FILES`` of them with their
diffs folded; the viewer's task page has every file of every task.
"""

from __future__ import annotations

import dataclasses

from evalledger.app import WorkspaceChanges, workspace_changes
from evalledger.ledger import Ledger
from evalledger.projections import RunSummary

from . import _queries
from ._highlight import REPORT_SECONDS, Budget
from ._render import TableQuery, not_started, render, run_charts, stylesheet, summary_tags

TAIL_LINES = 20
TAIL_CHARS = 2000
CHANGED_TASKS = 50
CHANGED_FILES = 20
CHANGED_CHARS = 2_000_000


def report_html(ledger: Ledger, summary: RunSummary) -> str:
    """The run page of ``summary`` as one file, its transcript tails read from ``ledger``."""
    tails = _queries.tails(ledger, summary, lines=TAIL_LINES, chars=TAIL_CHARS)
    return render(
        "run.html", mode="file", summary=summary, status=summary.status,
        charts=run_charts(summary), rows=summary.tasks, table=TableQuery(), tails=tails,
        tags=summary_tags(summary), css=stylesheet(), at=None, total_rows=len(summary.tasks),
        pages=1, tail_lines=TAIL_LINES, tail_chars=TAIL_CHARS, running=frozenset(),
        not_started=not_started(summary),
        variant_bound=_queries.variant_bound(ledger, summary),
        imported=_queries.imported(ledger, summary.run_id),
        changes=_changes(ledger, summary), changed_tasks=CHANGED_TASKS,
        highlight_budget=Budget(REPORT_SECONDS),
        changed_files=CHANGED_FILES,
    )


def _changes(ledger: Ledger, summary: RunSummary, room: int = CHANGED_CHARS,
             ) -> dict[str, WorkspaceChanges]:
    """What the agents of the first ``CHANGED_TASKS`` tasks that did not succeed
    changed, by key; none where nothing could be compared. Their diffs fill ``room``
    characters of the report at most: the files after are named."""
    failed = [r.task_key for r in TableQuery(outcomes=("error", "failed")).select(
        summary.tasks)][:CHANGED_TASKS]
    found: dict[str, WorkspaceChanges] = {}
    for key in failed:
        try:
            changes = workspace_changes(ledger, summary.run_id, key, most=CHANGED_FILES)
        except OSError:  # a report is never lost to one workspace: the viewer says why
            continue
        if changes.why_not:
            continue
        files = []
        for f in changes.files:
            size = sum(len(line) for _, line in f.diff)
            room -= size
            files.append(f if room >= 0 or not f.diff else dataclasses.replace(
                f, diff=(), note="its diff left out: the report's room for diffs is used"))
        found[key] = dataclasses.replace(changes, files=files)
    return found
