"""``evalledger runs``: the runs in the ledger, newest first.

For people, a table fitted to the terminal: the run id is never cut (it is what the
other commands take), the experiment id gives way first; in a pipe, every column as
tab-separated lines, nothing cut. For programs, ``--format``: every column exact.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from evalledger._text import money

from ._main import Settings, pass_settings
from ._tables import cell, table

if TYPE_CHECKING:
    from evalledger.app import ListedRun

FORMATS = ("csv", "json", "tsv")


@click.command()
@click.option("--limit", type=click.IntRange(min=1, max=2**63 - 1), default=20,
              show_default=True)
@click.option("--format", "format_", type=click.Choice(FORMATS),
              help="For programs: every column of the `runs` view and cut_off, exact: csv or "
                   "tsv (a header line first), json (one object per run). Default: a table "
                   "fitted to the terminal; in a pipe, tab-separated lines for people.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@pass_settings
def runs(settings: Settings, limit: int, format_: str | None, as_json: bool) -> None:
    """List runs, newest first by start time: the columns of the `runs` SQL view.

    A finished run's line is read from its snapshot, so the listing takes as long
    for a ledger of a thousand runs as for one of ten.

    Example:

        evalledger runs --limit 5 --format csv
    """
    from evalledger.app import listed_runs

    if as_json and format_ not in (None, "json"):
        raise click.UsageError(f"--json and --format {format_} disagree: give one")
    format_ = "json" if as_json else format_
    with settings.open_ledger(read_only=True) as ledger:
        listed = listed_runs(ledger, limit)
    if format_ is None and sys.stdout.isatty():
        _table(listed)
    elif format_ is None:  # a pipe (`| less`, `| column -t`): words for people, nothing cut
        _lines(listed)
    elif format_ == "json":  # exact numbers, for programs
        for run in listed:
            click.echo(json.dumps({**run.columns, "cut_off": run.cut_off}))
    else:
        _delimited(listed, format_)


def _lines(listed: list[ListedRun]) -> None:
    """Tab-separated lines for people: the status word, costs rounded, and where grading
    spent some, whose the cost was (agent, grader)."""
    from evalledger.render import cost_line

    shown = [c for c in _columns() if c not in ("cost_complete", "grader_cost_usd")]
    lines = []
    for run in listed:
        words = {**run.columns, "status": run.shown.value,
                 "cost_usd": cost_line(run.columns["cost_usd"], run.columns["cost_complete"],
                                       run.roles)}
        lines.append(tuple(words[c] for c in shown))
    table(shown, lines)


def _delimited(listed: list[ListedRun], format_: str) -> None:
    """csv or tsv: a header line, then every column exact."""
    names = [*_columns(), "cut_off"]
    lines: list[list[object]] = [list(names)]
    for run in listed:
        row = {**run.columns, "cut_off": run.cut_off}
        lines.append([_plain(row[c]) for c in names])
    if format_ == "csv":
        csv.writer(sys.stdout, lineterminator="\n").writerows(lines)
    else:
        sys.stdout.writelines("\t".join(map(cell, line)) + "\n" for line in lines)


def _columns() -> tuple[str, ...]:
    from evalledger.app import RUN_COLUMNS

    return RUN_COLUMNS


def _plain(value: object) -> object:
    """A value for csv or tsv: booleans as JSON spells them, None as an empty field."""
    return json.dumps(value) if isinstance(value, bool) else value


def _table(listed: list[ListedRun]) -> None:
    """The runs as a table no wider than the terminal, one line a run where it fits."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    columns = _table_columns(listed)
    widths = _fit([(h, v) for h, v, _ in columns], console.width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False)
    shown = []
    for (header, values, right), width in zip(columns, widths, strict=True):
        if header == "started UTC" and 0 < width < len(header):
            header, values = "started", [v[:10] for v in values]  # the date: one line a run
        if width:
            # Cut with an ellipsis: only the experiment id is ever narrower than its values.
            table.add_column(header, width=width, justify="right" if right else "left",
                             no_wrap=True, overflow="ellipsis")
            shown.append(values)
    for i in range(len(listed)):
        table.add_row(*(values[i] for values in shown))
    console.print(table)


def _table_columns(listed: list[ListedRun]) -> list[tuple[str, list[str], bool]]:
    """(header, values, right-aligned) of each column; the run id first, as every command
    takes it. ``ungraded`` only when some run has any; ``grader`` (of the cost, grading's)
    only when some listed run graded with a model."""
    rows = [run.columns for run in listed]
    columns: list[tuple[str, list[str], bool]] = [
        ("run", _of(rows, "run_id", cell), False),
        ("experiment", _of(rows, "experiment_id", lambda v: cell(v) or "-"), False),
        ("started UTC", _of(rows, "started_at", _minute), False),
        ("status", [run.shown.value for run in listed], False),
        ("tasks", _of(rows, "tasks_planned"), True),
        ("ok", _of(rows, "tasks_succeeded"), True),
        ("fail", _of(rows, "tasks_failed"), True),
        ("err", _of(rows, "tasks_error"), True),
        ("ungraded", _of(rows, "tasks_ungraded"), True),
        ("cost", [money(r["cost_usd"], r["cost_complete"]) for r in rows], True),
        ("grader", [_grader(run) for run in listed], True),
    ]
    wanted = {"ungraded": any(r["tasks_ungraded"] for r in rows),
              "grader": any(run.grader_role() for run in listed)}
    return [column for column in columns if wanted.get(column[0], True)]


def _of(rows: list[dict[str, Any]], name: str, shown: Callable[[Any], str] = str) -> list[str]:
    return [shown(row[name]) for row in rows]


def _grader(run: ListedRun) -> str:
    role = run.grader_role()
    return "-" if role is None else money(role["cost_usd"], role["cost_complete"])


def _minute(ts: object) -> str:
    """``2026-12-01T12:34:56.789012Z`` as ``2026-12-01 12:34``."""
    text = cell(ts)
    return f"{text[:10]} {text[11:16]}" if len(text) >= 16 else text or "-"


def _fit(columns: Sequence[tuple[str, list[str]]], width: int) -> list[int]:
    """Column widths (0: left out) whose sum, with one space between columns, is at most
    ``width``. Every column is as wide as its widest value but two: the experiment id
    gives way first (to 16, then the start time is cut to its date, then to 8), and
    when even that is too wide, columns are left out, the least needed first. The run
    id is never cut."""
    natural = [max([len(header), *map(len, values)]) for header, values in columns]
    names = [header for header, _ in columns]
    started, experiment = names.index("started UTC"), names.index("experiment")
    widths = list(natural)

    def room() -> int:
        shown = [w for w in widths if w]
        return width - sum(shown) - (len(shown) - 1)

    def shrink_experiment(floor: int) -> None:
        widths[experiment] = max(min(natural[experiment], floor), widths[experiment] + room())

    shrink_experiment(16)
    if room() < 0:
        widths[started] = min(natural[started], 10)
        widths[experiment] = min(natural[experiment], widths[experiment] + room())
        shrink_experiment(8)
    for name in ("experiment", "started UTC", "grader", "ungraded", "err", "fail", "ok",
                 "tasks", "cost", "status"):
        if room() >= 0:
            break
        if name in names:
            widths[names.index(name)] = 0
    return widths
