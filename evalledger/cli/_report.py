"""``evalledger report``: rebuild a run's report from the ledger alone; and the
reports ``run`` and ``resume`` write when a batch ends."""

from __future__ import annotations

import os
from pathlib import Path

import click

from evalledger.projections import RunSummary, render_json, render_markdown

from ._common import rebuild_summary, resolve_run
from ._errors import UserError
from ._main import Settings, cli, pass_settings

RENDERERS = {"md": render_markdown, "json": render_json}


def write_reports(summary: RunSummary, folder: Path) -> dict[str, Path]:
    """Write ``run.json`` and ``run.md`` into ``folder``; return their paths by format."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "run.json", "md": folder / "run.md"}
    for format_, path in paths.items():
        path.write_text(RENDERERS[format_](summary), encoding="utf-8")
    return paths


@cli.command()
@click.argument("run")
@click.option("--format", "format_", type=click.Choice(sorted(RENDERERS)), default="md",
              show_default=True, help="Report format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@pass_settings
def report(settings: Settings, run: str, format_: str, output: Path | None) -> None:
    """Rebuild a run's report by replaying its events; nothing is re-run.

    RUN is a run id, a unique prefix of one, or `latest`. The JSON report is the
    same `run.json` that `evalledger run` wrote, byte for byte.

    Example:

        evalledger report latest --format json -o run.json
    """
    if output is not None and _same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        summary = rebuild_summary(ledger, resolve_run(ledger, run))
    text = RENDERERS[format_](summary)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(str(output), err=True)


def _same_file(output: Path, ledger: Path) -> bool:
    """Whether writing ``output`` would overwrite the ledger or its WAL companions."""
    target = os.path.realpath(output)
    return any(target == os.path.realpath(f"{ledger}{suffix}") for suffix in ("", "-wal", "-shm"))
