"""``evalledger verify``: recompute the hash chain, check the schema and any anchors;
``evalledger checkpoint``: write an anchor to keep outside the ledger."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalledger.ledger import Anchor, utc_now
from evalledger.ledger import verify as verify_ledger

from ._errors import EXIT_OK, EXIT_TASKS_FAILED, UserError
from ._main import Settings, pass_settings


@click.command()
@click.option("--anchor", "anchors", multiple=True, type=click.Path(dir_okay=False),
              help="A checkpoint file or a run.json: fail unless the ledger still holds that "
                   "exact history up to its seq. Repeatable.")
@click.option("--deep", is_flag=True,
              help="Also replay every run in full and check each snapshot against it.")
@pass_settings
def verify(settings: Settings, anchors: tuple[str, ...], deep: bool) -> None:
    """Check that the ledger is intact: storage, hash chain, seq gaps, payloads, schema.

    The schema is compared, as full SQL text, with what this evalledger creates:
    tables, indexes, triggers, views and meta. A chain cut short or rewritten from
    some row on is a valid chain on its own: only an anchor kept elsewhere (see
    `evalledger checkpoint`, or any run.json) shows it. With --deep, every run that
    has snapshots is replayed in full, every event validated, and each snapshot
    compared with the replay at its seq. Prints one verdict line, then one line per
    problem. Exits 0 when intact, 1 when something was found, 2 when the ledger
    cannot be read at all.

    Example:

        evalledger verify --anchor checkpoints/2026-11-30.json --anchor runs/R/run.json
    """
    try:
        pinned = [Anchor.load(path) for path in anchors]
    except ValueError as e:
        raise UserError(str(e)) from e
    with settings.open_ledger(read_only=True) as ledger:
        report = verify_ledger(ledger, pinned)
        lines = report.lines()
        ok = report.ok
        if deep:
            from evalledger.projections import check_snapshots

            checked = check_snapshots(ledger)
            ok = ok and not checked.problems
            lines[0] = lines[0].replace("OK: ", "FAILED: ", 1) if not ok else lines[0]
            ignored = (f", {checked.ignored} of another fold version ignored"
                       if checked.ignored else "")
            lines.append(f"deep: {checked.checked} snapshot(s) of {checked.runs} run(s) "
                         f"checked against a full replay{ignored}")
            lines += [f"snapshot: {p}" for p in checked.problems]
    for line in lines:
        click.echo(line)
    sys.exit(EXIT_OK if ok else EXIT_TASKS_FAILED)


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

    if output is not None and same_file(output, settings.ledger_path):
        raise UserError(f"-o {output} is the ledger itself; choose another file")
    with settings.open_ledger(read_only=True) as ledger:
        anchor = ledger.anchor()
        if anchor is None:
            raise UserError(f"{ledger.path} holds no events yet: nothing to anchor")
    text = anchor.model_copy(update={"ts": utc_now()}).model_dump_json(indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(str(output), err=True)
