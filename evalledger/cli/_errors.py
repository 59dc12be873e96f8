"""Errors the CLI shows a user: one line on stderr, a meaningful exit code (docs/cli.md)."""

from __future__ import annotations

import click

EXIT_OK = 0
EXIT_TASKS_FAILED = 1
EXIT_USAGE = 2
EXIT_INFRA_STOPPED = 3
EXIT_INTERRUPTED = 130


class UserError(click.ClickException):
    """Usage, configuration or ledger problem the user can fix: exit 2."""

    exit_code = EXIT_USAGE
