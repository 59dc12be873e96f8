"""``evalledger import``: the old harness's run folders into the ledger
(``evalledger.app.import_runs``), each said as it is done."""

from __future__ import annotations

import re
import sys
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalledger.app import Callbacks

from ._errors import EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.app import RunImport

# The module-level constant would import legacy (and pydantic) for every command's start.
_DEFAULT_MAX_FILE = "64MiB"  # evalledger.importers.legacy.MAX_FILE_BYTES (a test holds them equal)


class _Size(click.ParamType[int, object]):
    """A size in bytes: ``1048576``, ``64MiB``, ``64M``, ``2G`` (powers of 1024)."""

    name = "size"
    _form = re.compile(r"(\d+)\s*([KMG]?)(?:i?B)?", re.IGNORECASE)

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = self._form.fullmatch(str(value).strip())
        if match is None or int(match[1]) == 0:
            self.fail(f"{value!r} is not a size (try 64MiB, 200M or 1G)", param, ctx)
        return int(match[1]) << (10 * " KMG".index(match[2].upper() or " "))


def _zone(name: str | None) -> tzinfo | None:
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise UserError(f"--tz {name!r} is not a time zone (try UTC or Europe/Paris)") from e


@click.command(name="import")
@click.argument("folders", nargs=-1, required=True, metavar="FOLDER...",
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tz", "zone", metavar="ZONE",
              help="The time zone of the old files' times, which have no offset (default: "
                   "this machine's).")
@click.option("--dry-run", is_flag=True, help="Say what would be imported; append nothing.")
@click.option("--max-file-bytes", "max_file_bytes", type=_Size(), default=_DEFAULT_MAX_FILE,
              show_default=True, metavar="SIZE",
              help="A run.json or task.json larger than this is not read (named as "
                   "skipped).")
@pass_settings
def import_runs(settings: Settings, folders: tuple[Path, ...], zone: str | None,
                dry_run: bool, max_file_bytes: int) -> None:
    """Import run folders of the old harness (run.json, task.json files) as runs.

    Every folder holding a run.json under FOLDER is a run (nested ones too). Each
    task.json becomes an attempt, recorded as imported from that file; the file
    itself is kept whole as a task.event. Importing again adds nothing; a file that
    changed since it was imported is named and left as it was imported. A file that
    does not parse or has no final_status is named and its task counts as
    unfinished. Only regular files are read: links, FIFOs, devices, sockets and files
    over --max-file-bytes are named as skipped; a run whose folder name or run id the
    ledger cannot store (a newline, a control character, '/') is named and left out.
    Exits 1 when a file or run was named.

    Example:

        evalledger import ~/old-harness/runs --tz Europe/Paris
    """
    from evalledger.app import import_runs as run_import

    outcome = run_import(folders, ledger=settings.ledger_path, tz=_zone(zone),
                         dry_run=dry_run, max_file_bytes=max_file_bytes,
                         callbacks=_Said())
    sys.exit(EXIT_OK if outcome.complete else EXIT_TASKS_FAILED)


class _Said(Callbacks):
    """Each run folder's result, said as it is done."""

    def notice(self, text: str) -> None:
        click.echo(text, err=True)

    def run_imported(self, result: RunImport) -> None:
        from evalledger.importers.legacy import shown

        folder = shown(str(result.folder))
        if result.left_out is not None:
            head = (f"{result.run_id}: not imported from {folder}" if result.held
                    else f"{folder}: not imported")
            click.echo(f"{head}: {result.left_out}", err=True)
            return
        verb = "would import" if result.dry_run else "imported"
        skipped = f", {len(result.skipped)} skipped" if result.skipped else ""
        unchanged = f", {result.unchanged} already imported" if result.unchanged else ""
        events = "" if result.dry_run else f" ({result.added} events)"
        click.echo(f"{result.run_id}: {verb} {result.attempts} attempt(s), "
                   f"{len(result.unfinished)} unfinished{skipped}{unchanged} from "
                   f"{folder}{events}")
        if result.differences:
            click.echo(f"  differs from its run.json: {shown(', '.join(result.differences))}")
        for kind, problems in (("unfinished", result.unfinished), ("skipped", result.skipped)):
            for problem in problems:
                click.echo(f"  {kind}: {shown(problem.path)}: {shown(problem.reason)}",
                           err=True)
        for path in result.changed:
            click.echo(f"  changed since it was imported (kept as imported): {shown(path)}",
                       err=True)
