"""``evalledger report``: rebuild a run's report from the ledger alone (the renderings
are the app's, the same ``run`` and ``resume`` write when a batch ends)."""

from __future__ import annotations

from pathlib import Path

import click

from evalledger._files import same_file
from evalledger.app import FORMATS, render_report, write_text

from ._common import (
    count_infra_option,
    grades_option,
    is_cut_off,
    rebuild_summary,
    resolve_run,
)
from ._errors import UserError
from ._main import Settings, pass_settings


@click.command()
@click.argument("run")
@click.option("--format", "format_", type=click.Choice(FORMATS), default="md",
              show_default=True,
              help="md, json (run.json, byte for byte), html (one self-contained page) or "
                   "junit (JUnit XML for CI).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@grades_option
@count_infra_option
@pass_settings
def report(settings: Settings, run: str, format_: str, output: Path | None,
           grades: str | None, count_infra: bool) -> None:
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
        summary = rebuild_summary(ledger, resolve_run(ledger, run), grades, count_infra)
        text = render_report(ledger, summary, format_,
                             cut_off=is_cut_off(ledger, summary.run_id, summary.status))
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text(output, text)
        click.echo(str(output), err=True)
