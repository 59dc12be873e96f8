"""Fold machinery: a projection is a table of "this event type changes that state".

A fold subclasses ``Fold`` and marks one small method per event type it reads
with ``@on(EventClass)``. ``apply`` dispatches on the event's type through that
table (a dict lookup, the cheapest dispatch Python has: a rebuild applies
millions of events), and ``TYPES`` is derived from it, so a rebuild asks the
ledger for just those types through the ``(run_id, type, seq)`` index: a summary
of a run with a million ``task.output`` lines never reads one of them. Events of
other types, including types this version does not know, are skipped by
``apply`` too, so feeding a fold everything is also correct, just slower.

Folds import no SQLite and no trio and do no I/O: they fold events, wherever
those come from (the ledger, the executor's writer, a test's list). What a fold
needs from the outside world (is a process alive?) is asked by its caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar

from evalledger.ledger import AnyEvent, EventRow

if TYPE_CHECKING:
    import msgspec

    from evalledger.ledger._lite import LiteEvent

_Handler = Callable[[Any, Any], None]
_H = TypeVar("_H", bound=Callable[..., None])
_MARK = "__folds__"


def on(*event_classes: type[Any]) -> Callable[[_H], _H]:
    """Register the decorated method as the handler of these event classes."""
    types = tuple(cls.model_fields["type"].default for cls in event_classes)

    def mark(handler: _H) -> _H:
        setattr(handler, _MARK, types)
        return handler

    return mark


class Projection(Protocol):
    TYPES: ClassVar[frozenset[str]]

    def apply(self, event: AnyEvent | EventRow | LiteEvent) -> None: ...


class Fold:
    """Base of the folds over one run's events.

    Invariant: ``_handlers`` maps every type in ``TYPES`` to exactly one method;
    a subclass's handler for a type replaces its base's.
    """

    TYPES: ClassVar[frozenset[str]] = frozenset()
    VERSION: ClassVar[int] = 0
    """The version of this fold's meaning and of its ``state()``: bump it with any change
    to either, and snapshots made by older code are ignored (the fold replays)."""
    STATE: ClassVar[type[msgspec.Struct] | None] = None
    """The struct ``state()`` is written and ``restore()`` read through: its fields are the
    snapshot's layout (a test pins each layout to its ``VERSION``)."""
    _handlers: ClassVar[dict[str, _Handler]] = {}

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[str, _Handler] = {}
        for klass in reversed(cls.__mro__):
            for attr in vars(klass).values():
                for type_ in getattr(attr, _MARK, ()):
                    handlers[type_] = attr
        cls._handlers = handlers
        cls.TYPES = frozenset(handlers)

    def state(self) -> dict[str, Any]:
        """Everything this fold knows, as JSON (keys sorted): what a snapshot stores.
        Invariant: ``restore(run_id, state())`` folds every later event as ``self`` would."""
        raise NotImplementedError

    @classmethod
    def restore(cls, run_id: str, state: dict[str, Any]) -> Self:
        """The fold whose ``state()`` this is.

        Raises:
            ValueError: it is not a state of this fold (``msgspec.ValidationError``);
                KeyError for a value a table of the fold does not hold.
        """
        import msgspec

        return cls._restored(run_id, msgspec.convert(state, cls.STATE or dict))

    @classmethod
    def restore_json(cls, run_id: str, text: str | bytes) -> Self:
        """``restore`` from the state's JSON text (what a snapshot stores), decoded
        straight into its typed shape: no dict of a 100,000-task run's state built
        first and converted after.

        Raises:
            ValueError: it is not a state of this fold (``msgspec.DecodeError``);
                KeyError for a value a table of the fold does not hold.
        """
        import msgspec

        return cls._restored(run_id, msgspec.json.decode(text, type=cls.STATE or dict))

    @classmethod
    def _restored(cls, run_id: str, state: Any) -> Self:
        """The fold from its state, decoded and checked as ``STATE``."""
        raise NotImplementedError

    def apply(self, event: AnyEvent | EventRow | LiteEvent) -> None:
        """Fold one event; other runs' events and types this fold does not read are skipped."""
        handler = self._handlers.get(event.type)
        if handler is not None and event.run_id == self.run_id:
            handler(self, event)


P = TypeVar("P", bound=Projection)


def fold(projection: P, events: Iterable[AnyEvent | LiteEvent]) -> P:
    """Apply every event in order; return the projection for chaining."""
    apply = projection.apply
    for event in events:
        apply(event)
    return projection


def types_of(*projections: Projection) -> frozenset[str]:
    """The event types a rebuild of these projections needs to read."""
    return frozenset().union(*(p.TYPES for p in projections))
