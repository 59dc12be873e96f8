"""Claude Code's stream-json read as a conversation (``evalledger.agents``): each line's
steps, the plain-text lines the feed and the report show, and the running usage, which
must agree with what the executor books (``UsageMeter``) after every line."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalledger.agents import (
    PARSERS,
    FinalResult,
    Note,
    RunningUsage,
    SessionStart,
    Text,
    Thinking,
    Tokens,
    ToolCall,
    ToolResult,
    lines_of,
    parser_for,
    read_line,
)
from evalledger.executor._usage import UsageMeter

parse = PARSERS["claude-code"]


def test_each_kind_of_line_is_read_as_its_steps() -> None:
    init = parse({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5",
                  "tools": ["Bash", {"name": "Edit"}], "claude_code_version": "2.0.1"})
    assert init.role == "session"
    assert init.steps == (SessionStart("claude-sonnet-4-5", ("Bash", "Edit"), "2.0.1"),)
    said = parse({"type": "assistant", "message": {
        "id": "m1", "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 30,
                  "cache_creation_input_tokens": 4},
        "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hi"},
                    {"type": "tool_use", "id": "t1", "name": "Bash",
                     "input": {"command": "ls"}}, {"type": "server_tool_use"}]}})
    assert (said.role, said.message_id, said.model) == ("assistant", "m1", "claude-sonnet-4-5")
    assert said.usage == Tokens(10, 2, 30, 4)
    assert said.steps[:3] == (Thinking("hmm"), Text("Hi"), ToolCall("Bash", {"command": "ls"},
                                                                     "t1"))
    assert isinstance(said.steps[3], Note) and said.steps[3].label == "server_tool_use"
    result = parse({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
         "content": [{"type": "text", "text": "no such file"}, {"type": "image"}]}]}})
    assert result.steps == (ToolResult("no such file\n[image]", True, "t1"),)
    final = parse({"type": "result", "subtype": "error_max_turns", "is_error": True,
                   "total_cost_usd": 0.5, "num_turns": 30, "duration_ms": 61000,
                   "result": "", "usage": {"input_tokens": 1, "output_tokens": 1}})
    assert final.steps == (FinalResult("error_max_turns", True, "", 0.5, 30, 61.0,
                                       Tokens(1, 1)),)
    other = parse({"type": "system", "subtype": "compact_boundary"})
    assert other.role == "other" and other.steps[0].label == "system: compact_boundary"


@pytest.mark.parametrize("data", [
    {}, {"type": 3}, {"type": "assistant"}, {"type": "assistant", "message": {"content": 5}},
    {"type": "assistant", "message": {"content": [None, 3, "x"], "usage": "lots"}},
    {"type": "result", "total_cost_usd": "free", "num_turns": -1, "duration_ms": 1e400,
     "usage": {"input_tokens": 2**60}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": {"a": 1}}]}},
])
def test_lines_of_the_wrong_shape_are_read_without_an_error(data: dict[str, Any]) -> None:
    entry = parse(data)
    for line in lines_of(entry):
        assert isinstance(line.text, str)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)
KINDS = st.sampled_from(["system", "assistant", "user", "result", "other"])


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=200, deadline=None)
@given(kind=KINDS, message=JSON, rest=st.dictionaries(st.text(max_size=8), JSON, max_size=5))
def test_any_json_object_reads_as_an_entry(kind: str, message: Any, rest: dict[str, Any]
                                           ) -> None:
    entry = parse({**rest, "type": kind, "message": message})
    for line in lines_of(entry, width=50):
        assert len(line.text) <= 50 or re.fullmatch(r".{50}\u2026 \[[\d,]+ more characters\]",
                                                    line.text, re.S), line.text


def test_the_registry_names_the_formats_with_a_conversation() -> None:
    assert parser_for("claude-code") is parse
    assert parser_for("native") is None and parser_for(None) is None
    assert read_line("native", {"type": "usage"}) is None
    with pytest.raises(TypeError):
        PARSERS["x"] = parse  # type: ignore[index]


def test_an_entry_reads_as_short_plain_lines() -> None:
    lines = [(ln.kind, ln.text) for ln in lines_of(parse({"type": "assistant", "message": {
        "content": [{"type": "text", "text": "Two\nlines"},
                    {"type": "tool_use", "name": "Edit", "input": {"a": 1, "b": "x"}}]}}))]
    assert lines == [("assistant", "assistant: Two"), ("assistant", "  lines"),
                     ("tool", '\u2192 Edit: {"a": 1, "b": "x"}')]
    long = lines_of(parse({"type": "user", "message": {"content": [
        {"type": "tool_result", "content": "\n".join(f"row {i}" for i in range(10))}]}}))
    assert [ln.text for ln in long] == ["\u2190 row 0", "  row 1", "  row 2", "  [7 more lines]"]
    [cut] = lines_of(parse({"type": "assistant", "message": {"content": "y" * 500}}), width=20)
    assert cut.text == "assistant: " + "y" * 9 + "\u2026 [491 more characters]"
    [final] = lines_of(parse({"type": "result", "subtype": "success", "total_cost_usd": 0.0421,
                              "num_turns": 1, "duration_ms": 5300}))
    assert (final.kind, final.text) == ("final", "result: success, $0.0421, 1 turn, 5.3s")


# -- the running usage agrees with the executor's, line by line ------------------------------

USAGE = st.fixed_dictionaries({}, optional={
    "input_tokens": st.integers(0, 10**6), "output_tokens": st.integers(0, 10**5),
    "cache_read_input_tokens": st.integers(0, 10**6),
    "cache_creation_input_tokens": st.integers(0, 10**5)})
LINE = st.one_of(
    st.builds(lambda mid, usage: {"type": "assistant", "message": {
        "id": mid, "model": "claude-sonnet-4-5", "usage": usage, "content": []}},
        st.sampled_from(["m1", "m2", "m3"]), USAGE),
    st.builds(lambda usage: {"type": "result", "subtype": "success", "usage": usage}, USAGE),
    st.just({"type": "user", "message": {"content": [{"type": "tool_result",
                                                       "content": "ok"}]}}),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(LINE, max_size=12))
def test_the_running_usage_is_what_the_executor_counts_after_every_line(
    lines: list[dict[str, Any]]
) -> None:
    meter = UsageMeter("claude-code", "claude-sonnet-4-5")
    tally = RunningUsage()
    for data in lines:
        meter.observe(json.loads(json.dumps(data)))
        tally.add(parse(data))
        assert tally.total.total == meter.live_tokens
