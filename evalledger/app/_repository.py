"""The read side: the one place that rebuilds a run's state from its stored events.

As eventsourcing's ``Repository``, it stands between the pure folds (``projections``)
and the store (``ledger``): it reads a run's events (through the ledger's named
queries, never SQL of its own), folds them, and reads and appends snapshots, so a
finished run is read, not refolded. The CLI and the viewer ask it; the folds never
read anything themselves.

A rebuild of fold ``F`` loads the newest ``run.snapshot`` of kind ``F``'s name made by
``F.VERSION`` and folds only the run's events after its ``through_seq``; with none (an
older run, a run cut off before it finished, a snapshot of another version) it
replays from the start. The fold code is the same either way, so a rebuild through a
snapshot equals a full replay (a property test, and ``verify --deep`` on every stored
snapshot: ``_snapshot_check``).

A run's shown status is ``projections.shown_status`` of what its folds recorded and,
for a run still called running, whether the process that recorded it is gone
(``evalledger.hosts``): ``run_status`` and ``status_of`` here hand it that answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from evalledger._gc import collector_paused
from evalledger.errors import InvalidRequest
from evalledger.ledger import EventRow, EventType
from evalledger.ledger._queries import latest_snapshot
from evalledger.projections._snapshots import (
    FOLD_KINDS,
    HEADLINE_KEYS,
    restore_fold,
    snapshot_events,
)
from evalledger.projections._status import shown_status
from evalledger.projections._versions import SUMMARY_VERSION
from evalledger.statuses import ShownStatus

if TYPE_CHECKING:
    from evalledger.ledger import AnyEvent, Ledger, Signer
    from evalledger.ledger._lite import LiteEvent
    from evalledger.ledger._queries import Snapshot
    from evalledger.projections import FlakyTask, ResumeFold, RunSummary
    from evalledger.projections._fold import Fold

F = TypeVar("F", bound="Fold")
log = logging.getLogger("evalledger.executor")

_BOUNDARIES = (EventType.RUN_STARTED, EventType.RUN_RESUMED, EventType.RUN_FINISHED)
# What a run's folds can record as its status (never ``cut off``: that is decided on read).
_RECORDED = frozenset(s.value for s in ShownStatus if s is not ShownStatus.CUT_OFF)


# -- folds, through snapshots ------------------------------------------------------------------


def load_folds(ledger: Ledger, run_id: str, *classes: type[Fold], snapshots: bool = True,
               until_seq: int | None = None) -> tuple[list[Fold], int]:
    """Each fold of ``classes`` for the run, from its snapshot (if ``snapshots``) and the
    events after it, all in one pass over the ledger; and the seq of the last event
    folded (0: none), what a new snapshot of them is through."""
    started = [_restored(ledger, run_id, cls, snapshots, until_seq) for cls in classes]
    folds = [fold for fold, _ in started]
    after = [since for _, since in started]
    types = frozenset().union(*(cls.TYPES for cls in classes))
    start = min(after, default=0)
    # Every fold starts from a snapshot a batch of the run sealed (or from the start):
    # what it folded was checked then, only what came after is checked now.
    events = ledger.lite_events(run_id, types=types, after_seq=start, until_seq=until_seq,
                                sealed_through=start)
    if all(since == start for since in after):  # the common case: one loop, no checks
        return folds, _fold_all(folds, events, max(after, default=0))
    return folds, _fold_each(folds, after, events)


def _restored(ledger: Ledger, run_id: str, cls: type[F], snapshots: bool,
              until_seq: int | None) -> tuple[F, int]:
    """The fold from its newest usable snapshot and the seq that is through; a new fold
    and 0 when there is none."""
    snap = (latest_snapshot(ledger, run_id, FOLD_KINDS[cls.__name__], cls.VERSION,
                            until_seq=until_seq) if snapshots else None)
    if snap is not None and (until_seq is None or snap.through_seq <= until_seq):
        try:
            restored = restore_fold(cls, run_id, snap.value)
        except ValueError:  # packed, and does not unpack (verify names it): replay
            restored = None
        if restored is not None:
            return restored, snap.through_seq
    return cls(run_id), 0


def _fold_all(folds: list[Fold], events: Iterable[LiteEvent | AnyEvent], last: int) -> int:
    applies = [f.apply for f in folds]
    for event in events:
        for apply in applies:
            apply(event)
        last = event.seq or last
    return last


def _fold_each(folds: list[Fold], after: list[int],
               events: Iterable[LiteEvent | AnyEvent]) -> int:
    """Each event into the folds whose snapshot does not cover it."""
    last = max(after, default=0)
    for event in events:
        seq = event.seq or 0
        for fold, since in zip(folds, after, strict=True):
            if seq > since:
                fold.apply(event)
        last = max(last, seq)
    return last


def load_fold(ledger: Ledger, cls: type[F], run_id: str, *, snapshots: bool = True,
              until_seq: int | None = None) -> F:
    """One fold of the run, rebuilt (see ``load_folds``)."""
    (fold,), _ = load_folds(ledger, run_id, cls, snapshots=snapshots, until_seq=until_seq)
    assert isinstance(fold, cls)
    return fold


# -- summaries and headlines -------------------------------------------------------------------


def _current(ledger: Ledger, run_id: str, kind: str, snapshots: bool, *,
             until_seq: int | None = None) -> Snapshot | None:
    """The run's snapshot of ``kind`` (made by this summary code) if no lifecycle event
    of the run came after it (up to ``until_seq``). Imports no fold: what ``runs`` and
    ``show`` read first."""
    if not snapshots:
        return None
    snap = latest_snapshot(ledger, run_id, kind, SUMMARY_VERSION, until_seq=until_seq)
    if snap is None or ledger.last_lifecycle_seq(run_id, until_seq=until_seq) > snap.through_seq:
        return None
    return snap


def snapshot_summary(ledger: Ledger, run_id: str, *, until_seq: int | None = None
                     ) -> RunSummary | None:
    """The run's summary (without its anchor) read from its snapshot, if one is current
    as of ``until_seq`` (no lifecycle event of the run after it) and sound; else None.
    A 100,000-task run's in 0.9 s, against 1.9 s to build it from its fold (the viewer
    reads it in a worker thread: its event loop builds nothing that large)."""
    snap = _current(ledger, run_id, "summary", True, until_seq=until_seq)
    if snap is None:
        return None
    from evalledger.projections import RunSummary

    try:
        with collector_paused():  # a row per key: see evalledger._gc
            summary = RunSummary.model_validate_json(snap.value)
    except ValueError:  # a damaged snapshot (verify --deep names it): fold instead
        return None
    return summary if _known_status(summary.status) else None


def load_summary(ledger: Ledger, run_id: str, *, snapshots: bool = True,
                 grades: str | None = None, count_infra: bool = False) -> RunSummary:
    """The run's summary (without its anchor) as grade set ``grades`` judges it
    (default: the latest complete one), its rates counting infrastructure failures
    when ``count_infra``: a finished run's default is read from its snapshot, any other
    is folded.

    Raises:
        UnknownGrades: the run has no grade set of that name (an ``EvalledgerError``
            once the caller says so: ``grades_of``).
    """
    if grades is None and not count_infra and snapshots:
        read = snapshot_summary(ledger, run_id)
        if read is not None:
            return read
    from evalledger.projections import SummaryFold, UnknownGrades

    fold = load_fold(ledger, SummaryFold, run_id, snapshots=snapshots)
    try:
        return fold.summary(grades, count_infra=count_infra)
    except UnknownGrades as e:
        raise InvalidRequest(str(e)) from None


@dataclass(frozen=True)
class SummaryPage:
    """A run's summary holding only its first task rows (``summary.tasks``), with what
    the others say that a reader of the page still needs."""

    summary: RunSummary
    rows: int
    """How many task rows the run has in all."""
    isolation: dict[str, int]
    """What confined its tasks, by how many (``isolation_line``'s counts)."""


def load_summary_page(ledger: Ledger, run_id: str, limit: int, *, grades: str | None = None,
                      count_infra: bool = False) -> SummaryPage:
    """The run's summary (as ``load_summary``) with only its first ``limit`` task rows.

    A finished run's rows are cut out of its snapshot without building the others (a
    100,000-task run's summary is 44 MB of JSON, its rows as models 400 MB). Any other
    run (or a snapshot this reader cannot cut) is folded whole, then cut."""
    snap = (None if grades is not None or count_infra
            else _current(ledger, run_id, "summary", True))
    page = _page(snap, limit) if snap is not None else None
    if page is not None:
        return page
    summary = load_summary(ledger, run_id, grades=grades, count_infra=count_infra)
    return SummaryPage(summary.model_copy(update={"tasks": summary.tasks[:limit]}),
                       len(summary.tasks), summary.tasks_by_isolation)


def _page(snap: Snapshot, limit: int) -> SummaryPage | None:
    import msgspec

    from evalledger.projections import RunSummary

    try:
        # A plain value is decoded in the payload whole, not cut out: no 44 MB copy.
        value = (snap.value if snap.packed else
                 msgspec.json.decode(snap.payload, type=dict[str, msgspec.Raw])["value"])
        fields = msgspec.json.decode(value, type=dict[str, msgspec.Raw])
        rows = msgspec.json.decode(fields.pop("tasks", b"[]"), type=list[msgspec.Raw])
        data = {name: msgspec.json.decode(raw) for name, raw in fields.items()}
        data["tasks"] = [msgspec.json.decode(raw) for raw in rows[:limit]]
        summary = RunSummary.model_validate(data)
        isolation = summary.tasks_by_isolation  # counted when it was made: no row read
    # Damaged or forged (verify names it; RecursionError: nested a million deep): fold.
    except (msgspec.DecodeError, ValueError, KeyError, RecursionError):
        return None
    if not _known_status(summary.status):
        return None
    return SummaryPage(summary, len(rows), isolation)


def load_headline(ledger: Ledger, run_id: str, *, snapshots: bool = True) -> dict[str, Any]:
    """The run's ``RunHeadline`` as JSON data: a finished run's is read from its
    snapshot without importing a model (what ``runs`` lists, for every run)."""
    snap = _current(ledger, run_id, "headline", snapshots)
    if snap is not None:
        try:
            value = json.loads(snap.value)
        except (ValueError, RecursionError):  # RecursionError: nested a million deep
            value = None
        if (isinstance(value, dict) and value.keys() >= HEADLINE_KEYS
                and _known_status(value["status"])):
            return value
    from evalledger.projections import SummaryFold

    fold = load_fold(ledger, SummaryFold, run_id, snapshots=snapshots)
    return fold.headline().model_dump(mode="json")


def _known_status(status: object) -> bool:
    # A status no run records (a forged snapshot: verify names it) is not believed.
    return isinstance(status, str) and status in _RECORDED


def write_snapshot(ledger: Ledger, run_id: str, signer: Signer | None = None) -> int | None:
    """Append a snapshot of a finished run (its latest boundary is a ``run.finished``)
    through its latest lifecycle event, unless its newest snapshot is that already.
    Returns the seq it is through (None: nothing written). A run still going (or cut
    off) is not snapshotted: its state is about to change. ``signer``: the batch that
    ran it seals it (reads of a signed run believe no other snapshot)."""
    from evalledger.projections import ResumeFold, SummaryFold

    if signer is None and ledger.run_signed(run_id):
        return None  # reads of a signed run believe only snapshots its batches sealed
    (summary, resume), through = load_folds(ledger, run_id, SummaryFold, ResumeFold)
    assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
    if not resume.finished:
        return None
    newest = latest_snapshot(ledger, run_id, "summary", SUMMARY_VERSION)
    if newest is not None and newest.through_seq == through:
        return None
    events = snapshot_events(run_id, through, summary, resume)
    if signer is None:
        ledger.append(events)
    else:
        rows = [EventRow.of(event) for event in events]
        ledger.append([*rows, signer.seal_snapshots(rows)])
    return through


def snapshot_finished(ledger: Ledger, run_id: str, signer: Signer | None = None) -> None:
    """After a batch: snapshot the run if it recorded run.finished (interrupted
    included), so later reads and the next resume fold only what comes after. An
    optimisation, so a failure is a warning: every read still works by replaying."""
    from evalledger.ledger import LedgerError, LedgerGone

    try:
        ledger.check_file()  # not even the replay for a ledger that is gone
        write_snapshot(ledger, run_id, signer)
    except LedgerGone:
        # What ended the batch (or ends the command next): said once, in one line.
        return
    except (LedgerError, OSError) as e:
        log.warning("run %s: no snapshot written (%s); reads replay its events instead",
                    run_id, e)


# -- run status --------------------------------------------------------------------------------


def status_of(recorded: str, resume: ResumeFold) -> ShownStatus:
    """The run's shown status from its folds: ``recorded`` (``SummaryFold.status``) and
    the host of its latest start or resume (``ResumeFold``), asked of this host's
    processes only when the run is still called running."""
    from evalledger.hosts import run_ended

    return shown_status(recorded, lambda: run_ended(resume.host, resume.finished))


def run_status(ledger: Ledger, run_id: str, recorded: str) -> ShownStatus:
    """The run's shown status when its recorded status is known already (a headline, a
    summary): its boundaries are read only when that says running."""

    def gone() -> bool:
        from evalledger.hosts import run_ended

        _, resume = _boundary_folds(ledger, run_id)
        return run_ended(resume.host, resume.finished)

    return shown_status(recorded, gone)


def _boundary_folds(ledger: Ledger, run_id: str) -> tuple[str, ResumeFold]:
    """The run's recorded status and its resume fold, folded from its boundaries alone
    (a few events however many tasks it ran)."""
    from evalledger.projections import ResumeFold, SummaryFold

    summary, resume = SummaryFold(run_id), ResumeFold(run_id)
    for event in ledger.events(run_id, types=_BOUNDARIES):
        summary.apply(event)
        resume.apply(event)
    return summary.status, resume


def run_is_over(ledger: Ledger, run_id: str) -> bool:
    """Whether no process will add to the run any more: its shown status is not
    ``running`` (it recorded ``run.finished``, or it was cut off)."""
    recorded, resume = _boundary_folds(ledger, run_id)
    return status_of(recorded, resume) is not ShownStatus.RUNNING


@dataclass
class ListedRun:
    """One line of ``runs``: the ``runs`` view's columns (read from the run's headline)
    and its shown status."""

    columns: dict[str, Any]
    shown: ShownStatus
    roles: list[dict[str, Any]]
    """Cost per role (``usage_by_role``), for people; not a column."""

    @property
    def cut_off(self) -> bool:
        return self.shown is ShownStatus.CUT_OFF

    def grader_role(self) -> dict[str, Any] | None:
        return next((r for r in self.roles if r["role"] == "grader"), None)


# The columns of the `runs` SQL view, in its order.
RUN_COLUMNS = ("run_id", "experiment_id", "started_at", "finished_at", "status",
               "tasks_planned", "tasks_succeeded", "tasks_failed", "tasks_error", "cost_usd",
               "tasks_ungraded", "cost_complete", "grader_cost_usd")


def listed_runs(ledger: Ledger, limit: int) -> list[ListedRun]:
    """The newest ``limit`` runs, newest first (``Ledger.run_ids``, reversed), each with
    the ``runs`` view's columns and its shown status."""
    listed = []
    for run_id in ledger.run_ids()[::-1][:limit]:
        head = load_headline(ledger, run_id)
        columns: dict[str, Any] = {c: head.get(c) for c in RUN_COLUMNS}
        columns["cost_usd"] = head["total_cost_usd"]
        run = ListedRun(columns, run_status(ledger, run_id, head["status"]),
                        head.get("usage_by_role") or [])
        grader = run.grader_role()
        columns["grader_cost_usd"] = grader["cost_usd"] if grader else 0.0
        listed.append(run)
    return listed


def recent_runs(ledger: Ledger, last: int, experiment: str | None = None) -> list[str]:
    """The newest ``last`` run ids (of ``experiment`` when given), oldest first."""
    found: list[str] = []
    for run_id in ledger.run_ids()[::-1]:
        if len(found) == last:
            break
        if experiment is None or load_headline(ledger, run_id).get("experiment_id") == experiment:
            found.append(run_id)
    return found[::-1]


def flaky_tasks(ledger: Ledger, run_ids: Sequence[str]) -> list[FlakyTask]:
    """The tasks whose verdict flips across ``run_ids`` (each judged by its default grade
    set) while their definition and model stay the same (``projections.flaky_history``)."""
    from evalledger.ledger._queries import task_definitions
    from evalledger.projections import flaky_history

    return flaky_history((load_summary(ledger, run_id), task_definitions(ledger, run_id))
                         for run_id in run_ids)
