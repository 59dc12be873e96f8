"""Partial decoding for replays: the per-task lifecycle events, only the fields folds read.

A rebuild replays a run's lifecycle events through the folds: for a 10,000-task run
that is 30,000 ``task.started`` / ``task.usage`` / ``task.completed`` rows. Decoding
each into its full pydantic model (every field validated, a ``task.started``'s whole
task definition built into dicts) cost 13 us a row; these msgspec Structs, which
skip what no fold reads, cost 0.7 us (``bench/rebuild.py``; pydantic models of the
same partial fields measured 3.9 us).

A lite event has the attribute names of its model, so a fold cannot tell them apart.
What is skipped: a ``task.started``'s ``definition`` and ``definition_hash``, a
``task.completed``'s ``criteria``, and the check that ``category`` matches
``final_status``. Full validation stays where it matters: ``Ledger.events`` (the
API's typed events) and ``verify``. Run-level events are few and decode in full.

The fields are declared once, in the models (``_events``): each field a struct here
keeps has its model's name, type and default, and a test fails when they differ
(tests/ledger/test_lite.py). A payload of an older shape is upcast first, as for the
full models (``_upcast``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from evalledger.statuses import Category, FailureClass, FinalStatus

from ._rows import EventRow, EventType
from ._upcast import UPCASTERS, upcast

if TYPE_CHECKING:
    from ._events import AnyEvent
    from ._tokens import TokenCounts


class _Lite(msgspec.Struct, kw_only=True, gc=False):
    # The envelope: filled in from the row's columns after the payload is decoded.
    run_id: str = ""
    task_key: str | None = None
    ts: str = ""
    seq: int | None = None
    type: str = ""


class LiteTokens(msgspec.Struct, frozen=True, gc=False):
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class LiteStarted(_Lite, kw_only=True, gc=False):
    attempt: int = 1
    replicate_index: int = 0
    tags: list[str] = []
    task_id: str
    variant_id: str = "default"


class LiteCompleted(_Lite, kw_only=True, gc=False):
    attempt: int = 1
    category: Category
    cost_complete: bool = True
    cost_usd: float | None = None
    duration_seconds: float = 0.0
    environment_info: dict[str, Any] = {}
    error_message: str | None = None
    exit_code: int | None = None
    failure_class: FailureClass | None = None
    final_status: FinalStatus
    grade_pending: bool = False
    imported: dict[str, Any] | None = None
    tokens: LiteTokens = LiteTokens()
    weighted_score: float = 0.0


class LiteUsage(_Lite, kw_only=True, gc=False):
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    call: dict[str, Any] | None = None  # a judge's only: which grade set it paid for
    cost_usd: float | None = None
    estimate: bool = False
    input_tokens: int = 0
    model: str | None = None
    output_tokens: int = 0
    role: str = "agent"

    @property
    def tokens(self) -> TokenCounts:
        from ._tokens import counts_of

        return counts_of(self)


class LiteInterrupted(_Lite, kw_only=True, gc=False):
    reason: str = "interrupted"


LiteEvent = LiteStarted | LiteCompleted | LiteUsage | LiteInterrupted

_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    EventType.TASK_STARTED: msgspec.json.Decoder(LiteStarted),
    EventType.TASK_COMPLETED: msgspec.json.Decoder(LiteCompleted),
    EventType.TASK_USAGE: msgspec.json.Decoder(LiteUsage),
    EventType.TASK_INTERRUPTED: msgspec.json.Decoder(LiteInterrupted),
}


def decode_lite(event_id: str, run_id: str, seq: int, task_key: str | None, type_: str,
                ts: str, payload: object) -> LiteEvent | AnyEvent:
    """A stored event as a lite event when its type has one, else as its full model.

    Raises:
        ValueError: the payload is not JSON, or does not fit (msgspec's
            ``ValidationError`` and pydantic's are both ``ValueError``s).
    """
    decoder = _DECODERS.get(type_)
    if decoder is None:
        return EventRow(event_id, run_id, task_key, type_, ts, payload, seq).decode()  # type: ignore[arg-type]
    if not isinstance(payload, str):
        raise ValueError(f"payload is stored as {type(payload).__name__}, not JSON text")
    if type_ in UPCASTERS:  # an old shape is read as the current one (_upcast)
        payload = upcast(type_, payload)
    event = decoder.decode(payload)
    event.run_id, event.task_key, event.type, event.ts, event.seq = (
        run_id, task_key, type_, ts, seq)
    return event  # type: ignore[no-any-return]
