"""Fold machinery: a projection is a small class with ``apply(event)``.

Each projection declares the event types it reads (``TYPES``), so a rebuild asks
the ledger for just those, through the ``(run_id, type, seq)`` index: a summary
of a run with a million ``task.output`` lines never reads one of them. Events of
other types, including types this version does not know, are skipped by
``apply`` too, so feeding a projection everything is also correct, just slower.

Projections import no SQLite and no trio: they fold events, wherever those come
from (the ledger, the executor's writer, a test's list).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from evalledger.ledger import AnyEvent


class Projection(Protocol):
    TYPES: frozenset[str]

    def apply(self, event: AnyEvent) -> None: ...


P = TypeVar("P", bound=Projection)


def fold(projection: P, events: Iterable[AnyEvent]) -> P:
    """Apply every event in order; return the projection for chaining."""
    for event in events:
        projection.apply(event)
    return projection


def types_of(*projections: Projection) -> frozenset[str]:
    """The event types a rebuild of these projections needs to read."""
    return frozenset().union(*(p.TYPES for p in projections))
