"""Packed snapshot values: what is packed reads back as the same data, what is small
stays plain, and what does not unpack is refused with a ``PackedError``, never a
traceback of zstd's or an allocation a forged header asks for."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from evalledger.ledger import Ledger
from evalledger.ledger._packed import PACK_FROM, PackedError, is_packed, pack, unpack, unpacked

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=6),
    max_leaves=60)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@given(st.dictionaries(st.text(max_size=12), _json, max_size=30), st.integers(0, 300))
def test_what_is_packed_unpacks_to_the_same_data_and_small_values_stay_plain(
    value: dict, padding: int,
) -> None:
    value = {**value, "rows": ["x" * 40] * padding}
    stored = pack(value)
    if len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) < PACK_FROM:
        assert stored is value
    else:
        assert is_packed(stored)
        assert json.loads(unpack(stored)) == value
        assert json.loads(unpack(json.dumps(stored))) == value  # as cut out of a payload


def test_a_large_value_is_much_smaller_packed() -> None:
    value = {"tasks": [{"task_key": f"default/t{i}/00", "final_status": "SUCCESS",
                        "weighted_score": 1.0, "attempts": 1} for i in range(2000)]}
    plain = len(json.dumps(value, separators=(",", ":")))
    packed = pack(value)
    assert isinstance(packed, str)
    assert len(packed) * 10 < plain, (len(packed), plain)


def _frame_claiming(size: int) -> bytes:
    # Magic, a descriptor saying single segment with an 8-byte content size, the size,
    # then one last raw block of no bytes.
    return b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + struct.pack("<Q", size) + b"\x01\x00\x00"


@pytest.mark.parametrize("stored", [
    "plain text",
    "zstd:not base64!",
    "zstd:" + base64.b64encode(b"not a frame at all").decode(),
    "zstd:" + base64.b64encode(_frame_claiming(1 << 40)).decode(),
    "zstd:" + base64.b64encode(_frame_claiming(64)).decode(),
    "zstd:" + base64.b64encode(zstandard.ZstdCompressor().compress(b'{"a": 1}' * 999)[:-6]
                               ).decode(),
    '"' + pack({"rows": ["x" * 40] * 200}),  # type: ignore[operator]
    '""' + pack({"rows": ["x" * 40] * 200}) + '""',  # type: ignore[operator]
], ids=["no-prefix", "not-base64", "not-a-frame", "claims-a-terabyte", "short-of-its-claim",
        "cut-off", "one-quote", "two-pairs-of-quotes"])
def test_what_does_not_unpack_is_a_packed_error(stored: str) -> None:
    with pytest.raises(PackedError):
        unpack(stored)


def test_evalledger_unpack_in_sql_reads_a_packed_value_and_passes_the_rest(
    tmp_path: Path,
) -> None:
    value = {"tasks": [{"task_key": f"default/t{i}/00"} for i in range(300)]}
    packed = pack(value)
    assert is_packed(packed)
    with Ledger(tmp_path / "ledger.db") as ledger:
        _, rows = ledger.query(
            "SELECT evalledger_unpack(?), evalledger_unpack(?), evalledger_unpack(?), "
            "evalledger_unpack(NULL), evalledger_unpack(3), "
            "json_extract(evalledger_unpack(?), '$.tasks[299].task_key')",
            [packed, '{"plain": 1}', "zstd:AAAA", packed])
    unpacked, plain, damaged, null, number, key = rows[0]
    assert json.loads(unpacked) == value
    assert (plain, damaged, null, number, key) == ('{"plain": 1}', None, None, 3,
                                                   "default/t299/00")


def test_a_frame_that_claims_far_more_than_values_compress_to_is_refused_unread() -> None:
    """Real values compress 13 to 58 times; 4 MiB of spaces, 20,000 times. A reader never
    allocates what a small forged row claims."""
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b" " * (4 << 20))
    assert len(frame) * 1024 < 4 << 20
    with pytest.raises(PackedError, match="plausible size"):
        unpack("zstd:" + base64.b64encode(frame).decode())


def test_a_large_value_is_read_back_in_small_pieces_and_a_second_frame_is_refused() -> None:
    """``unpacked`` gives the value a piece at a time (verify holds no 44 MB summary);
    a frame followed by another, which `zstd -d` would append, is no value of ours."""
    value = {"rows": [f"row {i} " * 8 for i in range(200_000)]}
    packed = pack(value)
    assert isinstance(packed, str)
    pieces = list(unpacked(packed))
    assert len(pieces) > 10 and max(map(len, pieces)) <= 1 << 20
    assert b"".join(pieces) == msgspec.json.encode(value, order="sorted")

    frame = base64.b64decode(packed.removeprefix("zstd:"))
    twice = "zstd:" + base64.b64encode(frame + zstandard.ZstdCompressor().compress(b"{}")
                                       ).decode()
    with pytest.raises(PackedError):
        b"".join(unpacked(twice))
