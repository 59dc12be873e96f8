"""``evalledger import``: the old harness's run folders into the ledger."""

from __future__ import annotations

import re
import sys
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._errors import EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.importers.legacy import LegacyRun, Problem
    from evalledger.ledger import Ledger
    from evalledger.projections import RunSummary

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
    from evalledger.importers.legacy import find_run_folders, shown

    tz = _zone(zone)
    unlisted: list[Problem] = []
    runs = find_run_folders(folders, unlisted)
    for problem in unlisted:
        click.echo(f"{shown(problem.path)}: not searched: {shown(problem.reason)}", err=True)
    if not runs:
        raise UserError(f"no run.json under {', '.join(shown(str(f)) for f in folders)}: "
                        "nothing to import")
    if dry_run and not settings.ledger_path.exists():
        ok = all([_import_one(None, folder, tz, max_file_bytes, dry_run=True)
                  for folder in runs])
    else:
        with settings.open_ledger(read_only=dry_run) as ledger:
            ok = all([_import_one(ledger, folder, tz, max_file_bytes, dry_run=dry_run)
                      for folder in runs])
    sys.exit(EXIT_OK if ok and not unlisted else EXIT_TASKS_FAILED)


def _import_one(ledger: Ledger | None, folder: Path, tz: tzinfo | None, max_file_bytes: int,
                *, dry_run: bool) -> bool:
    """Import one run folder; say what happened. False when something was left out."""
    from evalledger.importers.legacy import (
        NotImportable,
        differences,
        load_run,
        old_totals,
        read_run,
        shown,
    )
    from evalledger.projections import write_snapshot

    try:
        found = load_run(folder, max_file_bytes=max_file_bytes)
        run_id = found.run_id
        known: dict[str, str] = {}
        if ledger is not None:
            source, known = _imported(ledger, run_id)
            if source is not None and source != str(folder.resolve()):
                click.echo(f"{run_id}: not imported from {shown(str(folder))}: the ledger holds "
                           f"a run of that id "
                           f"{'imported from ' + shown(source) if source else '(not imported)'}",
                           err=True)
                return False
        run = read_run(found, tz=tz, known=known, max_file_bytes=max_file_bytes)
    except NotImportable as e:
        click.echo(f"{shown(str(folder))}: not imported: {e}", err=True)
        return False
    added = 0
    if ledger is not None and not dry_run:
        before = ledger.last_seq()
        ledger.append(run.events)
        added = ledger.last_seq() - before
        if added:
            write_snapshot(ledger, run.run_id)
    verb = "would import" if dry_run else "imported"
    skipped = f", {len(run.skipped)} skipped" if run.skipped else ""
    unchanged = f", {run.unchanged} already imported" if run.unchanged else ""
    events = "" if dry_run else f" ({added} events)"
    click.echo(f"{run.run_id}: {verb} {run.attempts} attempt(s), {len(run.unfinished)} "
               f"unfinished{skipped}{unchanged} from {shown(str(folder))}{events}")
    if said := differences(old_totals(found.summary), _summary(ledger, run, dry_run=dry_run)):
        click.echo(f"  differs from its run.json: {shown(', '.join(said))}")
    for kind, problems in (("unfinished", run.unfinished), ("skipped", run.skipped)):
        for problem in problems:
            click.echo(f"  {kind}: {shown(problem.path)}: {shown(problem.reason)}", err=True)
    for path in run.changed:
        click.echo(f"  changed since it was imported (kept as imported): {shown(path)}",
                   err=True)
    return not run.unfinished and not run.skipped and not run.changed


def _summary(ledger: Ledger | None, run: LegacyRun, *, dry_run: bool) -> RunSummary:
    """The run as the ledger counts it once imported: rebuilt from the ledger, or on a
    dry run, its events there (a file imported before) with those just read."""
    from evalledger.projections import SummaryFold, load_summary

    if ledger is not None and not dry_run:
        return load_summary(ledger, run.run_id)
    fold = SummaryFold(run.run_id)
    seen: set[str] = set()
    stored = ledger.events(run.run_id) if ledger is not None else []
    for event in [*stored, *(row.decode() for row in run.events)]:
        if event.event_id not in seen:
            seen.add(event.event_id)
            fold.apply(event)
    return fold.summary()


def _imported(ledger: Ledger, run_id: str) -> tuple[str | None, dict[str, str]]:
    """Where the run in the ledger was imported from ("" when it was not imported; None
    when there is no such run), and its imported files with their content hashes."""
    _, started = ledger.query(
        "SELECT json_extract(payload, '$.imported.source') FROM events "
        "WHERE type = 'run.started' AND task_key IS NULL AND run_id = ?", [run_id])
    if not started:
        return None, {}
    _, files = ledger.query(
        "SELECT json_extract(payload, '$.imported.source'), "
        "coalesce(json_extract(payload, '$.imported.sha256'), '') FROM events "
        "WHERE run_id = ? AND type = 'task.started' "
        "AND json_extract(payload, '$.imported') IS NOT NULL", [run_id])
    return started[0][0] or "", {source: digest for source, digest in files}
