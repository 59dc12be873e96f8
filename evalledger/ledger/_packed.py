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
from collections.abc import Iterator
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

    frame, size = _frame(packed)
    return whole_frame(frame, size, "a packed value", "unpack", PackedError)


def whole_frame(frame: bytes, size: int, what: str, verb: str,
                error: type[ValueError]) -> bytes:
    """What one zstd ``frame`` of declared ``size`` (checked plausible by the caller)
    holds, decompressed at once, into one buffer of that size (pieces joined would hold
    it twice); nothing may follow the frame.

    Raises:
        error: ``{what} does not {verb}: ...``, or ``{what} is not one whole frame of its
            declared size``.
    """
    import zstandard

    reader = zstandard.ZstdDecompressor().decompressobj()
    try:
        text = reader.decompress(frame)
    except zstandard.ZstdError as e:
        raise error(f"{what} does not {verb}: {e}") from e
    if not reader.eof or reader.unused_data or len(text) != size:
        raise error(f"{what} is not one whole frame of its declared size")
    return text


# Compressed bytes fed to the decompressor at a time: what one call writes stays small
# (a block is at most 128 KiB of output, and a forged frame of tiny blocks is bounded
# by its input), so a stream of the value is read in flat memory.
_FEED = 1024


def unpacked(packed: str | bytes) -> Iterator[bytes]:
    """``unpack(packed)`` in pieces, never held whole (a 100,000-task run's summary is
    44 MB of JSON): what ``verify`` compares a stored snapshot with a replay by.

    Raises:
        PackedError: as ``unpack`` (when the frame is found wanting: at once for its
            form and declared size, at its end for what it held).
    """
    frame, size = _frame(packed)
    return _decompressed(frame, size)


def _frame(packed: str | bytes) -> tuple[bytes, int]:
    """The zstd frame a packed string holds, and the size it declares (checked
    plausible: a forged row must not make a reader allocate what it claims).

    Raises:
        PackedError: not a packed string, not base64 of a frame, or an implausible size.
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
    except (binascii.Error, zstandard.ZstdError) as e:
        raise PackedError(f"a packed value does not unpack: {e}") from e
    if not 0 <= size <= min(_MAX_SIZE, _MAX_RATIO * len(frame)):
        raise PackedError("a packed value's frame does not declare a plausible size")
    return frame, size


def _decompressed(frame: bytes, size: int) -> Iterator[bytes]:
    import zstandard

    reader = zstandard.ZstdDecompressor().decompressobj()
    written = 0
    try:
        for at in range(0, len(frame), _FEED):
            # One frame and nothing after it: a second frame, which a reader following
            # the format (`zstd -d`) would append to the value, is unused data here.
            if reader.eof:
                raise PackedError("a packed value is not one whole frame of its declared size")
            text = reader.decompress(frame[at:at + _FEED])
            written += len(text)
            if written > size:
                raise PackedError("a packed value is not one whole frame of its declared size")
            if text:
                yield text
    except zstandard.ZstdError as e:
        raise PackedError(f"a packed value does not unpack: {e}") from e
    if not reader.eof or reader.unused_data or written != size:
        raise PackedError("a packed value is not one whole frame of its declared size")


def sql_unpack(value: str | bytes | int | float | None) -> str | bytes | int | float | None:
    """``evalledger_unpack(x)`` in SQL (every connection a ``Ledger`` opens: ``evalledger
    sql``, the viewer, the Python API): a packed value's JSON text; any other value as it
    is; NULL for a packed value that does not unpack. So ``evalledger_unpack(
    json_extract(payload, '$.value'))`` reads any snapshot's value, and
    ``evalledger_unpack(payload)`` a ``task.lines`` row's lines (stored compressed)."""
    if isinstance(value, bytes):
        # A chunk of lines stored compressed (``_lines``): its text.
        from ._lines import ChunkError, unstored

        try:
            return unstored(value)
        except ChunkError:
            return value
    if not isinstance(value, str) or not is_packed(value):
        return value
    try:
        return unpack(value).decode()
    except (PackedError, UnicodeDecodeError):
        return None
