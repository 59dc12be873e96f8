"""``evalledger verify``: recompute the hash chain and check the schema."""

from __future__ import annotations

import sys

import click

from evalledger.ledger import verify as verify_ledger

from ._errors import EXIT_OK, EXIT_TASKS_FAILED
from ._main import Settings, cli, pass_settings


@cli.command()
@pass_settings
def verify(settings: Settings) -> None:
    """Check that the ledger is intact: hash chain, seq gaps, payloads, triggers.

    Prints one verdict line, then one line per problem. Exits 0 when the ledger
    is intact, 1 when something was found, 2 when it cannot be read at all.

    Example:

        evalledger --ledger evalledger.db verify
    """
    with settings.open_ledger(read_only=True) as ledger:
        report = verify_ledger(ledger)
    lines = report.lines()
    click.echo(lines[0])
    for line in lines[1:]:
        click.echo(line)
    sys.exit(EXIT_OK if report.ok else EXIT_TASKS_FAILED)
