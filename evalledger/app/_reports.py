"""The reports a batch leaves in ``<out>/<run_id>/`` when it ends, and the renderings
``evalledger report`` prints: each written whole or not at all."""

from __future__ import annotations

from pathlib import Path

from evalledger._files import write_atomic
from evalledger.ledger import Ledger
from evalledger.projections import RunSummary, render_json, render_junit, render_markdown

FORMATS = ("md", "json", "html", "junit")
# What `run` and `resume` write into <out>/<run_id>/ when a batch ends.
WRITTEN = {"json": "run.json", "md": "run.md", "html": "report.html"}


def render_report(ledger: Ledger, summary: RunSummary, format_: str, *,
                  cut_off: bool = False) -> str:
    """The summary in one of ``FORMATS``; the HTML one also reads transcript tails.
    ``cut_off``: the run's process is gone (run.md says so; run.json keeps the ledger's
    word, byte for byte)."""
    if format_ == "html":
        # The viewer's run page as one file. Reached upward, and only when asked for
        # (Jinja2), until the page's data is a read the app owns.
        from evalledger.viewer import report_html

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
