"""What a command tells whoever called it while it works.

A command prints nothing: the CLI shows these (a progress bar, a line per task, notes
on stderr); a Python caller overrides what it wants to see. Each method here does
nothing, but ``notice``, which logs (logger ``evalledger``), so a caller who overrides
nothing still has the warnings where Python keeps them: shown where the program
configures logging to show them, never written to stderr unasked (``evalledger._logs``:
the CLI prints them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalledger._logs import handler as _log_handler

if TYPE_CHECKING:
    from evalledger.ledger import AnyEvent, EventRow, TaskCompleted
    from evalledger.projections import SummaryFold
    from evalledger.suite import ResolvedTask

    from ._import import RunImport
    from ._transfer import TransferOutcome

log = logging.getLogger("evalledger")
log.addHandler(_log_handler())  # nowhere in a library, stderr in the CLI


class Callbacks:
    """Hooks a command calls as it goes; subclass and override what you show.

    An exception raised by a hook called while a batch runs is logged and ignored:
    the batch goes on and is recorded whole.
    """

    stream: bool = False
    """Whether ``task_started`` and ``task_output`` are called: every line a task
    prints passes through them (the CLI's ``--stream``)."""

    def notice(self, text: str) -> None:
        """A line for the person running the command: a warning (a task file skipped,
        a model without a price, drift), what a resume will do, the sample's seed."""
        log.warning("%s", text)

    def run_named(self, run_id: str) -> None:
        """The run's id, once it names a run in the ledger (``run.started`` committed;
        for a resume, once the plan is made)."""

    def batch_started(self, run_id: str, live: SummaryFold, total: int) -> None:
        """The batch is dispatching. ``live`` is the run's summary fold, fed every
        committed event before ``event`` is called; ``total``: the run's task keys."""

    def task_started(self, task: ResolvedTask) -> None:
        """A task is about to start (with ``stream`` only)."""

    def task_output(self, event: AnyEvent) -> None:
        """A line or JSON value a task printed (with ``stream`` only)."""

    def task_completed(self, result: TaskCompleted, expect: str | None,
                       as_expected: bool) -> None:
        """A task ended; ``expect``: how its file said it would end, if it did;
        ``as_expected``: whether it did (always True without an ``expect`` that is
        not met)."""

    def event(self, event: AnyEvent | EventRow) -> None:
        """An event was committed (``live`` has it already)."""

    def batch_ended(self) -> None:
        """The batch is over, however it ended (called once ``batch_started`` may have
        been)."""

    def run_imported(self, result: RunImport) -> None:
        """One run folder of the old harness was imported, or left out and why."""

    def transferred(self, result: TransferOutcome) -> None:
        """One file or ledger's events were appended (``import_events``, ``merge``)."""
