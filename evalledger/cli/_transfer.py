"""``evalledger export``, ``import-events`` and ``merge``: runs carried between ledgers
(``evalledger.app.export``, ``import_events``, ``merge``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalledger.app import Callbacks
from evalledger.ledger import MAX_LINE_BYTES

from ._main import Settings, pass_settings

if TYPE_CHECKING:
    from evalledger.app import TransferOutcome


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
    from evalledger.app import export as write_export

    if output is not None:
        write_export(runs, output, ledger=settings.ledger_path)
        click.echo(str(output), err=True)
        return
    write_export(runs, sys.stdout.buffer, ledger=settings.ledger_path)


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
    from evalledger.app import import_events as append_export

    append_export(file, ledger=settings.ledger_path, max_line_bytes=max_line_bytes,
                  callbacks=_Said())


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
    from evalledger.app import merge as merge_ledgers

    merge_ledgers(others, ledger=settings.ledger_path, callbacks=_Said())


class _Said(Callbacks):
    """Each file's or ledger's events, said once they are in."""

    def transferred(self, result: TransferOutcome) -> None:
        click.echo(f"{result.source}: {result.added} of {result.read} events added, "
                   f"{len(result.runs)} run(s)")
