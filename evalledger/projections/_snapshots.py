"""What a snapshot of a run holds, made from its folds: pure, no reading, no writing.

A snapshot (docs/events.md) is the group of ``run.snapshot`` events made from a run's
folds through one seq:

- ``summary_fold`` and ``resume_fold``: each fold's ``state()``;
- ``summary``: the ``RunSummary`` (what ``show`` and ``report`` print) and
  ``headline``: its counts alone (what ``runs`` lists). Both are used only while no
  event the summary folds came after them: a finished run's reports are then read,
  not computed.

Each kind is its own event so a reader parses only what it needs: the headline of a
10,000-task run is 600 bytes, its summary 4 MB. Reading and appending them is the
application's read side (``evalledger.app._repository``); finding one by kind and
version is a ledger query (``evalledger.ledger._queries.latest_snapshot``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from evalledger._gc import collector_paused

if TYPE_CHECKING:
    from evalledger.ledger import RunSnapshot

    from ._fold import Fold
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


def restore_fold(cls: type[F], run_id: str, value: str | bytes) -> F | None:
    """The fold restored from a snapshot's value; None when the value does not fit (a
    damaged or forged snapshot: the run is replayed instead, and ``verify --deep``
    names the snapshot)."""
    try:
        with collector_paused():  # a 100,000-task state is a million objects: evalledger._gc
            return cls.restore_json(run_id, value)
    # DecodeError is a ValueError; RecursionError: a forged value nested a million deep.
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return None


class SnapshotKind(NamedTuple):
    """One kind of snapshot as the code of this version makes it."""

    version: int
    make: Callable[[], dict[str, Any]]
    """Its value."""
    written: Callable[[], Iterable[bytes]]
    """The canonical JSON of ``make()`` (keys sorted, no spaces), in pieces: for the
    large kinds a task key at a time, so a check never holds it whole."""
    fold: Fold
    """The fold it is made from."""


def snapshot_kinds(summary: SummaryFold, resume: ResumeFold) -> dict[str, SnapshotKind]:
    """Kind -> how the code of this version makes it from the folds."""
    version = type(summary).VERSION

    def whole(make: Callable[[], dict[str, Any]]) -> Callable[[], Iterable[bytes]]:
        def written() -> Iterator[bytes]:
            yield canonical(make())  # when read, as the pieces of the large kinds are

        return written

    def summary_value() -> dict[str, Any]:
        return summary.summary().model_dump(mode="json", exclude={"anchor"})

    def headline() -> dict[str, Any]:
        return summary.headline().model_dump(mode="json")

    return {
        "summary_fold": SnapshotKind(version, summary.state, summary.state_json, summary),
        "resume_fold": SnapshotKind(type(resume).VERSION, resume.state, whole(resume.state),
                                    resume),
        "summary": SnapshotKind(version, summary_value,
                                lambda: summary.summary_json(exclude=frozenset({"anchor"})),
                                summary),
        "headline": SnapshotKind(version, headline, whole(headline), summary),
    }


def canonical(value: Any) -> bytes:
    """``value``'s canonical JSON: keys sorted at every level, no spaces (msgspec's)."""
    import msgspec

    return msgspec.json.encode(value, order="sorted")


def snapshot_events(run_id: str, through_seq: int, summary: SummaryFold,
                    resume: ResumeFold) -> list[RunSnapshot]:
    """The ``run.snapshot`` events of these folds, both through ``through_seq``."""
    from evalledger.ledger import RunSnapshot
    from evalledger.ledger._packed import pack

    return [RunSnapshot(run_id=run_id, kind=kind, fold_version=made.version,
                        through_seq=through_seq, value=pack(made.make()))
            for kind, made in snapshot_kinds(summary, resume).items()]


def as_json(value: Any) -> Any:
    """``value`` as JSON data reads back (tuples as lists): what a stored one compares with."""
    from pydantic_core import from_json, to_json  # not for readers: `runs` starts without it

    return from_json(to_json(value))
