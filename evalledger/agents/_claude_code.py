"""Claude Code's ``stream-json`` (``claude -p --output-format stream-json``), read as entries.

One JSON object a line: ``system`` (``init``: the model, the tools, the CLI's version),
``assistant`` (a message's content blocks: ``text``, ``thinking``, ``tool_use``; its
``usage``, repeated on every line of one message id), ``user`` (``tool_result`` blocks,
``is_error`` when the tool failed), and a last ``result`` (``subtype``, ``is_error``,
``total_cost_usd``, ``num_turns``, ``duration_ms``, ``result``, ``usage``, and
``modelUsage`` per model); with ``--include-partial-messages`` also ``stream_event``
(the model API's events: a message's start and its real output count). docs/tasks.md
("What a task emits") describes what evalledger records of it.

A line of any other shape, or a field of a wrong type, is not an error: what cannot be
read as a step is kept as a ``Note`` with its JSON (a newer CLI, an older reader).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ._conversation import (
    Entry,
    FinalResult,
    Note,
    SessionStart,
    Step,
    Text,
    Thinking,
    Tokens,
    ToolCall,
    ToolResult,
)
from ._fields import as_json as _json
from ._fields import count as _count
from ._fields import number as _number
from ._fields import text as _text
from ._fields import text_or_none as _text_or_none


def parse(data: Mapping[str, Any], *, blocks: bool = True) -> Entry:
    """One line of a Claude Code transcript as an ``Entry``; without ``blocks``, an
    assistant's or a user's message carries no steps (its text, calls and results are
    not read: what a usage meter needs, at half the cost a line)."""
    kind = data.get("type")
    message = data.get("message")
    if kind == "system" and data.get("subtype", "init") == "init":
        return _session(data)
    if kind == "assistant" and isinstance(message, Mapping):
        return _assistant(message, blocks, _text_or_none(data.get("parent_tool_use_id")))
    if kind == "user" and isinstance(message, Mapping):
        return Entry("user", _blocks(message.get("content")) if blocks else ())
    if kind == "result":
        return _result(data)
    if kind == "stream_event":
        return _stream_event(data)
    label = f"{kind}: {data.get('subtype')}" if kind == "system" else _text(kind) or "event"
    return Entry("other", (Note(label, _json(data)),))


def _session(data: Mapping[str, Any]) -> Entry:
    """The ``system`` ``init`` line: the model, the tools, the CLI's version."""
    tools = data.get("tools")
    names = tuple(_tool_name(t) for t in tools) if isinstance(tools, list) else ()
    return Entry("session", (SessionStart(model=_text_or_none(data.get("model")), tools=names,
                                          version=_text_or_none(
                                              data.get("claude_code_version"))),))


def _assistant(message: Mapping[str, Any], blocks: bool, thread: str | None) -> Entry:
    """An ``assistant`` line: its message's blocks, id, model and usage so far."""
    usage = message.get("usage")
    return Entry(
        "assistant", _blocks(message.get("content")) if blocks else (),
        message_id=_text_or_none(message.get("id")),
        model=_text_or_none(message.get("model")),
        usage=tokens(usage) if isinstance(usage, Mapping) else None,
        thread=thread,
    )


def _stream_event(data: Mapping[str, Any]) -> Entry:
    """A ``stream_event`` line (``--include-partial-messages``): the model API's own
    event. A message's start says its id, model and input usage; its ``message_delta``
    its real output count (the assistant lines carry the start's). The deltas between
    are left out: the assistant line that follows holds the message whole."""
    event = data.get("event")
    if not isinstance(event, Mapping):
        return Entry("other")
    thread = _text_or_none(data.get("parent_tool_use_id"))
    kind = event.get("type")
    if kind == "message_start" and isinstance(message := event.get("message"), Mapping):
        return dataclasses.replace(_assistant(message, False, thread), partial=True)
    if kind == "message_delta" and isinstance(usage := event.get("usage"), Mapping):
        output = _count(usage.get("output_tokens"))
        if output is not None:
            return Entry("assistant", message_id=_text_or_none(data.get("api_message_id")),
                         output_final=output, thread=thread, partial=True)
    return Entry("other", partial=True)


def _result(data: Mapping[str, Any]) -> Entry:
    """The last line, ``result``: how the session ended, its cost, turns and totals."""
    usage = data.get("usage")
    duration_ms = _number(data.get("duration_ms"))
    return Entry("result", (FinalResult(
        subtype=_text(data.get("subtype")) or "result",
        is_error=data.get("is_error") is True,
        text=_text(data.get("result")),
        cost_usd=_number(data.get("total_cost_usd")),
        turns=_count(data.get("num_turns")),
        duration_seconds=None if duration_ms is None else duration_ms / 1000,
        tokens=tokens(usage) if isinstance(usage, Mapping) else None,
    ),))


def tokens(raw: Mapping[str, Any]) -> Tokens:
    """An Anthropic ``usage`` object as token counts (cache creation is a cache write)."""
    return Tokens(input=_count(raw.get("input_tokens")) or 0,
                  output=_count(raw.get("output_tokens")) or 0,
                  cache_read=_count(raw.get("cache_read_input_tokens")) or 0,
                  cache_write=_count(raw.get("cache_creation_input_tokens")) or 0)


def _blocks(content: Any) -> tuple[Step, ...]:
    if isinstance(content, str):
        return (Text(content),)
    if not isinstance(content, list):
        return ()
    steps: list[Step] = []
    for block in content:
        if not isinstance(block, Mapping):
            steps.append(Text(_text(block)))
            continue
        kind = block.get("type")
        if kind == "text":
            steps.append(Text(_text(block.get("text"))))
        elif kind == "thinking":
            steps.append(Thinking(_text(block.get("thinking"))))
        elif kind == "redacted_thinking":
            steps.append(Thinking("[redacted thinking]"))
        elif kind == "tool_use":
            steps.append(ToolCall(name=_text(block.get("name")) or "tool",
                                  input=block.get("input", {}),
                                  call_id=_text_or_none(block.get("id"))))
        elif kind == "tool_result":
            steps.append(ToolResult(text=_content_text(block.get("content")),
                                    is_error=block.get("is_error") is True,
                                    call_id=_text_or_none(block.get("tool_use_id"))))
        else:
            steps.append(Note(_text(kind) or "block", _json(block)))
    return tuple(steps)


def _content_text(content: Any) -> str:
    """A tool result's content: text, or a list of blocks (text, images, ...)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(_text(block.get("text")))
            elif isinstance(block, Mapping) and isinstance(block.get("type"), str):
                parts.append(f"[{block['type']}]")
            else:
                parts.append(_text(block))
        return "\n".join(parts)
    return "" if content is None else _text(content)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        return _text(tool.get("name")) or "tool"
    return _text(tool)
