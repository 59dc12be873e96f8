"""Upcasting: a payload of an older shape is read as the current one by every decoder,
and its stored text stays as it was.

No event type has an upcaster yet (every change so far added a field with a default),
so these tests register one for a made-up older shape of ``task.completed``: its
duration stored as ``duration_ms``, whole milliseconds, where the current shape has
``duration_seconds``; and, older still, ``duration_minutes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from evalledger.ledger import EventRow, EventType, Ledger, TaskCompleted, TaskStarted, verify
from evalledger.ledger._upcast import UPCASTERS, Upcaster, upcast
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import FinalStatus

RUN = "run-old"
KEY = "default/t/00"
CALLS: list[dict[str, Any]] = []


def _ms_to_seconds(payload: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(payload)
    if "duration_ms" not in payload:  # the marker was in a nested object: current shape
        return payload
    rest = {k: v for k, v in payload.items() if k != "duration_ms"}
    return {**rest, "duration_seconds": payload["duration_ms"] / 1000}


def _minutes_to_ms(payload: dict[str, Any]) -> dict[str, Any]:
    if "duration_minutes" not in payload:
        return payload
    rest = {k: v for k, v in payload.items() if k != "duration_minutes"}
    return {**rest, "duration_ms": round(payload["duration_minutes"] * 60_000)}


@pytest.fixture
def old_durations(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The made-up older shapes' upcasters, oldest first, for this test only."""
    CALLS.clear()
    monkeypatch.setitem(UPCASTERS, EventType.TASK_COMPLETED, [
        Upcaster('"duration_minutes":', _minutes_to_ms),
        Upcaster('"duration_ms":', _ms_to_seconds),
    ])
    yield


def _stored(ledger: Ledger, **old: Any) -> str:
    """A task.completed appended with ``old`` in place of ``duration_seconds``; its text."""
    current = TaskCompleted(run_id=RUN, task_key=KEY, final_status=FinalStatus.SUCCESS,
                            category="succeeded", environment_info={"python": "3.11"})
    payload = current.model_dump(mode="json", exclude={"seq", "event_id", "run_id",
                                                       "task_key", "type", "ts", "imported"})
    del payload["duration_seconds"]
    text = json.dumps({**payload, **old}, sort_keys=True, separators=(",", ":"))
    ledger.append([TaskStarted(run_id=RUN, task_key=KEY, task_id="t"),
                   EventRow("e-old", RUN, KEY, EventType.TASK_COMPLETED, current.ts, text)])
    return text


def _completion(ledger: Ledger) -> tuple[TaskCompleted, Any]:
    """The run's task.completed as the typed events and as the rebuilds' decoding read it."""
    (full,) = ledger.events(RUN, types=[EventType.TASK_COMPLETED])
    (lite,) = ledger.lite_events(RUN, types=[EventType.TASK_COMPLETED])
    assert isinstance(full, TaskCompleted)
    return full, lite


def test_an_old_shape_is_read_as_the_current_one_by_every_decoder(
        ledger: Ledger, old_durations: None) -> None:
    text = _stored(ledger, duration_ms=12_500)
    full, lite = _completion(ledger)
    assert full.duration_seconds == lite.duration_seconds == 12.5
    assert full.environment_info == lite.environment_info == {"python": "3.11"}
    summary = fold(SummaryFold(RUN), ledger.lite_events(RUN, types=SummaryFold.TYPES))
    assert summary.summary().tasks[0].duration_seconds == 12.5
    assert verify(ledger).ok  # verify validates through the upcaster too
    assert [r.payload for r in ledger.rows(RUN)][-1] == text  # stored as it was, as hashed


def test_upcasters_apply_oldest_first_each_to_what_the_last_left(
        ledger: Ledger, old_durations: None) -> None:
    _stored(ledger, duration_minutes=1.5)
    full, lite = _completion(ledger)
    assert full.duration_seconds == lite.duration_seconds == 90.0


def test_a_current_payload_is_not_parsed_for_upcasting(ledger: Ledger,
                                                        old_durations: None) -> None:
    ledger.append([TaskCompleted(run_id=RUN, task_key=KEY, final_status=FinalStatus.SUCCESS,
                                 category="succeeded", duration_seconds=3.0)])
    assert _completion(ledger)[1].duration_seconds == 3.0
    assert CALLS == []


def test_the_marker_in_a_nested_object_changes_nothing(ledger: Ledger,
                                                       old_durations: None) -> None:
    ledger.append([TaskCompleted(run_id=RUN, task_key=KEY, final_status=FinalStatus.SUCCESS,
                                 category="succeeded", duration_seconds=3.0,
                                 environment_info={"duration_ms": 7})])
    full, lite = _completion(ledger)
    assert full.duration_seconds == lite.duration_seconds == 3.0
    assert full.environment_info == lite.environment_info == {"duration_ms": 7}
    assert len(CALLS) == 2  # parsed (the marker matched), and given back unchanged


def test_without_its_upcaster_an_old_key_is_ignored_and_the_default_read(
        ledger: Ledger) -> None:
    """Why an upcaster is needed for a rename: pydantic and msgspec both ignore a key they
    do not know, so the old value would silently read as the new field's default."""
    _stored(ledger, duration_ms=12_500)
    full, lite = _completion(ledger)
    assert full.duration_seconds == lite.duration_seconds == 0.0


def test_text_that_is_not_a_json_object_is_left_for_the_decoder_to_name(
        old_durations: None) -> None:
    for text in ('not json "duration_ms":', '["duration_ms":]', '["\\"duration_ms\\":"]'):
        assert upcast(EventType.TASK_COMPLETED, text) == text
