"""The reports a batch leaves in ``<out>/<run_id>/`` when it ends, and the renderings
``evalledger report`` prints: each written whole or not at all.

The renderings are ``evalledger.render``'s; what the HTML report shows besides the
summary (the transcripts' tails, the files the agents changed, the environment fields
the variants define) is read here and handed to it. Jinja is imported only for an HTML
report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from evalledger._files import write_atomic
from evalledger._workspace_diff import WorkspaceChanges
from evalledger.ledger import Ledger, completion_environments, run_imported
from evalledger.projections import RunSummary
from evalledger.render import (
    CHANGED_CHARS,
    CHANGED_FILES,
    CHANGED_TASKS,
    TAIL_CHARS,
    TAIL_LINES,
    TableQuery,
    render_json,
    render_junit,
    render_markdown,
)

from ._transcripts import tails
from ._workspace import workspace_changes

FORMATS = ("md", "json", "html", "junit")
# What `run` and `resume` write into <out>/<run_id>/ when a batch ends.
WRITTEN = {"json": "run.json", "md": "run.md", "html": "report.html"}


def render_report(ledger: Ledger, summary: RunSummary, format_: str, *,
                  cut_off: bool = False) -> str:
    """The summary in one of ``FORMATS``; the HTML one also reads transcript tails.
    ``cut_off``: the run's process is gone (run.md says so; run.json keeps the ledger's
    word, byte for byte)."""
    if format_ == "html":
        return report_html(ledger, summary)
    if format_ == "md":
        return render_markdown(summary, cut_off=cut_off)
    renderer = {"json": render_json, "junit": render_junit}[format_]
    return renderer(summary)


def write_reports(ledger: Ledger, summary: RunSummary, folder: Path) -> dict[str, Path]:
    """Write ``run.json``, ``run.md`` and ``report.html`` into ``folder``; return their
    paths by format."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {format_: folder / name for format_, name in WRITTEN.items()}
    for format_, path in paths.items():
        write_text(path, render_report(ledger, summary, format_))
    return paths


def write_text(path: Path, text: str) -> None:
    """Write a report whole or not at all (``write_atomic``): a full disk leaves the
    previous report, never half of one. A failure names the file."""
    write_atomic(path, text)


def report_html(ledger: Ledger, summary: RunSummary) -> str:
    """The run page of ``summary`` as one file (``render.report_html``), with what it
    shows besides the summary read from ``ledger``."""
    from evalledger.render import report_html as rendered  # Jinja: only for this one

    return rendered(summary, tails=tails(ledger, summary, lines=TAIL_LINES, chars=TAIL_CHARS),
                    variant_bound=variant_bound(ledger, summary),
                    imported=run_imported(ledger, summary.run_id),
                    changes=changed_files(ledger, summary))


def changed_files(ledger: Ledger, summary: RunSummary, room: int = CHANGED_CHARS,
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


def variant_bound(ledger: Ledger, summary: RunSummary, until_seq: int | None = None,
                  ) -> frozenset[str]:
    """The environment fields of the run's version drift that its variants define: the
    keys of each variant agree on one value, and the variants differ (an experiment of
    two models has two models by design: that is its point, not drift).

    Read only when there is drift and more than one variant: the latest completion of
    each key, its ``environment_info``, by the fold's rule (the highest attempt).
    """
    names = set(summary.version_drift)
    if not names or len(summary.variants) < 2:
        return frozenset()
    variant_of = {row.task_key: row.variant_id for row in summary.tasks}
    values: dict[str, dict[str, set[str]]] = {}
    for key, info in _latest_environments(ledger, summary.run_id, until_seq).items():
        variant = variant_of.get(key)
        if variant is None:
            continue
        for name in names & info.keys():
            values.setdefault(name, {}).setdefault(variant, set()).add(
                json.dumps(info[name], sort_keys=True))
    return frozenset(name for name, by_variant in values.items()
                     if all(len(v) == 1 for v in by_variant.values()))


def _latest_environments(ledger: Ledger, run_id: str, until_seq: int | None,
                         ) -> dict[str, dict[str, Any]]:
    """Per task key, the ``environment_info`` of its latest completion (the highest
    attempt; of equal ones, the last)."""
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for key, number, info in completion_environments(ledger, run_id, until_seq):
        if key not in latest or number >= latest[key][0]:
            latest[key] = (number, info)
    return {key: info for key, (_, info) in latest.items()}
