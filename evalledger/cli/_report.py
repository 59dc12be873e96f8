"""``evalledger report``: rebuild a run's report from the ledger alone; and the
reports ``run`` and ``resume`` write when a batch ends."""

from __future__ import annotations

from pathlib import Path

import click

from evalledger._files import same_file, write_atomic
from evalledger.ledger import Ledger
from evalledger.projections import RunSummary, render_json, render_junit, render_markdown

from ._common import is_cut_off, rebuild_summary, resolve_run
from ._errors import UserError
from ._main import Settings, pass_settings

FORMATS = ("md", "json", "html", "junit")
# What `run` and `resume` write into <out>/<run_id>/ when a batch ends.
WRITTEN = {"json": "run.json", "md": "run.md", "html": "report.html"}


def render_report(ledger: Ledger, summary: RunSummary, format_: str, *,
                  cut_off: bool = False) -> str:
    """The summary in one of ``FORMATS``; the HTML one also reads transcript tails.
    ``cut_off``: the run's process is gone (run.md says so; run.json keeps the ledger's
    word, byte for byte)."""
    if format_ == "html":
        from evalledger.viewer import report_html  # Jinja2: only when asked for

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


@click.command()
@click.argument("run")
@click.option("--format", "format_", type=click.Choice(FORMATS), default="md",
              show_default=True,
              help="md, json (run.json, byte for byte), html (one self-contained page) or "
                   "junit (JUnit XML for CI).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@pass_settings
def report(settings: Settings, run: str, format_: str, output: Path | None) -> None:
    """Rebuild a run's report by replaying its events; nothing is re-run.

    RUN is a run id, a unique prefix of one, or `latest`. The JSON report is the
    same `run.json` that `evalledger run` wrote, byte for byte; the HTML report is
    the viewer's run page as one file (inline CSS and SVG, no script), with the
    last 20 lines of each task's transcript.

    Example:

        evalledger report latest --format json -o run.json
    """
    if output is not None and same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        summary = rebuild_summary(ledger, resolve_run(ledger, run))
        text = render_report(ledger, summary, format_,
                             cut_off=is_cut_off(ledger, summary.run_id, summary.status))
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text(output, text)
        click.echo(str(output), err=True)
