"""Reading commands: ``runs``, ``show``, ``events``, ``sql``, ``diff``.

All open the ledger read-only. Tables for people (rich), ``--json`` / NDJSON for
programs, data on stdout.
"""

from __future__ import annotations

import csv
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, get_args

import click
from rich.console import Console
from rich.table import Table

from evalledger._text import money, visible
from evalledger.hosts import run_ended
from evalledger.ledger import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    EventRow,
    EventType,
    Ledger,
    LedgerIOError,
    LedgerReadOnly,
    QueryInterrupted,
)
from evalledger.projections import (
    Change,
    FailOn,
    ResumeFold,
    diff_runs,
    fold,
    unpriced_line,
    variant_table,
)

from ._common import rebuild_summary, resolve_run
from ._errors import EXIT_INTERRUPTED, EXIT_TASKS_FAILED, UserError
from ._main import Settings, cli, pass_settings

_str = json.JSONEncoder(ensure_ascii=False).encode


def _cell(value: object) -> str:
    """A value as one line of text a terminal cannot act on: control characters, tabs
    and line breaks spelled out (``\\x1b``, ``\\t``, ``\\n``)."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.hex()
    return visible(str(value), tabs=False)


def _tsv(row: Sequence[object]) -> str:
    return "\t".join(_cell(v) for v in row) + "\n"


def _rich_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    table = Table(*map(_cell, columns), show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*map(_cell, row))
    return table


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A rich table in a terminal; tab-separated lines in a pipe (nothing cut)."""
    if not sys.stdout.isatty():
        sys.stdout.write(_tsv(columns) + "".join(map(_tsv, rows)))
        return
    Console(soft_wrap=True).print(_rich_table(columns, rows))


@cli.command()
@click.option("--limit", type=click.IntRange(min=1, max=2**63 - 1), default=20,
              show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, newest first.")
@pass_settings
def runs(settings: Settings, limit: int, as_json: bool) -> None:
    """List runs, newest first, from the `runs` SQL view.

    Example:

        evalledger runs --limit 5
    """
    with settings.open_ledger(read_only=True) as ledger:
        columns, rows = ledger.query(
            "SELECT * FROM runs ORDER BY started_at DESC LIMIT ?", [limit]
        )
        listed = [dict(zip(columns, row, strict=True)) for row in rows]
        if "cost_complete" not in columns:  # a ledger from before the view said so
            floors = _cost_floors(ledger, [r["run_id"] for r in listed])
            for run in listed:
                run["cost_complete"] = run["run_id"] not in floors
        for run in listed:
            run["cost_complete"] = bool(run["cost_complete"])
            # The view says what the ledger holds; a run whose process is gone without
            # recording run.finished was cut off (resume finishes it).
            run["cut_off"] = run["status"] == "running" and _finished(ledger, run["run_id"])
    if as_json:  # exact numbers, for programs
        for run in listed:
            click.echo(json.dumps(run))
        return
    shown = [c for c in columns if c != "cost_complete"]
    for run in listed:
        run["status"] = "cut off" if run["cut_off"] else run["status"]
        run["cost_usd"] = money(run["cost_usd"], run["cost_complete"])
    _table(shown, [tuple(run[c] for c in shown) for run in listed])


def _cost_floors(ledger: Ledger, run_ids: list[str]) -> set[str]:
    """The runs among ``run_ids`` some of whose usage had no price (their cost is a floor)."""
    if not run_ids:
        return set()
    marks = ",".join("?" * len(run_ids))
    _, rows = ledger.query(
        f"SELECT DISTINCT run_id FROM events WHERE run_id IN ({marks}) AND type = ? "
        "AND json_extract(payload, '$.cost_usd') IS NULL", [*run_ids, EventType.TASK_USAGE])
    return {r[0] for r in rows}


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="The run.json summary.")
@pass_settings
def show(settings: Settings, run: str, as_json: bool) -> None:
    """Show a run's summary, rebuilt from the ledger.

    RUN is a run id, a unique prefix of one, or `latest`.

    Example:

        evalledger show latest
    """
    with settings.open_ledger(read_only=True) as ledger:
        s = rebuild_summary(ledger, resolve_run(ledger, run))
        cut_off = s.status == "running" and _finished(ledger, s.run_id)
    if cut_off:  # "running" is what the ledger says; nobody is running it any more
        click.echo(f"warning: the process running {s.run_id} is gone (it crashed or was "
                   f"killed); finish it with `evalledger resume {s.run_id}`", err=True)
    if as_json:
        click.echo(s.model_dump_json(indent=2))
        return
    cost = money(s.total_cost_usd, s.cost_complete)
    ungraded = f"{s.tasks_ungraded} ungraded, " if s.tasks_ungraded else ""
    click.echo(
        f"run {s.run_id} {s.status}: {s.tasks_run}/{s.tasks_planned} run, "
        f"{s.tasks_succeeded} succeeded, {s.tasks_failed} failed, {s.tasks_error} error, "
        f"{ungraded}{s.tasks_unfinished} unfinished; pass rate {s.pass_rate:.1%}; cost {cost}"
    )
    if not s.cost_complete:
        click.echo(f"cost is a floor: {unpriced_line(s)} (see --pricing)")
    if len(s.variants) > 1 or any(len(v.pass_at_k) > 1 for v in s.variants):
        _table(*variant_table(s))
    _table(
        ["task", "status", "score", "duration", "tokens", "cost", "error"],
        [
            (r.task_key, r.final_status.value if r.final_status else "UNFINISHED",
             f"{r.weighted_score:.2f}" if r.weighted_score is not None else None,
             f"{r.duration_seconds:.1f}s" if r.duration_seconds is not None else None,
             r.tokens.total, money(r.cost_usd, r.cost_complete) if r.final_status else None,
             (r.error_message or "")[:80])
            for r in s.tasks
        ],
    )


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


def _ndjson(row: EventRow) -> str:
    # The stored payload is already JSON: splice it in rather than re-encode it.
    return (
        f'{{"seq":{row.seq},"event_id":{_str(row.event_id)},"run_id":{_str(row.run_id)},'
        f'"task_key":{_str(row.task_key)},"type":{_str(row.type)},"ts":{_str(row.ts)},'
        f'"payload":{row.payload}}}'
    )


@cli.command()
@click.argument("run")
@click.option("--task", "task_key", help="Only this task key's events.")
@click.option("--type", "types", multiple=True, help="Only events of these types.")
@click.option("--follow", is_flag=True,
              help="Keep printing new events until the run records run.finished.")
@click.option("--interval", type=click.FloatRange(min=0.01, max=60), default=0.2,
              show_default=True, hidden=True)
@pass_settings
def events(settings: Settings, run: str, task_key: str | None, types: tuple[str, ...],
           follow: bool, interval: float) -> None:
    """Print a run's events as NDJSON, in ledger order.

    Example:

        evalledger events latest --type task.completed
    """
    with settings.open_ledger(read_only=True) as ledger:
        run_id = resolve_run(ledger, run)
        if unknown := [t for t in types
                       if t not in EVENT_TYPES and not _stored(ledger, run_id, t)]:
            # Types a newer evalledger wrote are printed like any other; a typo is
            # not an empty answer.
            raise UserError(f"no events of type {', '.join(map(repr, unknown))} in run "
                            f"{run_id}; known types: {', '.join(sorted(EVENT_TYPES))}")
        if task_key is not None and not _has_task(ledger, run_id, task_key):
            raise UserError(f"run {run_id} has no task {task_key!r} (see `evalledger show "
                            f"{run_id}`)")
        after = 0
        while True:
            # Decided before reading: every event up to run.finished is then printed.
            done = not follow or _finished(ledger, run_id)
            for row in ledger.rows(run_id, task_key=task_key, types=types or None,
                                   after_seq=after):
                click.echo(_ndjson(row))
                after = row.seq or after
            if done:
                return
            time.sleep(interval)


def _has_task(ledger: Ledger, run_id: str, task_key: str) -> bool:
    """Whether the run recorded events of that key, or planned it (it may start later)."""
    return bool(ledger.query(
        "SELECT 1 FROM events WHERE run_id = ? AND task_key = ? LIMIT 1", [run_id, task_key]
    )[1]) or bool(ledger.query(
        "SELECT 1 FROM events e, json_each(e.payload, '$.planned') p WHERE e.run_id = ? "
        "AND e.task_key IS NULL AND e.type = 'run.started' AND p.value = ? LIMIT 1",
        [run_id, task_key])[1])


def _stored(ledger: Ledger, run_id: str, type_: str) -> bool:
    return bool(ledger.query(
        "SELECT 1 FROM events WHERE run_id = ? AND type = ? LIMIT 1", [run_id, type_]
    )[1])


_BOUNDARIES = (EventType.RUN_STARTED, EventType.RUN_RESUMED, EventType.RUN_FINISHED)


def _finished(ledger: Ledger, run_id: str) -> bool:
    """Whether the run is over: its latest boundary is a run.finished (a resume
    reopens it), or the process that was running it on this host is gone."""
    state = fold(ResumeFold(run_id), ledger.events(run_id, types=_BOUNDARIES))
    return run_ended(state.host, state.finished)


@cli.command()
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
        out.write(_tsv(columns))
        for page in _pages(rows, 1000):
            out.write("".join(map(_tsv, page)))
            out.flush()
    else:  # a terminal: a table per page of rows, as they come
        console = Console(soft_wrap=True)
        for page in _pages(rows, 500):
            console.print(_rich_table(columns, page))


def _pages(rows: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    page: list[tuple[Any, ...]] = []
    for row in rows:
        page.append(row)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True)
@click.option("--fail-on", type=click.Choice(get_args(FailOn)), default="regression",
              show_default=True,
              help="Exit 1 when the diff has a regression, any change at all, or never.")
@pass_settings
def diff(settings: Settings, run_a: str, run_b: str, as_json: bool, fail_on: FailOn) -> None:
    """Compare two runs task by task: regressions, fixes, score/duration/cost deltas.

    Regressions first, then fixes, changes, keys not run on one side (never started
    or interrupted: neither a fix nor a regression), added, removed, unchanged. Exits
    1 when there is a regression (see --fail-on), so it can gate CI.

    Example:

        evalledger diff 20261101-0930 latest --fail-on regression
    """
    with settings.open_ledger(read_only=True) as ledger:
        a = rebuild_summary(ledger, resolve_run(ledger, run_a))
        b = rebuild_summary(ledger, resolve_run(ledger, run_b))
    result = diff_runs(a, b)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        order = {change: i for i, change in enumerate(get_args(Change))}
        tasks = sorted(result.tasks, key=lambda t: (order[t.change], t.task_key))

        def fmt(value: float | None, spec: str) -> str | None:
            return None if value is None else format(value, spec)

        _table(
            ["task", "change", "before", "after", "score Δ", "duration Δ", "cost Δ"],
            [(t.task_key, t.change, t.before, t.after, fmt(t.score_delta, "+.2f"),
              fmt(t.duration_delta, "+.1f"), fmt(t.cost_delta, "+.4f")) for t in tasks],
        )
        click.echo(", ".join(f"{n} {c.replace('_', ' ')}" for c, n in result.counts.items()))
        if not result.tasks:
            click.echo("neither run has any task", err=True)
    if result.fails(fail_on):
        sys.exit(EXIT_TASKS_FAILED)
