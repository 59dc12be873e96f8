"""``evalledger import``: the old harness's run folders into the ledger."""

from __future__ import annotations

import sys
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._errors import EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.ledger import Ledger


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
@pass_settings
def import_runs(settings: Settings, folders: tuple[Path, ...], zone: str | None,
                dry_run: bool) -> None:
    """Import run folders of the old harness (run.json, task.json files) as runs.

    Every folder holding a run.json under FOLDER is a run (nested ones too). Each
    task.json becomes an attempt, recorded as imported from that file; the file
    itself is kept whole as a task.event. Importing again adds nothing; a file that
    changed since it was imported is named and left as it was imported. A file that
    does not parse or has no final_status is named and its task counts as
    unfinished. Exits 1 when a file was named.

    Example:

        evalledger import ~/old-harness/runs --tz Europe/Paris
    """
    from evalledger.legacy import find_run_folders

    tz = _zone(zone)
    runs = find_run_folders(folders)
    if not runs:
        raise UserError(f"no run.json under {', '.join(map(str, folders))}: nothing to import")
    if dry_run and not settings.ledger_path.exists():
        ok = all(_import_one(None, folder, tz, dry_run=True) for folder in runs)
    else:
        with settings.open_ledger(read_only=dry_run) as ledger:
            ok = all([_import_one(ledger, folder, tz, dry_run=dry_run) for folder in runs])
    sys.exit(EXIT_OK if ok else EXIT_TASKS_FAILED)


def _import_one(ledger: Ledger | None, folder: Path, tz: tzinfo | None, *,
                dry_run: bool) -> bool:
    """Import one run folder; say what happened. False when something was left out."""
    from evalledger.legacy import read_run, run_id_of
    from evalledger.projections import write_snapshot

    run_id = run_id_of(folder)
    known: dict[str, str] = {}
    if ledger is not None:
        source, known = _imported(ledger, run_id)
        if source is not None and source != str(folder.resolve()):
            click.echo(f"{run_id}: not imported from {folder}: the ledger holds a run of that "
                       f"id {'imported from ' + source if source else '(not imported)'}",
                       err=True)
            return False
    run = read_run(folder, tz=tz, known=known)
    added = 0
    if ledger is not None and not dry_run:
        before = ledger.last_seq()
        ledger.append(run.events)
        added = ledger.last_seq() - before
        if added:
            write_snapshot(ledger, run.run_id)
    verb = "would import" if dry_run else "imported"
    unchanged = f", {run.unchanged} already imported" if run.unchanged else ""
    events = "" if dry_run else f" ({added} events)"
    click.echo(f"{run.run_id}: {verb} {run.attempts} attempt(s), {len(run.unfinished)} "
               f"unfinished{unchanged} from {folder}{events}")
    for problem in run.unfinished:
        click.echo(f"  unfinished: {problem.path}: {problem.reason}", err=True)
    for path in run.changed:
        click.echo(f"  changed since it was imported (kept as imported): {path}", err=True)
    return not run.unfinished and not run.changed


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
