"""``evalledger export``, ``import-events`` and ``merge``: runs carried between ledgers."""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from evalledger.ledger._transfer import MAX_LINE_BYTES

from ._common import resolve_run
from ._errors import UserError
from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.ledger import Ledger
    from evalledger.ledger._transfer import Readable, Transfer


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (gzip when it ends in .gz) instead of stdout.")
@pass_settings
def export(settings: Settings, runs: tuple[str, ...], output: Path | None) -> None:
    """Write runs' events as NDJSON, one event a line, to carry them to another ledger.

    Each line holds the event's id, envelope, payload and the seq it has here. Snapshots
    are left out (they count this ledger's rows). The last line is a trailer (how many
    events, their SHA-256): `import-events` takes a file only whole. With -o the file
    appears whole or not at all.

    Example:

        evalledger export latest -o run.ndjson.gz
    """
    from evalledger._files import same_file
    from evalledger.ledger._transfer import export_lines

    if output is not None and same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        run_ids = list(dict.fromkeys(resolve_run(ledger, spec) for spec in runs))
        # Closed before the ledger: a reader left open would try to close its cursor on
        # a closed database when collected, after the error was shown.
        with closing(export_lines(ledger, run_ids)) as lines:
            if output is not None:
                _write_whole(output, lines)
                click.echo(str(output), err=True)
                return
            try:
                for line in lines:
                    sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                raise
            except OSError as e:  # a full disk under `> file`
                raise UserError(f"cannot write the export to stdout: {e.strerror or e}") from e


def _write_whole(path: Path, lines: Iterable[bytes]) -> None:
    """Write ``lines`` to ``path`` (gzip when it ends in .gz) whole or not at all
    (``atomic_file``): on any error ``path`` is left as it was."""
    from evalledger._files import atomic_file

    try:
        with atomic_file(path) as raw:
            _write(raw, lines, gz=path.suffix == ".gz", name=path.name)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}; nothing was written") from e


def _write(raw: BinaryIO, lines: Iterable[bytes], *, gz: bool, name: str) -> None:
    if gz:
        with gzip.GzipFile(filename=name, mode="wb", fileobj=raw) as packed:
            packed.writelines(lines)
    else:
        raw.writelines(lines)
    raw.flush()


def _open_binary(path: Path) -> Readable:
    """The file's bytes, decompressed when its name ends in ``.gz``."""
    if path.suffix == ".gz":
        return gzip.GzipFile(path, "rb")
    return path.open("rb")


@click.command(name="import-events")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--max-line-bytes", type=click.IntRange(min=1024), default=MAX_LINE_BYTES,
              show_default=True, metavar="N",
              help="Refuse a file with a line longer than this many bytes.")
@pass_settings
def import_events(settings: Settings, file: Path, max_line_bytes: int) -> None:
    """Append the events of an export (from `export`) that the ledger lacks.

    Events keep their ids: importing a file twice adds nothing. A file is taken only
    whole: one with a line that is not an event, an event id this ledger holds with
    other content, events for a run this ledger recorded itself, or no trailer (cut
    short) is refused, naming the line, before anything is appended. Each batch
    appended records where its events came from (run.merged).

    Example:

        evalledger --ledger all.db import-events run.ndjson.gz
    """
    from evalledger.ledger import Ledger, LedgerNotFound, NotALedger
    from evalledger.ledger._transfer import BadLine, Conflict, ExportFile, append_all

    if not file.is_file():
        raise UserError(f"{file} is not a regular file: an export is read twice")
    export = ExportFile(lambda: _open_binary(file), max_line_bytes=max_line_bytes)
    try:
        # Checked against the ledger as it is, read-only: a ledger is made only for a
        # file that is imported.
        reference: Ledger | None = Ledger(settings.ledger_path, read_only=True)
    except (LedgerNotFound, NotALedger):
        reference = None  # nothing there to compare with (the import's own open says why)
    try:
        try:
            trailer = export.check(reference)
        finally:
            if reference is not None:
                reference.close()
    except BadLine as e:
        raise UserError(f"{file}: {e}; nothing was imported") from e
    except (OSError, EOFError, zlib.error) as e:  # a truncated or damaged .gz
        raise UserError(f"{file}: cannot be read: {e}; nothing was imported") from e
    with settings.open_ledger() as ledger:
        try:
            done = append_all(ledger, export.rows(), source=str(file.resolve()),
                              source_ledger=trailer.ledger_id, refuse_local=True)
        except (BadLine, Conflict) as e:
            # Only a race (the file or the ledger changed since the check) gets here.
            raise UserError(f"{file}: {e}; the events before it were imported, each "
                            "batch with its run.merged") from e
        except (OSError, EOFError, zlib.error) as e:
            raise UserError(f"{file}: cannot be read: {e}") from e
        _finish(ledger, done, str(file))


@click.command()
@click.argument("others", nargs=-1, required=True, metavar="OTHER...",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_settings
def merge(settings: Settings, others: tuple[Path, ...]) -> None:
    """Append every event of other ledgers that this one lacks, in their order.

    Events keep their ids (merging twice adds nothing) and are chained anew here;
    each batch appended records, per run that gained events, the other ledger's id and
    the seqs they had there (run.merged). Interrupted, it leaves whole batches: run it
    again to add the rest. Shards of one run (`run --shard K/N --run-id ID` on several
    machines) merge into that one run. A ledger written by a newer evalledger is
    refused, and so is an event whose id this ledger holds with other content.

    Example:

        evalledger --ledger all.db merge machine-a.db machine-b.db
    """
    from evalledger.ledger import Ledger
    from evalledger.ledger._transfer import Conflict, append_all, rows_of

    with settings.open_ledger() as ledger:
        for other in others:
            if other.resolve() == ledger.path.resolve():
                raise UserError(f"{other} is the ledger itself: nothing to merge")
            # The rows are closed before the source: a reader left open would try to
            # close its cursor on a closed database when collected, after the error.
            with Ledger(other, read_only=True) as source, closing(rows_of(source)) as rows:
                try:
                    done = append_all(ledger, rows, source=str(other.resolve()),
                                      source_ledger=source.ledger_id)
                except Conflict as e:
                    raise UserError(f"{other}: {e}; the events before it were merged, each "
                                    "batch with its run.merged") from e
            _finish(ledger, done, str(other))


def _finish(ledger: Ledger, done: Transfer, name: str) -> None:
    """Snapshot the runs that gained events (the finished ones) and say what happened."""
    from evalledger.projections import write_snapshot

    for run_id in done.runs:
        write_snapshot(ledger, run_id)
    click.echo(f"{name}: {done.added} of {done.read} events added, {len(done.runs)} run(s)")
