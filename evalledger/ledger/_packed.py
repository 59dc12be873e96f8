"""Large derived values stored compressed inside canonical JSON.

A ``run.snapshot``'s value is the largest payload a ledger holds (a 500-task run's
summary is 217 KB, a 100,000-task run's 44 MB), and it is derived data: no view reads
it (``evalledger_unpack`` in SQL does, for whoever asks). Stored as the string
``zstd:`` + base64 of a zstd frame of the value's JSON, it is 3 to 58 times smaller,
and the payload is still one canonical JSON object: the hash chain covers it as it is
(``export`` and ``merge`` leave snapshots out: a destination makes its own), and the
fields before it (``fold_version``, ``kind``, ``through_seq``) are still read as a
prefix.

Small values stay plain (a headline: ``runs`` reads one per run, and a frame of a few
hundred bytes saves nothing). Readers take either form.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

PREFIX = "zstd:"
# The pattern a packed value's string matches (checked on decode: a string of any
# other shape is not a snapshot's value).
PATTERN = r"^zstd:[A-Za-z0-9+/]*={0,2}$"
# Below this many bytes of JSON a value is stored plain.
PACK_FROM = 4096
# A frame's declared size is believed only up to this, and only up to _MAX_RATIO times
# the frame: a forged row must not make a reader allocate what it claims. Real values:
# a 100,000-task summary is 44 MB, 58 times its frame (the most measured).
_MAX_SIZE = 1 << 30
_MAX_RATIO = 1024


class PackedError(ValueError):
    """A packed value that does not unpack (damaged or forged: verify names the row)."""


def pack(value: dict[str, Any]) -> dict[str, Any] | str:
    """``value`` as a snapshot stores it: itself when small, else packed."""
    import msgspec

    text = msgspec.json.encode(value, order="sorted")
    if len(text) < PACK_FROM:
        return value
    import zstandard

    frame = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(text)
    return PREFIX + base64.b64encode(frame).decode("ascii")


def is_packed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def unpack(packed: str | bytes) -> bytes:
    """The value's JSON text (UTF-8) from its packed string (with or without the JSON
    quotes around it, as cut out of a payload).

    Raises:
        PackedError: not base64 of a zstd frame, or a frame that does not decompress.
    """
    if isinstance(packed, str):
        packed = packed.encode("ascii", "replace")
    quoted = packed[:1] == b'"'
    if quoted != (packed[-1:] == b'"' and len(packed) > 1):
        raise PackedError("not a packed value")  # one quote, not a pair
    body = packed[1:-1] if quoted else packed
    if not body.startswith(PREFIX.encode()):
        raise PackedError("not a packed value")
    import zstandard

    try:
        frame = base64.b64decode(body[len(PREFIX):], validate=True)
        size = zstandard.frame_content_size(frame)
        if not 0 <= size <= min(_MAX_SIZE, _MAX_RATIO * len(frame)):
            raise PackedError("a packed value's frame does not declare a plausible size")
        # One frame and nothing after it: decompress() would ignore a second frame,
        # which a reader following the format (`zstd -d`) would append to the value.
        reader = zstandard.ZstdDecompressor().decompressobj()
        text = reader.decompress(frame)
    except (binascii.Error, zstandard.ZstdError) as e:
        raise PackedError(f"a packed value does not unpack: {e}") from e
    if not reader.eof or reader.unused_data or len(text) != size:
        raise PackedError("a packed value is not one whole frame of its declared size")
    return text


def sql_unpack(value: str | bytes | int | float | None) -> str | bytes | int | float | None:
    """``evalledger_unpack(x)`` in SQL (every connection a ``Ledger`` opens: ``evalledger
    sql``, the viewer, the Python API): a packed value's JSON text; any other value as it
    is; NULL for a packed value that does not unpack. So ``evalledger_unpack(
    json_extract(payload, '$.value'))`` reads any snapshot's value."""
    if not isinstance(value, str) or not is_packed(value):
        return value
    try:
        return unpack(value).decode()
    except (PackedError, UnicodeDecodeError):
        return None
