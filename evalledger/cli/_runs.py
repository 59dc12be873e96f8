"""``evalledger runs``: the runs in the ledger, newest first.

For people, a table fitted to the terminal: the run id is never cut (it is what the
other commands take), the experiment id gives way first; in a pipe, every column as
tab-separated lines, nothing cut. For programs, ``--format``: every column exact.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from evalledger._text import money
from evalledger.projections import cost_line, status_word

from ._common import is_cut_off
from ._main import Settings, pass_settings
from ._tables import cell, table

# The columns of the `runs` SQL view, in its order; the CLI adds cut_off.
COLUMNS = ("run_id", "experiment_id", "started_at", "finished_at", "status", "tasks_planned",
           "tasks_succeeded", "tasks_failed", "tasks_error", "cost_usd", "tasks_ungraded",
           "cost_complete", "grader_cost_usd")
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
    from evalledger.projections import load_headline

    if as_json and format_ not in (None, "json"):
        raise click.UsageError(f"--json and --format {format_} disagree: give one")
    format_ = "json" if as_json else format_
    with settings.open_ledger(read_only=True) as ledger:
        listed = []
        for run_id in ledger.run_ids()[::-1][:limit]:  # one order: see Ledger.run_ids
            head = load_headline(ledger, run_id)
            run: dict[str, Any] = {c: head.get(c) for c in COLUMNS}
            run["cost_usd"] = head["total_cost_usd"]
            run["_roles"] = head.get("usage_by_role") or []  # for people; not a column
            grader = _grader_role(run)
            run["grader_cost_usd"] = grader["cost_usd"] if grader else 0.0
            run["cut_off"] = is_cut_off(ledger, run_id, run["status"])
            listed.append(run)
    if format_ is None and not sys.stdout.isatty():
        # A pipe (`| less`, `| column -t`): the words a person reads, nothing cut.
        # The cost column says whose it was (agent, grader) where grading spent some.
        shown = [c for c in COLUMNS if c not in ("cost_complete", "grader_cost_usd")]
        for run in listed:
            run["status"] = status_word(run["status"], run["cut_off"])
            run["cost_usd"] = cost_line(run["cost_usd"], run["cost_complete"], run["_roles"])
        table(shown, [tuple(run[c] for c in shown) for run in listed])
    elif format_ == "json":  # exact numbers, for programs
        for run in listed:
            click.echo(json.dumps({c: run[c] for c in (*COLUMNS, "cut_off")}))
    elif format_ in ("csv", "tsv"):
        names = [*COLUMNS, "cut_off"]
        lines: list[list[object]] = [list(names), *([_plain(run[c]) for c in names]
                                                    for run in listed)]
        if format_ == "csv":
            csv.writer(sys.stdout, lineterminator="\n").writerows(lines)
        else:
            sys.stdout.writelines("\t".join(map(cell, line)) + "\n" for line in lines)
    else:
        _table(listed)


def _plain(value: object) -> object:
    """A value for csv or tsv: booleans as JSON spells them, None as an empty field."""
    return json.dumps(value) if isinstance(value, bool) else value


def _table(listed: list[dict[str, Any]]) -> None:
    """The runs as a table no wider than the terminal, one line a run where it fits."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    ungraded = any(run["tasks_ungraded"] for run in listed)
    # (header, values, right-aligned); the run id first, as every command takes it.
    columns: list[tuple[str, list[str], bool]] = [
        ("run", [cell(r["run_id"]) for r in listed], False),
        ("experiment", [cell(r["experiment_id"]) or "-" for r in listed], False),
        ("started UTC", [_minute(r["started_at"]) for r in listed], False),
        ("status", [status_word(r["status"], r["cut_off"]) for r in listed], False),
        ("tasks", [str(r["tasks_planned"]) for r in listed], True),
        ("ok", [str(r["tasks_succeeded"]) for r in listed], True),
        ("fail", [str(r["tasks_failed"]) for r in listed], True),
        ("err", [str(r["tasks_error"]) for r in listed], True),
        *([("ungraded", [str(r["tasks_ungraded"]) for r in listed], True)] if ungraded else []),
        ("cost", [money(r["cost_usd"], r["cost_complete"]) for r in listed], True),
        # Of that cost, grading's: shown when a listed run graded with a model.
        *([("grader", [_grader(r) for r in listed], True)]
          if any(_grader_role(r) for r in listed) else []),
    ]
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


def _grader_role(run: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in run["_roles"] if r["role"] == "grader"), None)


def _grader(run: dict[str, Any]) -> str:
    role = _grader_role(run)
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
