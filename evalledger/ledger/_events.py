"""Events: one frozen pydantic model per fact, past tense, tagged by ``type``.

An event is an envelope (``event_id``, ``run_id``, ``task_key``, ``type``, ``ts``,
and ``seq`` once stored) plus a payload: every other field of its model. The
ledger stores the envelope in columns and the payload as canonical JSON (sorted
keys, no whitespace), so the text that is hashed is the text that is stored.

Invariant: every type this version knows is a member of ``Event``, the
discriminated union, and ``EVENT_ADAPTER`` validates them all. A row whose type is
not known (written by a newer evalledger) is read back as an ``OpaqueEvent``:
kept, replayed, skipped by projections, never an error.

Event ids are time-ordered, UUIDv7-style: the ``event_id`` UNIQUE index then
grows at its right edge. With random UUID4 ids every insert lands on a random
B-tree page, which measured 3-4x slower for batched appends.
"""

from __future__ import annotations

import json
import threading
import time
from random import getrandbits as _random_bits
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)
from pydantic_core import to_json

from evalledger.options import RunOptions
from evalledger.statuses import Category, FinalStatus, RunStatus

from ._rows import EventRow, EventType
from ._tokens import TokenCounts, counts_of

ENVELOPE_FIELDS = frozenset({"seq", "event_id", "run_id", "task_key", "type", "ts"})


_id_lock = threading.Lock()
# Invariant: _prefix is the text of _last_ms ("tttttttt-tttt-7"), kept with it so
# that the common case (many ids in one millisecond) formats only the tail.
_last_ms = 0
_prefix = ""
_counter = 0


def _set_ms(ms: int) -> None:
    global _last_ms, _prefix
    h = f"{ms:012x}"
    _last_ms, _prefix = ms, f"{h[:8]}-{h[8:]}-7"


def _step() -> None:
    """Move to the next id's millisecond and counter. Call it holding ``_id_lock``."""
    global _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _set_ms(ms)
        _counter = _random_bits(8)  # a random start, with room to count up
    else:
        _counter += 1
        if _counter > 0xFFF:
            _set_ms(_last_ms + 1)
            _counter = 0


def new_event_id() -> str:
    """A UUIDv7 (RFC 9562) string: 48 bits of Unix milliseconds, then randomness.

    Within one process ids are strictly increasing: ``rand_a`` (12 bits) serves as a
    counter inside a millisecond, so a burst of appends still hits the index's
    right edge.
    """
    with _id_lock:
        _step()
        prefix, counter = _prefix, _counter
    # Uniqueness, not secrecy, is what an event id needs: the PRNG (seeded from the
    # OS, re-seeded in forked children) is 10x cheaper than os.urandom per id.
    tail = _random_bits(62)
    # %-formatting: measured a third faster than the f-string here (the hot path).
    return "%s%03x-%04x-%012x" % (prefix, counter, 0x8000 | tail >> 48, tail & 0xFFFF_FFFF_FFFF)  # noqa: UP031


def new_event_ids(count: int) -> list[str]:
    """``count`` ids for one read's worth of events, as ``new_event_id`` would give them,
    for the price of one: one lock, one clock read, one random tail shared by all (the
    counter in ``rand_a`` tells them apart; the tail tells processes apart)."""
    global _counter
    if count <= 0:
        return []
    ids: list[str] = []
    with _id_lock:
        _step()
        tail = _random_bits(62)
        rest = "-%04x-%012x" % (0x8000 | tail >> 48, tail & 0xFFFF_FFFF_FFFF)  # noqa: UP031
        while True:
            take = min(0x1000 - _counter, count - len(ids))
            prefix = _prefix
            ids += [f"{prefix}{c:03x}{rest}" for c in range(_counter, _counter + take)]
            _counter += take - 1
            if len(ids) == count:
                return ids
            _set_ms(_last_ms + 1)
            _counter = 0


# The formatted second, kept while it is current: strftime per event was 3.4 us, a
# few percent of a short task's cost in the executor.
_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Now as ISO-8601 UTC with microseconds and a ``Z``: sorts as text."""
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    second, prefix = _second
    if seconds != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, prefix)
    return f"{prefix}.{nanos // 1000:06d}Z"


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _canonical_object(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    # From JSON means from the ledger, where payloads are stored canonical already:
    # sorting again is wasted work on every replay.
    return value if info.mode == "json" else _canonical(value)


# A free-form JSON object, its keys sorted at every level when the event is built.
# With the payload fields of every model declared in alphabetical order, this makes
# pydantic's own JSON serialiser emit canonical JSON directly: the append path
# never re-sorts (that cost ~2.5 us an event; the whole insert costs ~5 us).
JsonObject = Annotated[dict[str, Any], AfterValidator(_canonical_object)]

def _absent(value: object) -> bool:
    return value is None


def _false(value: object) -> bool:
    return value is False


def _agent(value: object) -> bool:
    return value == "agent"


# Where an event came from when it was not recorded by a run but imported (from the
# old harness's run folders): left out of the payload when None, as every native event
# has it.
Imported = Annotated[JsonObject | None, Field(exclude_if=_absent)]

# Envelope text goes into the hash chain "\n"-framed (see _chain), so no newlines.
_Line = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\n\r]*$")]


class _Event(BaseModel):
    """The envelope every event shares.

    Invariant (tested): payload fields, the ones after the envelope, are declared
    in alphabetical order in every subclass and every nested model.
    """

    # No inf or NaN: canonical JSON has no spelling for them (they would be stored
    # as null, and a live fold would disagree with the rebuild).
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    event_id: _Line = Field(default_factory=new_event_id)
    run_id: _Line
    task_key: _Line | None = None
    ts: _Line = Field(default_factory=utc_now)
    # Assigned by the ledger on append; None on an event that was never stored.
    seq: int | None = None


class _TaskEvent(_Event):
    task_key: _Line  # narrowed: task events always have one




class CriterionResult(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    detail: str = ""
    passed: bool
    type: str
    weight: float = 1.0


class Fingerprint(BaseModel):
    """What drift is measured against: run-level options and one hash per task key."""

    model_config = ConfigDict(frozen=True)

    options: JsonObject = {}
    tasks: JsonObject = {}


class RunStarted(_Event):
    type: Literal[EventType.RUN_STARTED] = EventType.RUN_STARTED
    # The batch's random token (every attempt's EVALLEDGER_ATTEMPT starts with it) and
    # its sandbox folder: what a later run cleans up if this batch's process died.
    batch_token: str | None = None
    config: RunOptions = RunOptions()
    experiment_id: str | None = None
    fingerprint: Fingerprint = Fingerprint()
    host: JsonObject = {}
    imported: Imported = None
    # The ledger's own id (meta.ledger_id) when the run started: verify compares them.
    ledger_id: str | None = None
    max_parallel: int = 1
    planned: list[str] = []
    sandbox_root: str | None = None
    unpriced_models: list[str] = []


class RunResumed(_Event):
    type: Literal[EventType.RUN_RESUMED] = EventType.RUN_RESUMED
    # Keys defined since the run began: they join it with this resume.
    added: list[str] = []
    batch_token: str | None = None
    drift: JsonObject = {}
    fingerprint: Fingerprint = Fingerprint()
    host: JsonObject = {}
    max_parallel: int = 1
    # Which finished keys were asked to run again: --rerun patterns, --rerun-failed
    # (the failed category), --retry-errors (the error category).
    rerun: list[str] = []
    rerun_failed: bool = False
    retry_errors: bool = False
    sandbox_root: str | None = None
    to_run: list[str] = []


class TaskSkipped(_Event):
    type: Literal[EventType.TASK_SKIPPED] = EventType.TASK_SKIPPED
    # True when the file says `skip: true`: left out on purpose, not broken.
    deliberate: bool = False
    path: str
    reason: str


class TaskStarted(_TaskEvent):
    type: Literal[EventType.TASK_STARTED] = EventType.TASK_STARTED
    attempt: int = 1
    definition: JsonObject = {}
    definition_hash: str = ""
    imported: Imported = None
    replicate_index: int = 0
    tags: list[str] = []
    task_id: str
    variant_id: str = "default"


_new_tuple = tuple.__new__

# The same escaping pydantic-core applies (ensure_ascii off); tested equal.
_json_string = json.encoder.encode_basestring


class TaskOutput(_TaskEvent):
    """One line a command printed. The one type whose payload leaves out fields equal to
    their default (``stream`` stdout, ``truncated`` false): it is nearly every row of a
    ledger, and those two were half of its payload."""

    type: Literal[EventType.TASK_OUTPUT] = EventType.TASK_OUTPUT
    line: str
    n: int
    stream: Literal["stdout", "stderr"] = "stdout"
    truncated: bool = False

    @staticmethod
    def encoded(
        run_id: str, task_key: str, ts: str, stream: str, line: str, n: int, truncated: bool,
        event_id: str | None = None,
    ) -> EventRow:
        """This event in stored form, without building the model (the hot path)."""
        payload = f'{{"line":{_json_string(line)},"n":{n}'
        if stream != "stdout":
            payload += f',"stream":"{stream}"'
        payload += ',"truncated":true}' if truncated else "}"
        # tuple.__new__ skips the NamedTuple's Python-level __new__: half the cost.
        return _new_tuple(EventRow, (event_id or new_event_id(), run_id, task_key,
                                     EventType.TASK_OUTPUT, ts, payload, None, None))


class TaskEmitted(_TaskEvent):
    """A JSON object line the command printed, kept whole (``type: task.event``)."""

    type: Literal[EventType.TASK_EVENT] = EventType.TASK_EVENT
    data: JsonObject
    n: int


class TaskUsage(_TaskEvent):
    type: Literal[EventType.TASK_USAGE] = EventType.TASK_USAGE
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # None means "not priced": the model had no rate. Never booked as zero.
    cost_usd: float | None = None
    # True: the agent reported no total for this spend (a claude-code attempt ended
    # before its result line), so it is summed from its messages and priced from the
    # rate card. Left out of the payload when false, as every usage before it was.
    estimate: Annotated[bool, Field(exclude_if=_false)] = False
    input_tokens: int = 0
    model: str | None = None
    output_tokens: int = 0
    # Whose spend it is: "agent" (the task's own command), "grader" (what grading it
    # cost: a judge, an evaluator; the old harness's judge and simulator spend on
    # import). Text, not a closed set: a role a newer writer adds is summed under its
    # name, never refused. Left out of the payload when "agent", as every usage before
    # it was.
    role: Annotated[_Line, Field(exclude_if=_agent)] = "agent"

    @property
    def tokens(self) -> TokenCounts:
        return counts_of(self)


class TaskCompleted(_TaskEvent):
    type: Literal[EventType.TASK_COMPLETED] = EventType.TASK_COMPLETED
    attempt: int = 1
    category: Category
    cost_complete: bool = True
    cost_usd: float | None = None
    criteria: list[CriterionResult] = []
    duration_seconds: float = 0.0
    environment_info: JsonObject = {}
    error_message: str | None = None
    exit_code: int | None = None
    final_status: FinalStatus
    imported: Imported = None
    tokens: TokenCounts = TokenCounts()
    weighted_score: float = 0.0

    @model_validator(mode="after")
    def _category_matches_status(self) -> TaskCompleted:
        if self.category != self.final_status.category:
            raise ValueError(
                f"category {self.category} does not match final_status {self.final_status}"
            )
        return self


class TaskInterrupted(_TaskEvent):
    type: Literal[EventType.TASK_INTERRUPTED] = EventType.TASK_INTERRUPTED
    reason: str = "interrupted"


class RunFinished(_Event):
    type: Literal[EventType.RUN_FINISHED] = EventType.RUN_FINISHED
    status: RunStatus


class RunSnapshot(_Event):
    """A projection of the run through ``through_seq``, so a rebuild folds only what
    came after (docs/events.md). ``kind`` names what ``value`` holds and
    ``fold_version`` the version of the code that made it: a rebuild uses a snapshot
    only when that version is its own, and ``verify --deep`` checks each against a
    full replay. Derived data: deleting every snapshot loses nothing."""

    type: Literal[EventType.RUN_SNAPSHOT] = EventType.RUN_SNAPSHOT
    fold_version: int
    kind: _Line
    through_seq: int
    value: JsonObject


class RunMerged(_Event):
    """Events of this run came from somewhere else (``merge``, ``import-events``): which
    ledger or file, which of its seqs, how many were new here."""

    type: Literal[EventType.RUN_MERGED] = EventType.RUN_MERGED
    events: int
    source: str
    source_ledger: str | None = None
    source_seqs: list[int] = []


class OpaqueEvent(_Event):
    """An event of a type this version does not know: kept whole, skipped by projections."""

    type: _Line
    payload: JsonObject = {}


Event = Annotated[
    RunStarted
    | RunResumed
    | TaskSkipped
    | TaskStarted
    | TaskOutput
    | TaskEmitted
    | TaskUsage
    | TaskCompleted
    | TaskInterrupted
    | RunFinished
    | RunSnapshot
    | RunMerged,
    Field(discriminator="type"),
]
AnyEvent = Event | OpaqueEvent

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

EVENT_TYPES: dict[str, type[_Event]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        RunStarted, RunResumed, TaskSkipped, TaskStarted, TaskOutput, TaskEmitted,
        TaskUsage, TaskCompleted, TaskInterrupted, RunFinished, RunSnapshot, RunMerged,
    )
}

# A dict, not a set: pydantic-core converts a set on every call (measured 2x slower).
_EXCLUDE_ENVELOPE = dict.fromkeys(ENVELOPE_FIELDS, True)


def encode_payload(event: AnyEvent | EventRow) -> str:
    """The canonical payload text: every non-envelope field, keys sorted, no spaces."""
    if isinstance(event, EventRow):
        return event.payload
    if isinstance(event, OpaqueEvent):
        return to_json(event.payload).decode()
    return event.__pydantic_serializer__.to_json(
        event, exclude=_EXCLUDE_ENVELOPE, exclude_defaults=type(event) is TaskOutput).decode()


_str = json.JSONEncoder(ensure_ascii=False).encode


def decode_row(row: EventRow) -> AnyEvent:
    """Turn a stored row back into a typed event.

    The envelope columns are spliced in front of the payload object so pydantic
    validates one JSON document in one pass (``validate_json`` is faster than
    ``json.loads`` followed by a model).

    Raises:
        pydantic.ValidationError: the payload does not fit its type's model.
        ValueError: the payload is not JSON text at all.
    """
    event_id, run_id, task_key, type_, ts, payload, seq, _ = row
    seq = seq or 0
    if not isinstance(payload, str):
        # Only a hand edit can store a non-text payload (a BLOB, a number).
        raise ValueError(f"payload is stored as {type(payload).__name__}, not JSON text")
    if type_ not in EVENT_TYPES:
        return OpaqueEvent(
            seq=seq, event_id=event_id, run_id=run_id, task_key=task_key, type=type_, ts=ts,
            payload=json.loads(payload),
        )
    head = (
        f'{{"seq":{seq},"event_id":{_str(event_id)},"run_id":{_str(run_id)},'
        f'"task_key":{_str(task_key)},"type":{_str(type_)},"ts":{_str(ts)}'
    )
    body = payload.strip()
    text = head + "}" if body == "{}" else head + "," + body[1:]
    return EVENT_ADAPTER.validate_json(text)
