"""``evalledger search``: the transcript lines that hold a text, across runs.

For people, each run's hits under its id, a hit's match marked, a long line shown
around it; in a pipe, a tab-separated line a hit (run, key, attempt, seq, kind, text),
nothing cut; for programs, ``--json``: an object a hit. Found nothing: exit 1, as grep.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING

import click

from evalledger._text import visible

from ._errors import EXIT_TASKS_FAILED
from ._main import Settings, pass_settings
from ._tables import tsv

if TYPE_CHECKING:
    from evalledger.app import Hit

# Around a match, a terminal shows this many characters of a long line.
_AROUND = 120


@click.command()
@click.argument("text")
@click.argument("runs", nargs=-1)
@click.option("--limit", type=click.IntRange(min=1, max=2**63 - 1), default=100,
              show_default=True, help="Stop after this many lines.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object a line found: run_id, task_key, attempt, seq, ts, kind, "
                   "text.")
@pass_settings
def search(settings: Settings, text: str, runs: tuple[str, ...], limit: int,
           as_json: bool) -> None:
    """Find TEXT, whatever its case, in what the attempts' commands printed: in RUNS
    (ids, unique prefixes or `latest`), or in every run, newest first.

    An agent's JSON line is shown as the lines of its conversation that hold TEXT.
    Exit 0 when a line holds it, 1 when none does.

    Example:

        evalledger search "APIConnectionError" latest
    """
    from evalledger.app import search_ledger

    with settings.open_ledger(read_only=True) as ledger:
        found = search_ledger(ledger, text, runs, limit=limit)
    if as_json:
        for hit in found.hits:
            click.echo(json.dumps(hit.as_json(), ensure_ascii=False))
    elif sys.stdout.isatty():
        _terminal(found.hits, text)
    else:
        sys.stdout.write("".join(tsv((h.run_id, h.task_key, h.attempt, h.seq, h.kind,
                                      visible(h.text, tabs=False)))
                                 for h in found.hits))
    runs_read = f"{len(found.runs)} run{'' if len(found.runs) == 1 else 's'}"
    if not found.hits:
        click.echo(f"no line holds {text!r} in {runs_read}", err=True)
        sys.exit(EXIT_TASKS_FAILED)
    lines = "1 line holds" if len(found.hits) == 1 else f"{len(found.hits)} lines hold"
    click.echo(f"{lines} {text!r} in {runs_read}"
               + (f"; stopped at --limit {limit} (more may)" if found.more else ""), err=True)


def _terminal(hits: list[Hit], text: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=False)
    pattern = re.compile(re.escape(text), re.IGNORECASE)
    run_id = None
    for hit in hits:
        if hit.run_id != run_id:
            run_id = hit.run_id
            console.print(Text(f"run {run_id}", style="bold"))
        line = Text(f"  {hit.task_key} #{hit.attempt} seq {hit.seq} ", style="dim")
        shown = Text(_around(visible(hit.text, tabs=False), pattern))
        shown.highlight_regex(pattern, style="reverse")
        # A conversation's line says what it is (``assistant: ...``); a printed one not.
        said = hit.kind in ("stdout", "stderr", "json")
        console.print(line + Text(f"{hit.kind}: " if said else "", style="cyan") + shown)


def _around(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` cut to about ``_AROUND`` characters each side of its first match, each
    cut marked."""
    match = pattern.search(text)
    if match is None or len(text) <= 2 * _AROUND + len(match.group()):
        return text
    start, end = max(0, match.start() - _AROUND), min(len(text), match.end() + _AROUND)
    return ("\u2026" if start else "") + text[start:end] + ("\u2026" if end < len(text) else "")
