"""The ``evalledger`` command group: global options and the error boundary.

Commands are thin: parse, call the app, print. Every error a user can act on is an
``EvalledgerError`` (or an ``OSError`` naming its file); each becomes one line on
stderr and exit code 2 here, in one place, so no traceback reaches a user and no
command converts one error into another. ``UserError`` is for what only a command
line can get wrong: an option's form, options that do not go together.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalledger._version import __version__
from evalledger.app import DEFAULT_LEDGER

from ._errors import UserError

if TYPE_CHECKING:
    from evalledger.ledger import Ledger

# Command -> the module that defines it (a function of the same name, or the one after
# a colon: `import` is a keyword). A command's
# module is imported when that command runs, not before: `runs` never imports trio
# or the executor, and `--version` imports none of them.
COMMANDS = {
    "checkpoint": "_verify",
    "compare": "_compare",
    "diff": "_diff",
    "events": "_events",
    "flaky": "_flaky",
    "export": "_transfer",
    "import": "_import:import_runs",
    "import-events": "_transfer:import_events",
    "merge": "_transfer",
    "regrade": "_regrade",
    "report": "_report",
    "resume": "_resume",
    "run": "_run",
    "runs": "_runs",
    "scan": "_scan",
    "schema": "_schema",
    "search": "_search",
    "show": "_show",
    "sql": "_sql",
    "verify": "_verify",
    "view": "_view",
}


def _user_error(error: BaseException) -> UserError | None:
    """The one-line error for a failure a user can act on, or None for a real bug.

    Trio nurseries deliver failures wrapped in exception groups: a full disk under
    a running batch arrives as ExceptionGroup[LedgerIOError], not bare.
    """
    from evalledger.errors import EvalledgerError
    from evalledger.ledger import LedgerNotFound

    if isinstance(error, BaseExceptionGroup):
        leaves = [_user_error(e) for e in error.exceptions]
        return leaves[0] if leaves and all(leaves) else None
    if isinstance(error, LedgerNotFound) and "it holds no table yet" not in str(error):
        return UserError(f"{error}: give --ledger PATH, or set EVALLEDGER_LEDGER")
    if isinstance(error, EvalledgerError):
        return UserError(str(error))
    if isinstance(error, BrokenPipeError):
        return None  # `evalledger events | head`: the reader left; main() exits quietly
    if isinstance(error, OSError):  # a read-only folder, a full disk: name the file
        where = f"{error.filename}: " if error.filename else ""
        return UserError(f"{where}{error.strerror or error}")
    return None


# Commands that never open a ledger: no --ledger after them.
NO_LEDGER = frozenset({"schema"})


def _ledger_after(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    settings = ctx.find_object(Settings)
    if value is not None and settings is not None:
        settings.ledger_path = value


def _with_ledger_option(command: click.Command) -> click.Command:
    """``command`` taking ``--ledger`` after its name too (``evalledger show --ledger x.db
    latest``), as it is taken before: one convention for every command. Given in both
    places, the one after the command wins. A command with a --ledger of its own
    (``view``) keeps it."""
    if not any(isinstance(p, click.Option) and "--ledger" in p.opts for p in command.params):
        command.params.append(click.Option(
            ["--ledger"], type=click.Path(path_type=Path), expose_value=False,
            callback=_ledger_after, metavar="PATH",
            help="The ledger file, as `evalledger --ledger PATH` takes it."))
    return command


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            import difflib

            close = difflib.get_close_matches(args[0], list(COMMANDS), n=1) if args else []
            if close and "No such command" in e.message:
                raise click.UsageError(f"{e.message} Did you mean `{close[0]}`?",
                                       e.ctx) from None
            raise

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, _, name = where.partition(":")  # the function's name, when not the command's
        command = getattr(importlib.import_module(f"{__package__}.{module}"), name or cmd_name)
        assert isinstance(command, click.Command)
        return command if cmd_name in NO_LEDGER else _with_ledger_option(command)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as e:  # ExceptionGroup (trio) included
            if (user_error := _user_error(e)) is None:
                raise
            raise user_error from e


class Settings:
    """What the group's options decided, handed to every command."""

    def __init__(self, ledger_path: Path) -> None:
        self.ledger_path = ledger_path

    def open_ledger(self, *, read_only: bool = False, durable: bool = False) -> Ledger:
        from evalledger.app import open_ledger

        return open_ledger(self.ledger_path, read_only=read_only, durable=durable)


pass_settings = click.make_pass_decorator(Settings)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalledger")
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(path_type=Path),
    default=lambda: os.environ.get("EVALLEDGER_LEDGER", DEFAULT_LEDGER),
    show_default=f"$EVALLEDGER_LEDGER or ./{DEFAULT_LEDGER}",
    help="The ledger file (SQLite).",
)
@click.pass_context
def cli(ctx: click.Context, ledger_path: Path) -> None:
    """Run batches of evaluation tasks and keep an append-only ledger of all of it.

    Example:

        evalledger --ledger runs.db verify
    """
    ctx.obj = Settings(ledger_path)
