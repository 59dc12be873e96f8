"""The lite structs (``_lite``, what rebuilds decode) against the event models they stand
for: every field a struct keeps has its model's name, type and default, nested objects
included. The models are the one declaration; a struct that drifts from its model
fails here."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec
import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from evalledger.ledger import EVENT_TYPES, EventRow, EventType, TaskCompleted, TaskUsage
from evalledger.ledger._events import ENVELOPE_FIELDS
from evalledger.ledger._lite import _DECODERS, LiteCompleted, LiteTokens, decode_lite
from evalledger.statuses import FinalStatus

REQUIRED = "required"


def _lite_structs() -> dict[str, type[msgspec.Struct]]:
    return {type_: decoder.type for type_, decoder in _DECODERS.items()}


def _shape(annotation: Any) -> Any:
    """A type, spelled the same whichever side declared it: Annotated metadata (pydantic's
    constraints and validators) dropped, unions as sets, nested objects apart."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _shape(args[0])
    if origin in (Union, types.UnionType):
        return frozenset(_shape(a) for a in args)
    if origin is not None:
        return (origin, tuple(_shape(a) for a in args))
    return annotation


def _nested(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel | msgspec.Struct)


def _lite_default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default is not msgspec.NODEFAULT:
        value = field.default
    elif field.default_factory is not msgspec.NODEFAULT:
        value = field.default_factory()
    else:
        return REQUIRED
    return msgspec.to_builtins(value)


def _model_default(model: type[BaseModel], name: str) -> Any:
    field = model.model_fields[name]
    if field.default is PydanticUndefined and field.default_factory is None:
        return REQUIRED
    value = field.get_default(call_default_factory=True)
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def disagreements(lite: type[msgspec.Struct], model: type[BaseModel], where: str = ""
                  ) -> list[str]:
    """Where ``lite`` and ``model`` differ, one line each (none: they agree)."""
    found = []
    where = where or lite.__name__
    for field in msgspec.structs.fields(lite):
        name = field.name
        if name in ENVELOPE_FIELDS:
            continue
        if name not in model.model_fields:
            found.append(f"{where}.{name}: {model.__name__} has no such field")
            continue
        theirs = model.model_fields[name].annotation
        if _nested(field.type) and _nested(theirs):
            found += disagreements(field.type, theirs, f"{where}.{name}")
        elif _shape(field.type) != _shape(theirs):
            found.append(f"{where}.{name}: {field.type} here, {theirs} in {model.__name__}")
        ours, wanted = _lite_default(field), _model_default(model, name)
        if isinstance(ours, dict) and isinstance(wanted, dict):  # a nested object: its kept fields
            wanted = {k: v for k, v in wanted.items() if k in ours}
        if ours != wanted:
            found.append(f"{where}.{name}: default {ours!r} here, {wanted!r} in "
                         f"{model.__name__}")
    return found


@pytest.mark.parametrize("type_", sorted(_DECODERS))
def test_every_lite_struct_agrees_with_its_event_model(type_: str) -> None:
    assert not disagreements(_lite_structs()[type_], EVENT_TYPES[type_])


class Drifted(msgspec.Struct, kw_only=True):
    attempt: int = 2
    task_ids: str
    replicate_index: str = "0"
    tokens: LiteTokens = LiteTokens()


class NestedDrift(msgspec.Struct, frozen=True):
    input_tokens: float = 0


class DriftedTokens(msgspec.Struct, kw_only=True):
    tokens: NestedDrift = NestedDrift()


def test_a_struct_that_drifts_from_its_model_is_named() -> None:
    """The check above can fail: a renamed field, a changed type, a changed default."""
    assert disagreements(Drifted, TaskCompleted) == [
        "Drifted.attempt: default 2 here, 1 in TaskCompleted",
        "Drifted.task_ids: TaskCompleted has no such field",
        "Drifted.replicate_index: TaskCompleted has no such field",
    ]
    assert disagreements(DriftedTokens, TaskCompleted) == [
        "DriftedTokens.tokens.input_tokens: <class 'float'> here, <class 'int'> in TokenCounts",
    ]
    assert disagreements(LiteCompleted, TaskUsage)  # a struct checked against another model


def test_a_lite_event_holds_what_its_full_model_holds() -> None:
    """Beyond declarations: one stored completion, decoded both ways, field by field."""
    row = EventRow("e1", "r", "default/t/00", EventType.TASK_COMPLETED, "2026-01-01T00:00:00Z",
                   TaskCompleted(run_id="r", task_key="default/t/00", attempt=2,
                                 final_status=FinalStatus.TIMEOUT, category="failed",
                                 cost_usd=0.5, environment_info={"python": "3.11"},
                                 error_message="timed out after 20s", exit_code=-9,
                                 duration_seconds=20.5).model_dump_json(
                       exclude=set(ENVELOPE_FIELDS)), 7)
    full, lite = row.decode(), decode_lite(*row[:2], 7, *row[2:6])
    assert isinstance(lite, LiteCompleted)
    for field in msgspec.structs.fields(LiteCompleted):
        ours, theirs = getattr(lite, field.name), getattr(full, field.name)
        if isinstance(theirs, BaseModel):
            assert msgspec.to_builtins(ours) == theirs.model_dump(mode="json"), field.name
        else:
            assert ours == theirs, field.name
