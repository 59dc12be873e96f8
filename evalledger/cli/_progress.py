"""What ``run`` and ``resume`` show while a batch runs.

In a terminal: a rich progress bar (done/total, running, succeeded / failed /
error, spend so far, ETA) above which finished tasks scroll by. In a pipe: one
plain line per finished task. Both read the live ``SummaryFold``, the same fold
that writes ``run.json``, so the screen and the report cannot disagree.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from evalledger.ledger import AnyEvent, EventRow, EventType, TaskCompleted
from evalledger.projections import SummaryFold
from evalledger.statuses import Category

_WATCHED = frozenset({EventType.TASK_STARTED, EventType.TASK_COMPLETED,
                      EventType.TASK_INTERRUPTED, EventType.TASK_USAGE})


def task_line(result: TaskCompleted) -> str:
    cost = "" if result.cost_usd is None else f"  ${result.cost_usd:.4f}"
    if not result.cost_complete:
        cost = "  cost unknown"
    detail = f"  {result.error_message[:200]}" if result.error_message else ""
    return (
        f"{result.final_status.value:<21} {result.task_key}  "
        f"{result.duration_seconds:.1f}s{cost}{detail}"
    )


class Display:
    """Feeds the live fold and shows it; a context manager around the batch."""

    def __init__(self, live: SummaryFold, total: int, *, terminal: bool, stream: bool) -> None:
        self.live = live
        self.total = total
        self.stream = stream
        self.progress: Progress | None = None
        if terminal:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar = self.progress.add_task(live.run_id, total=total, detail="")

    def __enter__(self) -> Display:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self._refresh()
            self.progress.stop()

    def echo(self, text: str, *, err: bool = False) -> None:
        if self.progress is not None:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(text, err=err)

    def on_event(self, event: AnyEvent | EventRow) -> None:
        self.live.apply(event)
        if self.progress is not None and event.type in _WATCHED:
            self._refresh()

    def on_complete(self, result: TaskCompleted) -> None:
        self.echo(task_line(result))

    def on_output(self, event: AnyEvent) -> None:
        line = getattr(event, "line", None)
        if line is None:
            line = str(getattr(event, "data", ""))
        self.echo(f"[{event.task_key}] {line}", err=getattr(event, "stream", "") == "stderr")

    def _refresh(self) -> None:
        assert self.progress is not None
        counts = self.live.counts()
        done = sum(counts.values())
        spend = f"${self.live.spend.cost:.4f}" + ("" if self.live.spend.complete else "+")
        detail = (
            f"running {len(self.live.running)}  ok {counts[Category.SUCCEEDED]}  "
            f"failed {counts[Category.FAILED]}  error {counts[Category.ERROR]}  {spend}"
        )
        # A resume starts with the kept tasks already done.
        self.progress.update(self._bar, completed=min(done, self.total), detail=detail)
