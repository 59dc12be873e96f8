"""What ``run`` and ``resume`` show while a batch runs.

In a terminal: a rich progress bar (done/total, running, succeeded / failed /
error, spend so far, ETA) above which finished tasks scroll by. In a pipe: one
plain line per finished task. Both read the live ``SummaryFold`` the app feeds, the
same fold that writes ``run.json``, so the screen and the report cannot disagree.

With ``--stream``, output lines go by as they arrive; an agent's JSON lines (a
``stream_format`` with a parser in ``agents``: Claude Code's stream-json) are shown as
its conversation, a line per step, not as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any, TextIO

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from evalledger._text import money, visible
from evalledger.agents import lines_of, parser_for
from evalledger.ledger import AnyEvent, EventRow, EventType, TaskCompleted, TaskEmitted
from evalledger.projections import SummaryFold, error_digest
from evalledger.statuses import Category
from evalledger.suite import ResolvedTask

# A step of an agent's conversation in the --stream feed: cut here (the ledger has it all).
STREAM_WIDTH = 300
_WATCHED = frozenset({EventType.TASK_STARTED, EventType.TASK_COMPLETED,
                      EventType.TASK_INTERRUPTED, EventType.TASK_USAGE})
_ENDED = frozenset({EventType.TASK_COMPLETED, EventType.TASK_INTERRUPTED})
# A running attempt silent this long is named under the bar with its idle time.
QUIET_SECONDS = 10.0


class _Idle(ProgressColumn):
    """The running attempts silent longest, with how long (computed at each redraw: the
    time passes without any event to redraw for)."""

    def __init__(self, heard: dict[str, float]) -> None:
        super().__init__()
        self._heard = heard

    def render(self, task: Task) -> Text:
        now = time.monotonic()
        # A copy first: rich redraws from its own thread while the batch changes the dict.
        heard = list(self._heard.items())
        quiet = sorted((at, key) for key, at in heard if now - at >= QUIET_SECONDS)
        said = ", ".join(f"{visible(key)} {now - at:.0f}s" for at, key in quiet[:3])
        return Text(f"idle: {said}" + (f" (+{len(quiet) - 3})" if len(quiet) > 3 else "")
                    if said else "")


def task_line(result: TaskCompleted, *, note: str = "") -> str:
    """One line per finished task: its status, key, time, cost as ``show`` says it (a
    floor marked ``≥``), and its error's digest (its first line and the last that says
    what went wrong: the whole message is in ``show --json`` and the reports), with
    control characters a command printed spelled out, never sent to the terminal.
    ``note``: how the status meets the task's ``expect`` (``as expected``)."""
    cost = ""
    if result.cost_usd is not None or not result.cost_complete:
        cost = f"  {money(result.cost_usd, result.cost_complete)}"
        cost = "  cost unknown" if cost == "  unknown" else cost
    note = f"  {note}" if note else ""
    error = error_digest(result.error_message, failure_class=result.failure_class)
    detail = f"  {visible(error)}" if error else ""
    return (
        f"{result.final_status.value:<21} {visible(result.task_key)}  "
        f"{result.duration_seconds:.1f}s{cost}{note}{detail}"
    )


class Display:
    """Shows the live fold (the app feeds it); a context manager around the batch.

    The progress bar starts once the run id is out (``start``), so its first frame is
    never glued to it. A reader that left (``run ... | head``) ends the showing, not
    the run: the batch goes on and is recorded whole.
    """

    def __init__(self, live: SummaryFold, total: int, *, terminal: bool, stream: bool) -> None:
        self.live = live
        self.total = total
        self.stream = stream
        self.progress: Progress | None = None
        self._started = False
        # Per task key, its stream format (told by on_task_start): how its JSON reads.
        self._formats: dict[str, str] = {}
        # Per running task key, when it last produced anything (time.monotonic()).
        self._heard: dict[str, float] = {}
        if terminal:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                _Idle(self._heard),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar = self.progress.add_task(live.run_id, total=total, detail="")

    def __enter__(self) -> Display:
        return self

    def start(self) -> None:
        """Show the progress bar (in a terminal), below whatever was printed so far."""
        if self.progress is not None and not self._started:
            self._started = True
            self.progress.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Draw the bar a last time and leave it (in a terminal)."""
        if self.progress is not None and self._started:
            self._refresh()
            self.progress.stop()

    def echo(self, text: str, *, err: bool = False) -> None:
        if self.progress is None or not self._started:
            say(text, err=err)
            return
        try:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        except BrokenPipeError:
            quiet(sys.stderr if err else sys.stdout)

    def on_event(self, event: AnyEvent | EventRow) -> None:
        """An event the live fold has just taken: note who spoke, redraw when it moves
        the counts, say a stall."""
        if event.task_key is not None:
            if event.type in _ENDED:
                self._heard.pop(event.task_key, None)
            elif event.type != EventType.TASK_STALLED:  # a stall is no sign of life
                self._heard[event.task_key] = time.monotonic()
        if event.type == EventType.TASK_STALLED:
            stalled = event.decode() if isinstance(event, EventRow) else event
            self.echo(f"[{visible(event.task_key or '')}] stalled: no output for "
                      f"{getattr(stalled, 'idle_seconds', 0):g}s "
                      f"({getattr(stalled, 'action', 'kill')})", err=True)
        if event.type in _WATCHED:
            self._refresh()

    def on_complete(self, result: TaskCompleted, *, note: str = "") -> None:
        self.echo(task_line(result, note=note))

    def on_task_start(self, task: ResolvedTask) -> None:
        """A task is about to start: note its stream format."""
        self._formats[task.task_key] = task.stream_format

    def on_output(self, event: AnyEvent) -> None:
        prefix = f"[{visible(event.task_key or '')}]"
        if isinstance(event, TaskEmitted):
            parser = parser_for(self._formats.get(event.task_key))
            if parser is not None:  # an agent's JSON, read as its conversation
                for line in lines_of(parser(event.data), width=STREAM_WIDTH):
                    self.echo(f"{prefix} {visible(line.text)}")
                return
            shown = json.dumps(event.data, ensure_ascii=False)  # JSON the task printed, as JSON
        else:
            shown = visible(getattr(event, "line", ""))
        self.echo(f"{prefix} {shown}", err=getattr(event, "stream", "") == "stderr")

    def _refresh(self) -> None:
        if self.progress is None or not self._started:
            return
        counts = self.live.counts()
        done = sum(counts.values())
        spend = f"${self.live.spend.cost:.4f}" + ("" if self.live.spend.complete else "+")
        detail = (
            f"running {len(self.live.running)}  ok {counts[Category.SUCCEEDED]}  "
            f"failed {counts[Category.FAILED]}  error {counts[Category.ERROR]}  "
            + (f"ungraded {counts[Category.UNGRADED]}  " if counts[Category.UNGRADED] else "")
            + spend
        )
        # A resume starts with the kept tasks already done.
        self.progress.update(self._bar, completed=min(done, self.total), detail=detail)


def say(text: str, *, err: bool = False) -> None:
    """``click.echo``, for a reader that may have left: then what follows goes nowhere."""
    try:
        click.echo(text, err=err)
    except BrokenPipeError:
        quiet(sys.stderr if err else sys.stdout)


def quiet(stream: TextIO) -> None:
    """The reader of ``stream`` left (a closed pipe): what is still written there goes
    nowhere, quietly, instead of raising on every line."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
