"""Rebuilds from the ledger, through snapshots: where the folds meet a ``Ledger``.

The folds stay pure; this module reads rows for them. A rebuild of fold ``F`` loads
the newest ``run.snapshot`` of kind ``F``'s name made by ``F.VERSION`` and folds
only the run's events after its ``through_seq``; with none (an older run, a run cut
off before it finished, a snapshot of another version) it replays from the start.
The fold code is the same either way, so a rebuild through a snapshot equals a
full replay (a property test, and ``verify --deep`` on every stored snapshot).

A snapshot (docs/events.md) is the group of ``run.snapshot`` events one call of
``write_snapshot`` appends, all through the same seq:

- ``summary_fold`` and ``resume_fold``: each fold's ``state()``;
- ``summary``: the ``RunSummary`` (what ``show`` and ``report`` print) and
  ``headline``: its counts alone (what ``runs`` lists). Both are used only while no
  event the summary folds came after them: a finished run's reports are then read,
  not computed.

Each kind is its own event so a reader parses only what it needs: the headline of a
10,000-task run is 600 bytes, its summary 4 MB. Payloads are canonical JSON, so the
fields that pick a snapshot (``fold_version``, ``kind``) are the first bytes of its
payload and are matched as a prefix, without parsing any snapshot that is not used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from evalledger.ledger import EventType

from ._versions import SUMMARY_VERSION

if TYPE_CHECKING:
    from evalledger.ledger import Ledger

    from ._fold import Fold
    from ._results import RunSummary
    from ._resume import ResumeFold
    from ._summary import SummaryFold

F = TypeVar("F", bound="Fold")

# What a headline snapshot must hold to be used (else the run is folded).
HEADLINE_KEYS = frozenset({
    "run_id", "experiment_id", "status", "started_at", "finished_at", "tasks_planned",
    "tasks_run", "tasks_succeeded", "tasks_failed", "tasks_error", "tasks_ungraded",
    "total_cost_usd", "cost_complete"})
# What each fold's state is stored as.
FOLD_KINDS = {"SummaryFold": "summary_fold", "ResumeFold": "resume_fold"}


@dataclass(frozen=True)
class Snapshot:
    """One stored ``run.snapshot``, its value still JSON text."""

    seq: int
    through_seq: int
    value: str


def _prefix(kind: str, version: int) -> str:
    # The canonical payload begins with these fields, in this order (keys sorted).
    return f'{{"fold_version":{version},"kind":"{kind}","through_seq":'


def latest_snapshot(ledger: Ledger, run_id: str, kind: str, version: int,
                    *, until_seq: int | None = None) -> Snapshot | None:
    """The run's newest snapshot of ``kind`` made by fold version ``version``."""
    prefix = _prefix(kind, version)
    row = ledger.latest_row(run_id, EventType.RUN_SNAPSHOT, prefix, until_seq=until_seq)
    if row is None:
        return None
    payload = row.payload
    comma = payload.find(",", len(prefix))
    if comma < 0 or not payload.startswith(',"value":', comma) or not payload.endswith("}"):
        return None  # not the canonical form this reader knows: replay instead
    try:
        through_seq = int(payload[len(prefix):comma])
    except ValueError:
        return None
    seq = row.seq or 0
    if through_seq >= seq:
        # A snapshot is appended after the events it folds: one that claims later events
        # (through_seq 10**9, past the ledger's end) is forged or damaged. Not believed:
        # the run is replayed (verify names it).
        return None
    return Snapshot(seq, through_seq, payload[comma + len(',"value":'):-1])


def load_folds(ledger: Ledger, run_id: str, *classes: type[Fold], snapshots: bool = True,
               until_seq: int | None = None) -> tuple[list[Fold], int]:
    """Each fold of ``classes`` for the run, from its snapshot (if ``snapshots``) and the
    events after it, all in one pass over the ledger; and the seq of the last event
    folded (0: none), what a new snapshot of them is through."""
    folds: list[Fold] = []
    after: list[int] = []
    for cls in classes:
        snap = (latest_snapshot(ledger, run_id, FOLD_KINDS[cls.__name__], cls.VERSION,
                                until_seq=until_seq) if snapshots else None)
        restored = None
        if snap is not None and (until_seq is None or snap.through_seq <= until_seq):
            restored = _restore(cls, run_id, snap.value)
        if restored is not None and snap is not None:
            folds.append(restored)
            after.append(snap.through_seq)
        else:
            folds.append(cls(run_id))
            after.append(0)
    types = frozenset().union(*(cls.TYPES for cls in classes))
    start = min(after, default=0)
    events = ledger.replay(run_id, types=types, after_seq=start, until_seq=until_seq)
    last = max(after, default=0)
    if all(since == start for since in after):  # the common case: one loop, no checks
        applies = [f.apply for f in folds]
        for event in events:
            for apply in applies:
                apply(event)
            last = event.seq or last
        return folds, last
    for event in events:
        seq = event.seq or 0
        for fold, since in zip(folds, after, strict=True):
            if seq > since:
                fold.apply(event)
        last = max(last, seq)
    return folds, last


def _restore(cls: type[F], run_id: str, value: str) -> F | None:
    """The fold restored from a snapshot's value; None when the value does not fit (a
    damaged or forged snapshot: the run is replayed instead, and ``verify --deep``
    names the snapshot)."""
    try:
        return cls.restore(run_id, json.loads(value))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def load_fold(ledger: Ledger, cls: type[F], run_id: str, *, snapshots: bool = True,
              until_seq: int | None = None) -> F:
    """One fold of the run, rebuilt (see ``load_folds``)."""
    (fold,), _ = load_folds(ledger, run_id, cls, snapshots=snapshots, until_seq=until_seq)
    assert isinstance(fold, cls)
    return fold


def _current(ledger: Ledger, run_id: str, kind: str, snapshots: bool) -> Snapshot | None:
    """The run's snapshot of ``kind`` (made by this summary code) if no lifecycle event
    of the run came after it. Imports no fold: what ``runs`` and ``show`` read first."""
    if not snapshots:
        return None
    snap = latest_snapshot(ledger, run_id, kind, SUMMARY_VERSION)
    if snap is None or ledger.last_lifecycle_seq(run_id) > snap.through_seq:
        return None
    return snap


def load_summary(ledger: Ledger, run_id: str, *, snapshots: bool = True) -> RunSummary:
    """The run's summary (without its anchor): a finished run's is read from its
    snapshot, any other is folded."""
    snap = _current(ledger, run_id, "summary", snapshots)
    if snap is not None:
        from ._results import RunSummary

        try:
            return RunSummary.model_validate_json(snap.value)
        except ValueError:  # a damaged snapshot (verify --deep names it): fold instead
            pass
    from ._summary import SummaryFold

    return load_fold(ledger, SummaryFold, run_id, snapshots=snapshots).summary()


def load_headline(ledger: Ledger, run_id: str, *, snapshots: bool = True) -> dict[str, Any]:
    """The run's ``RunHeadline`` as JSON data: a finished run's is read from its
    snapshot without importing a model (what ``runs`` lists, for every run)."""
    snap = _current(ledger, run_id, "headline", snapshots)
    if snap is not None:
        try:
            value = json.loads(snap.value)
        except ValueError:
            value = None
        if isinstance(value, dict) and value.keys() >= HEADLINE_KEYS:
            return value
    from ._summary import SummaryFold

    fold = load_fold(ledger, SummaryFold, run_id, snapshots=snapshots)
    return fold.headline().model_dump(mode="json")


def _kinds(summary: SummaryFold, resume: ResumeFold
           ) -> dict[str, tuple[int, Callable[[], dict[str, Any]]]]:
    """Kind -> (the version of the code that makes it, how it is made from the folds)."""
    version = type(summary).VERSION
    return {
        "summary_fold": (version, summary.state),
        "resume_fold": (type(resume).VERSION, resume.state),
        "summary": (version, lambda: summary.summary().model_dump(mode="json",
                                                                   exclude={"anchor"})),
        "headline": (version, lambda: summary.headline().model_dump(mode="json")),
    }


def snapshot_events(run_id: str, through_seq: int, summary: SummaryFold,
                    resume: ResumeFold) -> list[Any]:
    """The ``run.snapshot`` events of these folds, both through ``through_seq``."""
    from evalledger.ledger import RunSnapshot

    return [RunSnapshot(run_id=run_id, kind=kind, fold_version=version,
                        through_seq=through_seq, value=make())
            for kind, (version, make) in _kinds(summary, resume).items()]


def write_snapshot(ledger: Ledger, run_id: str) -> int | None:
    """Append a snapshot of a finished run (its latest boundary is a ``run.finished``)
    through its latest lifecycle event, unless its newest snapshot is that already.
    Returns the seq it is through (None: nothing written). A run still going (or cut
    off) is not snapshotted: its state is about to change."""
    from ._resume import ResumeFold
    from ._summary import SummaryFold

    (summary, resume), through = load_folds(ledger, run_id, SummaryFold, ResumeFold)
    assert isinstance(summary, SummaryFold) and isinstance(resume, ResumeFold)
    if not resume.finished:
        return None
    newest = latest_snapshot(ledger, run_id, "summary", SUMMARY_VERSION)
    if newest is not None and newest.through_seq == through:
        return None
    ledger.append(snapshot_events(run_id, through, summary, resume))
    return through


@dataclass
class SnapshotCheck:
    """Every snapshot a rebuild of this version would read, compared with a replay of its
    run's events up to its ``through_seq``: a check of derived data for
    ``evalledger.ledger.verify(checks=[...])``, which calls it inside its read transaction.

    The replay reads what rebuilds read (the lifecycle rows, through the covering index,
    partially decoded) and folds each run once, in seq order, stopping at each snapshot's
    ``through_seq``. ``deep`` replays through the full event models instead (every field
    validated), as the Python API's typed events are: slower, and independent of the
    partial decoding that rebuilds use.
    """

    deep: bool = False
    runs: int = 0
    checked: int = 0
    ignored: int = 0
    """Snapshots of another fold version (or an unknown kind): no rebuild uses them."""
    problems: list[str] = field(default_factory=list)

    def __call__(self, ledger: Ledger) -> list[str]:
        """Check every run that has snapshots; one line per problem found."""
        last = ledger.last_seq()
        _, runs = ledger.query(
            "SELECT DISTINCT run_id FROM events WHERE type = ? AND task_key IS NULL",
            [EventType.RUN_SNAPSHOT])
        for (run_id,) in runs:
            if isinstance(run_id, str):  # else stored as a BLOB: verify names the row
                self._check_run(ledger, run_id, last)
        return [f"snapshot: {p}" for p in self.problems]

    def _check_run(self, ledger: Ledger, run_id: str, last: int) -> None:
        from evalledger.ledger import LedgerError

        from ._resume import ResumeFold
        from ._summary import SummaryFold

        heads = sorted(head for row in ledger.rows(run_id, types=[EventType.RUN_SNAPSHOT])
                       if row.task_key is None and (head := _head(row)) is not None)
        if not heads:
            return
        self.runs += 1
        summary, resume = SummaryFold(run_id), ResumeFold(run_id)
        kinds = _kinds(summary, resume)
        read = ledger.events if self.deep else ledger.replay
        replay = read(run_id, types=SummaryFold.TYPES | ResumeFold.TYPES)
        pending: Any = None
        try:
            pending = next(replay, None)
            for through_seq, seq, kind, version, payload in heads:
                if kind not in kinds or kinds[kind][0] != version:
                    self.ignored += 1
                    continue
                where = (f"run {run_id}: the {kind} snapshot at seq {seq} "
                         f"(through seq {through_seq})")
                if through_seq >= seq:  # past the ledger's end too: seq <= last
                    beyond = f": the ledger ends at seq {last}" if through_seq > last else ""
                    self.problems.append(f"{where} claims events that come after it{beyond}")
                    self.checked += 1
                    continue
                while pending is not None and (pending.seq or 0) <= through_seq:
                    summary.apply(pending)
                    resume.apply(pending)
                    pending = next(replay, None)
                stored = self._value(payload, run_id)
                if stored is None or _as_json(kinds[kind][1]()) != stored:
                    self.problems.append(f"{where} differs from a full replay of the run")
                self.checked += 1
        except LedgerError as e:  # an event that does not decode (verify lists it)
            why = str(e).removeprefix(f"{ledger.path}: ").removesuffix("; run `evalledger verify`")
            self.problems.append(f"run {run_id}: its snapshots were not checked: {why}")
        finally:
            close = getattr(replay, "close", None)
            if close is not None:
                close()

    def _value(self, payload: str, run_id: str) -> Any:
        """The snapshot's ``value`` as JSON data; None when the payload is not a snapshot
        (verify names the row)."""
        if self.deep:
            from evalledger.ledger import EventRow, RunSnapshot

            try:
                event = EventRow("-", run_id, None, EventType.RUN_SNAPSHOT, "-",
                                 payload).decode()
            except ValueError:
                return None
            return _as_json(event.value) if isinstance(event, RunSnapshot) else None
        from pydantic_core import from_json

        try:
            data = from_json(payload)
        except ValueError:
            return None
        return data.get("value") if isinstance(data, dict) else None


# The first fields of a snapshot's canonical payload: what orders the snapshots of a run
# without parsing their values (a summary's is megabytes).
_HEAD = re.compile(r'\{"fold_version":(-?\d+),"kind":("(?:[^"\\]|\\.)*"),"through_seq":(-?\d+),')


def _head(row: Any) -> tuple[int, int, str, int, str] | None:
    """``(through_seq, seq, kind, fold_version, payload)`` of a stored snapshot; None when
    the payload is not one (not JSON, fields missing: verify names the row)."""
    payload = row.payload
    if not isinstance(payload, str):
        return None
    match = _HEAD.match(payload)
    try:
        if match is not None:
            version, kind, through = int(match[1]), json.loads(match[2]), int(match[3])
        else:  # not canonical (verify names it): read it whole
            data = json.loads(payload)
            version, kind, through = data["fold_version"], data["kind"], data["through_seq"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (type(version) is int and type(through) is int and isinstance(kind, str)):
        return None
    return through, row.seq or 0, kind, version, payload


def _as_json(value: Any) -> Any:
    """``value`` as JSON data reads back (tuples as lists): what a stored one compares with."""
    from pydantic_core import from_json, to_json  # not for readers: `runs` starts without it

    return from_json(to_json(value))


def check_snapshots(ledger: Ledger, *, deep: bool = False) -> SnapshotCheck:
    """Check every snapshot against a replay of its run (see ``SnapshotCheck``)."""
    check = SnapshotCheck(deep=deep)
    check(ledger)
    return check
