"""``evalledger sql``: read-only SQL over the ledger, streamed."""

from __future__ import annotations

import csv
import json
import signal
import sys
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


@click.command()
@click.argument("query")
@click.option("--format", "format_", type=click.Choice(["table", "json", "csv"]),
              default="table", show_default=True)
@pass_settings
def sql(settings: Settings, query: str, format_: str) -> None:
    """Run a read-only SQL query against the ledger.

    The ledger is opened read-only: a write is refused. Views for auditing:

    \b
    runs(run_id, experiment_id, started_at, finished_at, status, tasks_planned,
         tasks_succeeded, tasks_failed, tasks_error, cost_usd)
    task_attempts(run_id, task_key, task_id, variant_id, replicate_index, attempt,
         started_at, completed_at, final_status, category, duration_seconds,
         input_tokens, output_tokens, cost_usd, error_message)
    task_results(same columns: per run and task key, the latest attempt that
         reached a final status)
    events(seq, event_id, run_id, task_key, type, ts, payload, hash)

    Example:

        evalledger sql "SELECT final_status, count(*) FROM task_results GROUP BY 1"
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
                columns, rows = ledger.stream(query, stop=stop.is_set)
                _write_rows(format_, columns, rows)
            except LedgerReadOnly as e:
                raise UserError("sql opens the ledger read-only: writes are refused") from e
            except LedgerIOError as e:
                if "no such" in str(e) and ledger.schema_version < SCHEMA_VERSION:
                    raise UserError(
                        f"{e} (this ledger has schema version {ledger.schema_version}; the "
                        f"views of version {SCHEMA_VERSION} come with the next `evalledger "
                        "run` or `resume` on it)") from e
                raise
            except QueryInterrupted:
                click.echo("interrupted", err=True)
                sys.exit(EXIT_INTERRUPTED)
            except MemoryError:
                raise UserError("out of memory: the query needs more than this machine has "
                                "(add a LIMIT, or aggregate in SQL)") from None
    finally:
        signal.signal(signal.SIGINT, previous)


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
