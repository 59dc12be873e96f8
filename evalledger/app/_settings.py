"""What a command needs beyond the options a run records, and how it opens the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import DEFAULT_LEDGER

if TYPE_CHECKING:
    from evalledger.ledger import Ledger


@dataclass(frozen=True)
class RunSettings:
    """How ``start_run`` and ``resume_run`` work, beyond ``RunOptions``: none of it is
    recorded in the ledger, none of it changes what a run evaluates."""

    ledger: Path | str = DEFAULT_LEDGER
    """The ledger file (made on first use)."""
    durable: bool = False
    """``synchronous=FULL``: every commit survives power loss, not just a crash."""
    junit_xml: Path | str | None = None
    """Also write the results as JUnit XML to this file (its folder must exist)."""
    allow_skipped: bool = False
    """Task files that could not be used do not make the outcome a failure."""
    handle_signals: bool = True
    """SIGINT (Ctrl-C), SIGTERM and SIGHUP interrupt the batch: the run is recorded as
    interrupted and the outcome says so; a second one kills the running tasks' process
    groups at once. Only in the main thread, where Python delivers signals. False:
    the caller's own handlers stay (a first Ctrl-C then arrives as KeyboardInterrupt,
    after the ledger recorded the interruption)."""

    @property
    def ledger_path(self) -> Path:
        return Path(self.ledger)

    @property
    def junit_path(self) -> Path | None:
        return None if self.junit_xml is None else Path(self.junit_xml)


def open_ledger(path: Path | str, *, read_only: bool = False, durable: bool = False) -> Ledger:
    """The ledger at ``path``, waiting for the write lock as every command does."""
    from evalledger.ledger import DEFAULT_BUSY_TIMEOUT, Ledger

    return Ledger(Path(path), read_only=read_only, durable=durable,
                  busy_timeout=DEFAULT_BUSY_TIMEOUT)
