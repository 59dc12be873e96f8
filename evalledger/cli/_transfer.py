"""``evalledger export``, ``import-events`` and ``merge``: runs carried between ledgers."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

import click

from ._common import resolve_run
from ._errors import UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.ledger import Ledger
    from evalledger.ledger._transfer import Transfer


def _open(path: Path, *, write: bool = False) -> IO[str]:
    """A text file, gzip-compressed when its name ends in ``.gz``."""
    if path.suffix == ".gz":
        if write:
            return gzip.open(path, "wt", encoding="utf-8")
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("w" if write else "r", encoding="utf-8")


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (gzip when it ends in .gz) instead of stdout.")
@pass_settings
def export(settings: Settings, runs: tuple[str, ...], output: Path | None) -> None:
    """Write runs' events as NDJSON, one event a line, to carry them to another ledger.

    Each line holds the event's id, envelope, payload and the seq it has here. Snapshots
    are left out (they count this ledger's rows); `import-events` reads the file back.

    Example:

        evalledger export latest -o run.ndjson.gz
    """
    from evalledger._files import same_file
    from evalledger.ledger._transfer import ndjson

    if output is not None and same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        run_ids = list(dict.fromkeys(resolve_run(ledger, spec) for spec in runs))
        out = _open(output, write=True) if output is not None else sys.stdout
        try:
            for run_id in run_ids:
                for row in ledger.rows(run_id):
                    if row.type != "run.snapshot":
                        out.write(ndjson(row) + "\n")
        finally:
            if output is not None:
                out.close()
    if output is not None:
        click.echo(str(output), err=True)


@click.command(name="import-events")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_settings
def import_events(settings: Settings, file: Path) -> None:
    """Append the events of an NDJSON file (from `export`) that the ledger lacks.

    Events keep their ids: importing a file twice adds nothing. Each run that gained
    events records where they came from (a run.merged event). A line that is not an
    event stops the import before anything is appended, naming the line.

    Example:

        evalledger --ledger all.db import-events run.ndjson.gz
    """
    from evalledger.ledger._transfer import BadLine, append_all, parse_line

    try:
        with _open(file) as lines:
            rows = [parse_line(line, n) for n, line in enumerate(lines, 1) if line.strip()]
    except BadLine as e:
        raise UserError(f"{file}: {e}; nothing was imported") from e
    except (OSError, EOFError, UnicodeDecodeError) as e:  # a truncated .gz, not UTF-8
        raise UserError(f"{file}: cannot be read: {e}; nothing was imported") from e
    with settings.open_ledger() as ledger:
        done = append_all(ledger, rows, source=str(file.resolve()), source_ledger=None)
        _finish(ledger, done, str(file))


@click.command()
@click.argument("others", nargs=-1, required=True, metavar="OTHER...",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_settings
def merge(settings: Settings, others: tuple[Path, ...]) -> None:
    """Append every event of other ledgers that this one lacks, in their order.

    Events keep their ids (merging twice adds nothing) and are chained anew here;
    each run that gained events records the other ledger's id and the seqs they had
    there (a run.merged event). Shards of one run (`run --shard K/N --run-id ID` on
    several machines) merge into that one run. A ledger written by a newer evalledger
    is refused.

    Example:

        evalledger --ledger all.db merge machine-a.db machine-b.db
    """
    from evalledger.ledger import Ledger
    from evalledger.ledger._transfer import append_all, rows_of

    with settings.open_ledger() as ledger:
        for other in others:
            if other.resolve() == ledger.path.resolve():
                raise UserError(f"{other} is the ledger itself: nothing to merge")
            with Ledger(other, read_only=True) as source:
                done = append_all(ledger, rows_of(source), source=str(other.resolve()),
                                  source_ledger=source.ledger_id)
            _finish(ledger, done, str(other))


def _finish(ledger: Ledger, done: Transfer, name: str) -> None:
    """Snapshot the runs that gained events (the finished ones) and say what happened."""
    from evalledger.projections import write_snapshot

    for run_id in done.runs:
        write_snapshot(ledger, run_id)
    click.echo(f"{name}: {done.added} of {done.read} events added, {len(done.runs)} run(s)")
