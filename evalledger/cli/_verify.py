"""``evalledger verify``: recompute the hash chain, check the schema, the snapshots and
any anchors; ``evalledger checkpoint``: write an anchor to keep outside the ledger."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalledger.ledger import Anchor

from ._errors import EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings


@click.command()
@click.option("--anchor", "anchors", multiple=True, type=click.Path(dir_okay=False),
              help="A checkpoint file or a run.json: fail unless the ledger still holds that "
                   "exact history up to its seq. Repeatable.")
@click.option("--since", metavar="FILE|last",
              help="Check only what came after an anchor: a checkpoint file, a run.json, or "
                   "`last` (where the last check that found this ledger intact got to). The "
                   "ledger must still hold it; the rows after it are read, not the rest.")
@click.option("--deep", is_flag=True,
              help="Replay runs through the full event models (every field validated) to "
                   "check the snapshots, instead of the partial decoding rebuilds use.")
@pass_settings
def verify(settings: Settings, anchors: tuple[str, ...], since: str | None, deep: bool) -> None:
    """Check that the ledger is intact: storage, hash chain, seq gaps, payloads, schema,
    snapshots.

    The schema is compared, as full SQL text, with what this evalledger creates:
    tables, indexes, triggers, views and meta. Every payload must validate and be
    canonical JSON. Every snapshot is compared with a replay of its run up to its
    seq. A chain cut short or rewritten from some row on is a valid chain on its
    own: only an anchor kept elsewhere (see `evalledger checkpoint`, or any
    run.json) shows it. Everything is read in one read transaction: runs and merges
    writing meanwhile are not seen half-way. Prints one verdict line, then one line
    per problem. Exits 0 when intact, 1 when something was found, 2 when the ledger
    cannot be read at all.

    An intact ledger's last row is recorded as verified through (in
    ~/.local/state/evalledger); `--since last` then reads only what came after it,
    as each run's closing check does.

    Example:

        evalledger verify --anchor checkpoints/2026-11-30.json --anchor runs/R/run.json
        evalledger verify --since last
    """
    from evalledger.app import check_ledger

    pinned = [Anchor.load(path) for path in anchors]
    with settings.open_ledger(read_only=True) as ledger:
        report, snapshots = check_ledger(ledger, since=since, anchors=pinned, deep=deep)
    lines = report.lines()
    if deep:
        ignored = (f", {snapshots.ignored} of another fold version ignored"
                   if snapshots.ignored else "")
        lines.append(f"deep: {snapshots.checked} snapshot(s) of {snapshots.runs} run(s) "
                     f"checked against a full replay{ignored}")
    for line in lines:
        click.echo(line)
    sys.exit(EXIT_OK if report.ok else EXIT_TASKS_FAILED)


@click.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the checkpoint to this file instead of stdout.")
@pass_settings
def checkpoint(settings: Settings, output: Path | None) -> None:
    """Print an anchor of the ledger as it is now: its id, last seq and hash, the time.

    Keep it where whoever can write the ledger cannot (a git commit, a CI artifact):
    `evalledger verify --anchor FILE` later fails if the ledger no longer holds
    that exact history (a cut tail, a rewritten chain).

    Example:

        evalledger checkpoint -o checkpoints/$(date +%F).json
    """
    from evalledger._files import same_file
    from evalledger.app import checkpoint as checkpoint_of
    from evalledger.app import write_text  # the reports' writer: whole or not at all

    if output is not None and same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        text = checkpoint_of(ledger).model_dump_json(indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        # Whole or not at all: a full disk leaves the previous checkpoint, never an empty one.
        write_text(output, text)
        click.echo(str(output), err=True)
