"""``stream_format: auto``: every line of each agent's transcript names its own format
(``format_of``), and the auto parser reads it as that format's parser does."""

from __future__ import annotations

import pytest

from evalledger.agents import PARSERS, format_of, read_line

from .transcripts import TRANSCRIPTS


@pytest.mark.parametrize("stream_format", sorted(TRANSCRIPTS))
def test_each_line_names_its_format_and_auto_reads_it_so(stream_format: str) -> None:
    for line in TRANSCRIPTS[stream_format]:
        assert format_of(line) == stream_format, line
        assert read_line("auto", line) == read_line(stream_format, line)


def test_the_formats_lines_that_share_a_type_are_told_apart() -> None:
    assert format_of({"type": "error", "message": "Reconnecting... 1/5"}) == "codex"
    assert format_of({"type": "error", "timestamp": "t", "severity": "warning",
                      "message": "Loop detected"}) == "gemini"
    assert format_of({"type": "error", "timestamp": 1, "sessionID": "ses",
                      "error": {"name": "APIError"}}) == "opencode"
    assert format_of({"type": "tool_use", "tool_name": "x", "tool_id": "1"}) == "gemini"
    assert format_of({"type": "tool_use", "sessionID": "ses", "part": {}}) == "opencode"
    assert format_of({"type": "result", "status": "success", "stats": {}}) == "gemini"
    assert format_of({"type": "result", "subtype": "success", "session_id": "s"}) == (
        "claude-code")


def test_lines_no_agent_wrote_say_nothing_and_read_as_notes() -> None:
    for line in ({"type": "version", "tool": "1.0"}, {"answer": 42}, {"type": 7},
                 {"type": "result"}, {"type": "error"}):
        assert format_of(line) is None
        entry = PARSERS["auto"](line)
        assert entry.role == "other" and len(entry.steps) == 1
    assert format_of({"type": "usage", "input_tokens": 3}) == "native"
