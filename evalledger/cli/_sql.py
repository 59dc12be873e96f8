"""``evalledger sql``: read-only SQL over the ledger, streamed."""

from __future__ import annotations

import csv
import inspect
import json
import re
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import click

from evalledger.ledger import SCHEMA_VERSION, LedgerIOError, LedgerReadOnly, QueryInterrupted

from ._errors import EXIT_INTERRUPTED, UserError
from ._main import Settings, pass_settings
from ._tables import rich_table, tsv


def _unique(columns: list[str]) -> list[str]:
    """Column names as JSON keys: a repeated name (``SELECT 1 a, 2 a``) gets ``:2``,
    ``:3``..., rather than one value silently replacing the other."""
    seen: dict[str, int] = {}
    names = []
    for column in columns:
        seen[column] = seen.get(column, 0) + 1
        names.append(column if seen[column] == 1 else f"{column}:{seen[column]}")
    return names


def _blob(value: object) -> str:
    """BLOBs in JSON output: hex text (JSON has no bytes)."""
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_VIEWS_MARK = "(the views)"
# An option never has whitespace right after its dashes; SQL that starts with a
# comment (`-- cost per model...`, as the README's audits do) does.
_SQL_COMMENT = re.compile(r"--\s")


def _views_help() -> str:
    """The views and the table, one ``name(columns)`` block each, wrapped for a terminal."""
    from evalledger.app import schema_columns

    blocks = []
    for name, (about, columns) in schema_columns().items():
        about = f"{name}: {about}" if about else name
        lines = textwrap.wrap(", ".join(columns), width=74, initial_indent="  ",
                              subsequent_indent="  ", break_on_hyphens=False)
        blocks.append("\b\n" + "\n".join([about, *lines]))
    return "\n\n".join(blocks)


class _SqlCommand(click.Command):
    """``sql``'s parsing and help: SQL that starts with a comment is the query, not an
    option; the help lists the views as this version makes them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Arguments after `--` are arguments, whatever they start with.
        cut = args.index("--") if "--" in args else len(args)
        head, tail = args[:cut], args[cut + 1:]
        queries = [a for a in head if _SQL_COMMENT.match(a)]
        if queries:
            args = [*(a for a in head if not _SQL_COMMENT.match(a)), "--", *queries, *tail]
        return super().parse_args(ctx, args)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        written = self.help
        self.help = inspect.cleandoc(written or "").replace(_VIEWS_MARK, _views_help())
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = written


def _params(ctx: click.Context, param: click.Parameter,
            values: tuple[str, ...]) -> dict[str, str]:
    named: dict[str, str] = {}
    for value in values:
        name, equals, text = value.partition("=")
        name = name.lstrip(":@$")  # `--param :run=R` names the same parameter
        if not equals or not name.isidentifier():
            raise click.BadParameter(f"{value!r} is not NAME=VALUE (e.g. run=20261201-1234)")
        named[name] = text
    return named


@click.command(cls=_SqlCommand)
@click.argument("query")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", callback=_params,
              help="A value for :NAME in the query, as text. Repeatable.")
@click.option("--format", "format_", type=click.Choice(["table", "json", "csv"]),
              default="table", show_default=True)
@pass_settings
def sql(settings: Settings, query: str, params: dict[str, str], format_: str) -> None:
    """Run a read-only SQL query against the ledger.

    The ledger is opened read-only: a write is refused. The query may start with a
    `-- comment` line and name parameters (`:run`), given with --param. The views
    for auditing (docs/ledger.md says what each column means):

    (the views)

    A snapshot's value of 4 KiB or more is stored packed (`"zstd:..."`): the SQL
    function `evalledger_unpack(value)` reads any as JSON (docs/ledger.md).

    Example:

    \b
        evalledger sql --param run=20261201-123456-3f9a \\
          "SELECT task_key, final_status FROM task_results WHERE run_id = :run"
    """
    if not query.strip():
        raise UserError("the query is empty")
    stop = threading.Event()
    # Ctrl-C while SQLite works: the progress handler sees the flag and interrupts the
    # query (a Python signal handler alone would wait until the query ended).
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        with settings.open_ledger(read_only=True) as ledger:
            try:
                columns, rows = ledger.stream(query, params, stop=stop.is_set)
                _write_rows(format_, columns, rows)
            except LedgerReadOnly as e:
                raise UserError("sql opens the ledger read-only: writes are refused") from e
            except LedgerIOError as e:
                if "no such" in str(e) and ledger.schema_version < SCHEMA_VERSION:
                    raise UserError(
                        f"{e} (this ledger has schema version {ledger.schema_version}; the "
                        f"views of version {SCHEMA_VERSION} come with the next `evalledger "
                        "run` or `resume` on it)") from e
                if (unbound := _unbound(e)) is not None:
                    raise unbound from e
                raise
            except QueryInterrupted:
                click.echo("interrupted", err=True)
                sys.exit(EXIT_INTERRUPTED)
            except MemoryError:
                raise UserError("out of memory: the query needs more than this machine has "
                                "(add a LIMIT, or aggregate in SQL)") from None
    finally:
        signal.signal(signal.SIGINT, previous)


def _unbound(error: LedgerIOError) -> UserError | None:
    """A parameter the query names and --param does not give, said as what to type."""
    if missing := re.search(r"binding parameter :(\w+)", str(error)):
        name = missing[1]
        return UserError(f"the query names :{name}: give its value with --param {name}=VALUE")
    if "has no name" in str(error):
        return UserError("the query has a ? placeholder: name it (:run) and give its value "
                         "with --param run=VALUE")
    return None


def _write_rows(format_: str, columns: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
    """Rows a page at a time, as SQLite produces them: memory stays flat in the result's
    size, and the first rows show before the query has finished."""
    out = sys.stdout
    if format_ == "json":
        names = _unique(columns)
        for page in _pages(rows, 1000):
            out.write("".join(json.dumps(dict(zip(names, row, strict=True)), default=_blob)
                              + "\n" for row in page))
            out.flush()
    elif format_ == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        for page in _pages(rows, 1000):
            writer.writerows([v.hex() if isinstance(v, bytes) else v for v in row]
                             for row in page)
            out.flush()
    elif not out.isatty():
        out.write(tsv(columns))
        for page in _pages(rows, 1000):
            out.write("".join(map(tsv, page)))
            out.flush()
    else:  # a terminal: a table per page of rows, as they come
        from rich.console import Console

        console = Console(soft_wrap=True)
        for page in _pages(rows, 500):
            console.print(rich_table(columns, page))


def _pages(rows: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    page: list[tuple[Any, ...]] = []
    for row in rows:
        page.append(row)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page
