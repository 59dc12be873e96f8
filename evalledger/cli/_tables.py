"""Tables for people, tab-separated lines for programs: what every listing prints."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from evalledger._text import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def cell(value: object) -> str:
    """A value as one line of text a terminal cannot act on: control characters, tabs
    and line breaks spelled out (``\\x1b``, ``\\t``, ``\\n``); a float to 15 digits."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float):
        # 15 significant digits: what a double holds exactly in decimal, without the
        # noise of its last bits (0.1 + 0.2 reads 0.3, not 0.30000000000000004).
        short = f"{value:.15g}"
        return short if any(c in short for c in ".ein") else f"{short}.0"  # 3.0 stays 3.0
    return visible(str(value), tabs=False)


def tsv(row: Sequence[object]) -> str:
    return "\t".join(cell(v) for v in row) + "\n"


def rich_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    from rich.table import Table  # only a terminal needs rich

    table = Table(*map(cell, columns), show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*map(cell, row))
    return table


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], *,
          stacked_when_narrow: bool = False) -> None:
    """A rich table in a terminal; tab-separated lines in a pipe (nothing cut).

    ``stacked_when_narrow``: a table of a few wide rows (the variants of ``show``: 18
    columns) that does not fit the terminal is turned, its rows side by side as
    columns, or where even that is too wide, shown a row at a time, a line per column:
    never squeezed until its cells read ``go…`` and ``$0…``."""
    if not sys.stdout.isatty():
        sys.stdout.write(tsv(columns) + "".join(map(tsv, rows)))
        return
    from rich.console import Console

    console = Console(soft_wrap=True)
    whole = rich_table(columns, rows)
    if not stacked_when_narrow or _fits(console, whole):
        console.print(whole)
        return
    # A column per row (a few variants side by side), else a block per row.
    turned = rich_table([columns[0], *(cell(row[0]) for row in rows)],
                        [[name, *(row[i] for row in rows)]
                         for i, name in enumerate(columns) if i])
    if _fits(console, turned):
        console.print(turned)
        return
    for row in rows:
        console.print(rich_table([columns[0], cell(row[0])],
                                 [[name, value] for name, value in zip(columns[1:], row[1:],
                                                                      strict=True)]))


def _fits(console: Console, table: Table) -> bool:
    # Measured as if the terminal had no edge: rich measures a table at most as wide as
    # the console, squeezing it first.
    unbounded = console.options.update_width(1 << 20)
    return console.measure(table, options=unbounded).maximum <= console.width
