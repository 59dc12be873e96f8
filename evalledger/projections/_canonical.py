"""A large value's canonical JSON written in pieces, never whole.

Canonical JSON here is what a snapshot stores: msgspec's encoding with the keys of
every object sorted, no spaces. A run's summary and its fold's state are each one
object holding a list with an item per task key; ``spliced`` writes the object around
the list once and each item as it comes, so a reader comparing them with a stored one
(``verify``) holds one item at a time, not the 44 MB of a 100,000-task run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

_encode = msgspec.json.Encoder(order="sorted").encode
# Stands for the list while the object around it is written; found again as its JSON.
_MARK = "\x00evalledger:items\x00"
_MARK_JSON = _encode(_MARK)


def spliced(build: Callable[[list[Any]], Any], items: Iterable[Any]) -> Iterator[bytes]:
    """The canonical JSON of ``build(list(items))``, in pieces whose concatenation is
    exactly ``msgspec.json.encode(build(list(items)), order="sorted")``.

    ``build`` makes the object around the list from a list (it is called with a
    one-item stand-in first). Should the stand-in's JSON occur in the object other
    than where the list is (a value holding that very text), the object is written
    whole instead: slower, never different."""
    around = _encode(build([_MARK]))
    at = around.find(_MARK_JSON)
    if at < 0 or around.find(_MARK_JSON, at + 1) >= 0:
        yield _encode(build(list(items)))
        return
    yield around[:at]
    first = True
    for item in items:
        if not first:
            yield b","
        first = False
        yield _encode(item)
    yield around[at + len(_MARK_JSON):]
