"""The command line: click commands over the ledger, executor and projections."""

import os
import sys

import click

import evalledger._logs as _logs

from ._errors import EXIT_INTERRUPTED, EXIT_USAGE
from ._main import cli as cli


def main() -> None:
    # The library logs and prints nothing; a command shows its warnings on stderr, as
    # they are (``could not keep the sandbox of ...``): evalledger._logs.
    _logs.shown = True
    try:
        cli.main(prog_name="evalledger", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # bare `evalledger`: the help
        click.echo(e.format_message())
        sys.exit(0)
    except click.UsageError as e:
        # One line, like every other error: what is wrong, and where help is.
        command = e.ctx.command_path if e.ctx is not None else "evalledger"
        click.echo(f"Error: {e.format_message()} (see `{command} --help`)", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, click.Abort):  # outside a batch (a batch handles Ctrl-C)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:  # `evalledger events ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


__all__ = ["cli", "main"]
