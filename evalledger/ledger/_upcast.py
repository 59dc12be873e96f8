"""Old payload shapes, brought to the current shape as they are read.

A stored payload is never rewritten: its text is what the hash chain covers. When a
payload field changes in a way its default cannot absorb (renamed, retyped, split in
two), the change registers an *upcaster* here, as eventsourcing upcasts an old
``class_version``: a function from a payload of the old shape (a dict) to one of the
current shape, and a marker, text that every old payload holds and no current one
does, such as the old key (``'"duration":'``). Both decoders pass a payload of a type
with upcasters through ``upcast`` before validating it (``decode_row``, the full
models; ``decode_lite``, the partial decoding rebuilds use), so every reader
(projections, ``verify``, the Python API) sees one shape.

Invariants:
- an upcaster returns a payload already of the current shape unchanged. The marker is
  a cheap test on the text: it can also match inside a nested object, so the function
  checks the top-level dict itself;
- upcasters of a type apply in the order they were registered (oldest shape first),
  each to the payload as the previous one left it;
- a payload without any marker of its type is never parsed here: current rows pay one
  dict lookup on their type.

What needs none: a field added with a default that says what older payloads meant
(``task.usage.role``, absent means ``agent``). Today no type has an upcaster (the docs
say which exist: docs/events.md, "Old payload shapes"). The SQL views read stored
payloads as they are: a renamed field must be read there under both names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Payload = dict[str, Any]


@dataclass(frozen=True)
class Upcaster:
    """One step from an old payload shape of one event type towards the current one."""

    marker: str
    """Text every payload of the old shape holds (canonical JSON: a key is spelled one
    way, ``'"old_name":'``) and no payload of the current shape does at its top level."""
    upcast: Callable[[Payload], Payload]


UPCASTERS: dict[str, list[Upcaster]] = {}
"""Event type -> its upcasters, oldest shape first. Read on every decode: register at
import time (here), not later."""


def upcaster(type_: str, marker: str) -> Callable[[Callable[[Payload], Payload]],
                                                   Callable[[Payload], Payload]]:
    """Register the decorated function as an upcaster of ``type_``'s payloads that hold
    ``marker``."""

    def register(upcast: Callable[[Payload], Payload]) -> Callable[[Payload], Payload]:
        UPCASTERS.setdefault(type_, []).append(Upcaster(marker, upcast))
        return upcast

    return register


def upcast(type_: str, payload: str) -> str:
    """``payload`` (stored text of an event of ``type_``) in the current shape: as it is
    when no upcaster's marker is in it, else parsed, upcast and written back as JSON.

    A payload that is not a JSON object is returned as it is: the decoder names it.
    """
    for step in UPCASTERS.get(type_, ()):
        if step.marker not in payload:
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            return payload
        if not isinstance(data, dict):
            return payload
        payload = json.dumps(step.upcast(data), ensure_ascii=False, separators=(",", ":"),
                             sort_keys=True, allow_nan=False)
    return payload
