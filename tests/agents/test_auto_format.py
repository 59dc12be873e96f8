"""``stream_format: auto`` meters an attempt as the format its first telling line names,
books exactly what that format would, and records the format it found."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalledger.ledger import TaskCompleted, TaskUsage
from tests.executor.batches import config, make_task, of_type
from tests.executor.replay import ran, replay

from .transcripts import TRANSCRIPTS

MODELS = {"claude-code": None, "codex": "gpt-5", "gemini": None,
          "opencode": "anthropic/claude-sonnet-4-5"}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("stream_format", sorted(TRANSCRIPTS))
def test_auto_books_what_the_format_it_found_books(tmp_path: Path, stream_format: str) -> None:
    lines = [{"type": "version", "agent": "x"}, {"note": "no type"}, *TRANSCRIPTS[stream_format]]
    command = replay(tmp_path, lines)
    told = make_task("told", command, stream_format=stream_format,
                     model=MODELS[stream_format])
    found = make_task("found", command, stream_format="auto", model=MODELS[stream_format])
    evs = ran(tmp_path, [told, found], config(tmp_path))

    def booked(key: str) -> list[tuple[object, ...]]:
        return [(u.model, u.input_tokens, u.output_tokens, u.cache_read_tokens,
                 u.cache_write_tokens, u.cost_usd, u.estimate)
                for u in of_type(evs, TaskUsage) if u.task_key == key]

    assert booked(found.task_key) == booked(told.task_key) != []
    done = {e.task_key: e for e in of_type(evs, TaskCompleted)}
    assert done[found.task_key].environment_info["stream_format"] == stream_format
    assert done[found.task_key].cost_usd == done[told.task_key].cost_usd
    assert "stream_format" not in done[told.task_key].environment_info


def test_a_native_stream_is_found_native(tmp_path: Path) -> None:
    lines = [{"type": "usage", "model": "gpt-5", "input_tokens": 100, "output_tokens": 10}]
    task = make_task("n", replay(tmp_path, lines), stream_format="auto")
    evs = ran(tmp_path, [task], config(tmp_path))
    [usage] = of_type(evs, TaskUsage)
    assert (usage.model, usage.input_tokens) == ("gpt-5", 100)
    [done] = of_type(evs, TaskCompleted)
    assert done.environment_info["stream_format"] == "native"
