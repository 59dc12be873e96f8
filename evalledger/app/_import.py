"""``import_runs``: the old harness's run folders into the ledger (docs/import.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path

from evalledger.errors import NothingToImport
from evalledger.importers.legacy import (
    MAX_FILE_BYTES,
    LegacyRun,
    NotImportable,
    Problem,
    differences,
    find_run_folders,
    load_run,
    old_totals,
    read_run,
    shown,
)
from evalledger.ledger import Ledger
from evalledger.ledger._queries import import_sources
from evalledger.projections import RunSummary, SummaryFold

from ._callbacks import Callbacks
from ._repository import load_summary, write_snapshot
from ._settings import open_ledger


@dataclass(frozen=True)
class RunImport:
    """One run folder: imported (or, on a dry run, what would be), or left out whole."""

    folder: Path
    run_id: str | None = None
    left_out: str | None = None
    """Why nothing of the folder was imported; None when it was."""
    held: bool = False
    """Left out because the ledger holds another run of that id (``left_out`` says
    where that one came from)."""
    dry_run: bool = False
    attempts: int = 0
    """Attempts imported with a final status."""
    added: int = 0
    """Events appended (none on a dry run, none for a folder imported before)."""
    unchanged: int = 0
    """Files imported before and unchanged since: they add nothing."""
    unfinished: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    """Files that changed since they were imported (kept as imported)."""
    differences: list[str] = field(default_factory=list)
    """What the ledger counts differently from the run.json's own totals."""

    @property
    def complete(self) -> bool:
        """Imported with nothing left out, unfinished or changed."""
        return (self.left_out is None and not self.unfinished and not self.skipped
                and not self.changed)


@dataclass(frozen=True)
class ImportOutcome:
    """What ``import_runs`` did: each run folder found, and the folders not searched."""

    runs: list[RunImport]
    not_searched: list[Problem]

    @property
    def complete(self) -> bool:
        """Every folder searched, every run imported whole (the CLI's exit code 0)."""
        return not self.not_searched and all(r.complete for r in self.runs)


def import_runs(folders: Iterable[Path], *, ledger: Path | str, tz: tzinfo | None = None,
                dry_run: bool = False, max_file_bytes: int = MAX_FILE_BYTES,
                callbacks: Callbacks | None = None) -> ImportOutcome:
    """Import the old harness's run folders under ``folders`` as runs.

    Every folder holding a run.json is a run (nested ones too); importing again adds
    nothing. Folders that cannot be listed are said (``callbacks.notice``) and each run
    folder's result is told (``callbacks.run_imported``) as it is done.

    Args:
        ledger: the ledger file; on a dry run it is only read (and need not exist).
        tz: the zone of the old files' times, which have no offset (default: this
            machine's).
        dry_run: say what would be imported; append nothing.
        max_file_bytes: a run.json or task.json larger than this is not read.

    Raises:
        NothingToImport: no run.json under ``folders``.
    """
    callbacks = callbacks or Callbacks()
    folders = list(folders)
    not_searched: list[Problem] = []
    runs = find_run_folders(folders, not_searched)
    for problem in not_searched:
        callbacks.notice(f"{shown(problem.path)}: not searched: {shown(problem.reason)}")
    if not runs:
        raise NothingToImport(f"no run.json under {', '.join(shown(str(f)) for f in folders)}"
                              ": nothing to import")

    def each(into: Ledger | None) -> list[RunImport]:
        done = []
        for folder in runs:
            done.append(result := _import_one(into, folder, tz, max_file_bytes,
                                              dry_run=dry_run))
            callbacks.run_imported(result)
        return done

    if dry_run and not Path(ledger).exists():
        return ImportOutcome(each(None), not_searched)
    with open_ledger(ledger, read_only=dry_run) as into:
        return ImportOutcome(each(into), not_searched)


def _import_one(ledger: Ledger | None, folder: Path, tz: tzinfo | None, max_file_bytes: int,
                *, dry_run: bool) -> RunImport:
    """Import one run folder (on a dry run, read it)."""
    try:
        found = load_run(folder, max_file_bytes=max_file_bytes)
        known: dict[str, str] = {}
        if ledger is not None:
            source, known = import_sources(ledger, found.run_id)
            if source is not None and source != str(folder.resolve()):
                held = f"imported from {shown(source)}" if source else "(not imported)"
                return RunImport(folder, found.run_id, held=True, dry_run=dry_run,
                                 left_out=f"the ledger holds a run of that id {held}")
        run = read_run(found, tz=tz, known=known, max_file_bytes=max_file_bytes)
    except NotImportable as e:
        return RunImport(folder, left_out=str(e), dry_run=dry_run)
    added = 0
    if ledger is not None and not dry_run:
        before = ledger.last_seq()
        ledger.append(run.events)
        added = ledger.last_seq() - before
        if added:
            write_snapshot(ledger, run.run_id)
    return RunImport(
        folder, run.run_id, dry_run=dry_run, attempts=run.attempts, added=added,
        unchanged=run.unchanged, unfinished=run.unfinished, skipped=run.skipped,
        changed=run.changed,
        differences=differences(old_totals(found.summary),
                                _summary(ledger, run, dry_run=dry_run)),
    )


def _summary(ledger: Ledger | None, run: LegacyRun, *, dry_run: bool) -> RunSummary:
    """The run as the ledger counts it once imported: rebuilt from the ledger, or on a
    dry run, its events there (a file imported before) with those just read."""
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
