"""Event ids: UUIDv7 text, unique, increasing within a process; one at a time or a
read's worth at once (what the runner takes for a chunk of output lines)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalledger.ledger import new_event_id, new_event_ids, utc_now
from tests.waiting import wait_until


def _check(ids: list[str]) -> None:
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # time-ordered: the UNIQUE index grows at its right edge
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@given(st.lists(st.integers(0, 5000), max_size=8))
def test_ids_one_at_a_time_and_in_batches_interleave_in_order(sizes: list[int]) -> None:
    ids = [new_event_id()]
    for size in sizes:
        batch = new_event_ids(size)
        assert len(batch) == size
        ids += [*batch, new_event_id()]
    _check(ids)


def test_a_batch_larger_than_a_millisecond_counter_carries_into_the_next() -> None:
    # rand_a is a 12-bit counter: 4,096 ids a millisecond, then the next millisecond.
    batch = new_event_ids(10_000)
    _check(batch)
    assert len({text[:13] for text in batch}) >= 3


def test_utc_now_is_the_iso_time_between_two_clock_reads() -> None:
    # The formatted second is cached: each value must still be the wall clock's, in
    # order, across a second boundary too (read until one is crossed).
    first = previous = utc_now()

    def read_once() -> bool:
        nonlocal previous
        before = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        now = utc_now()
        after = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert before <= now <= after and previous <= now
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", now)
        previous = now
        return now[:19] != first[:19]

    wait_until(read_once, "a second boundary", every=0)
