"""Resume partition and fingerprint drift (SPEC §7).

A run's planned keys split in two: those whose latest attempt reached a final
status (kept) and the rest (to run: never started, interrupted, or cut off by a
crash). With ``retry_errors``, keys whose latest status is in the ``error``
category move to "to run" too. Every planned key lands on exactly one side.

Drift compares the fingerprint stored with the run (the latest ``run.started``
or ``run.resumed``) with the one computed now from the same configuration:
run-level options, and per task key the hash of its resolved definition (so an
edited prompt, command or criterion shows up as that key changing).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from pydantic import BaseModel, ConfigDict

from evalledger.ledger import (
    AnyEvent,
    Fingerprint,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
)
from evalledger.statuses import Category

# Options that change how a run executes, not what it evaluates: never drift.
# (max_cost_usd is a budget: a resume may raise it without the tasks changing.)
OPERATIONAL_OPTIONS = frozenset(
    {"max_parallel", "out", "cwd", "preservation_mode", "max_cost_usd"}
)


class Partition(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    kept: list[str]
    to_run: list[str]
    attempts: dict[str, int]


class ResumeFold:
    """Folds one run's lifecycle events into the resume partition."""

    TYPES = frozenset({
        "run.started", "run.resumed", "run.finished", "task.started", "task.completed",
        "task.interrupted",
    })

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.found = False
        self.config: dict[str, Any] = {}
        self.fingerprint = Fingerprint()
        # The host of the latest run.started / run.resumed, and whether a
        # run.finished came after it: who may still be running the run.
        self.host: dict[str, Any] = {}
        self.finished = False
        # The seq of the latest run.started / run.resumed: a resume appends only if
        # it is still the latest (Ledger.append(if_run_at=...)).
        self.boundary_seq = 0
        # Invariant: _planned keeps first-planned order; a dict used as an ordered set.
        self._planned: dict[str, None] = {}
        self._attempts: dict[str, int] = {}
        # The latest attempt's final category per key; None while unfinished.
        self._latest: dict[str, Category | None] = {}

    def apply(self, event: AnyEvent) -> None:
        if event.run_id != self.run_id or event.type not in self.TYPES:
            return
        if isinstance(event, RunStarted):
            self.found = True
            self.config = event.config
            self.fingerprint = event.fingerprint
            self.host, self.finished = event.host, False
            self.boundary_seq = event.seq or 0
            self._planned.update(dict.fromkeys(event.planned))
        elif isinstance(event, RunResumed):
            self.fingerprint = event.fingerprint
            self.host, self.finished = event.host, False
            self.boundary_seq = event.seq or 0
            self._planned.update(dict.fromkeys(event.to_run))
        elif isinstance(event, RunFinished):
            self.finished = True
        elif isinstance(event, TaskStarted):
            self._planned.setdefault(event.task_key, None)
            self._attempts[event.task_key] = max(
                self._attempts.get(event.task_key, 0), event.attempt
            )
            self._latest[event.task_key] = None
        elif isinstance(event, TaskCompleted):
            # Only a started attempt counts, as in the summary and the SQL views.
            started = event.task_key in self._latest
            if started and event.attempt >= self._attempts.get(event.task_key, 0):
                self._latest[event.task_key] = event.category
        elif isinstance(event, TaskInterrupted):
            self._latest[event.task_key] = None

    def live_pid(self) -> int | None:
        """The pid still running this run on this host, if any.

        A run without a final run.finished was either cut off (a crash: resume it)
        or is still going (a second process must not run its tasks again). The
        recorded host and pid tell which.
        """
        pid = self.host.get("pid")
        if self.finished or self.host.get("hostname") != socket.gethostname():
            return None
        if not isinstance(pid, int) or pid == os.getpid():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, someone else's
            return pid
        return pid

    def ended(self) -> bool:
        """Whether no process will add to this run any more: it recorded run.finished,
        or it was recorded on this host by a process that is gone (a crash)."""
        if self.finished:
            return True
        return self.host.get("hostname") == socket.gethostname() and self.live_pid() is None

    def partition(self, *, retry_errors: bool = False) -> Partition:
        kept, to_run = [], []
        for key in self._planned:
            category = self._latest.get(key)
            finished = category is not None and not (retry_errors and category == Category.ERROR)
            (kept if finished else to_run).append(key)
        return Partition(
            run_id=self.run_id, kept=kept, to_run=to_run, attempts=dict(self._attempts)
        )


class Drift(BaseModel):
    """What changed between the stored fingerprint and now."""

    model_config = ConfigDict(frozen=True)

    options: dict[str, tuple[Any, Any]] = {}
    changed: list[str] = []
    added: list[str] = []
    removed: list[str] = []

    @property
    def any(self) -> bool:
        return bool(self.options or self.changed or self.added or self.removed)

    def lines(self) -> list[str]:
        """Drift as a person reads it, one line per difference."""
        out = [f"option {k}: {before!r} -> {now!r}" for k, (before, now) in self.options.items()]
        out += [f"task {k}: definition changed" for k in self.changed]
        out += [f"task {k}: new" for k in self.added]
        out += [f"task {k}: no longer defined" for k in self.removed]
        return out


def compute_drift(stored: Fingerprint, now: Fingerprint) -> Drift:
    """Differences from ``stored`` to ``now``, ignoring ``OPERATIONAL_OPTIONS``."""
    keys = (set(stored.options) | set(now.options)) - OPERATIONAL_OPTIONS
    options = {
        k: (stored.options.get(k), now.options.get(k))
        for k in sorted(keys)
        if stored.options.get(k) != now.options.get(k)
    }
    return Drift(
        options=options,
        changed=sorted(
            k for k in stored.tasks.keys() & now.tasks.keys() if stored.tasks[k] != now.tasks[k]
        ),
        added=sorted(now.tasks.keys() - stored.tasks.keys()),
        removed=sorted(stored.tasks.keys() - now.tasks.keys()),
    )
