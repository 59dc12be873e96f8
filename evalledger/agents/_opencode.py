"""OpenCode's JSON events (``opencode run --format json PROMPT``), read as entries.

One JSON object a line (opencode ``packages/opencode/src/cli/cmd/run.ts``): ``type``,
``timestamp`` (ms), ``sessionID``, and a ``part`` of the session's message
(``message-v2.ts``): ``step_start``; ``text`` and ``reasoning`` with the ``text``
once it is complete; ``tool_use`` with a tool ``part`` whose ``state`` has completed
(``input``, ``output``, ``title``) or failed (``input``, ``error``); ``step_finish``
with the step's ``reason``, ``cost`` and ``tokens`` (``input``, ``output``,
``reasoning``, ``cache`` ``read`` and ``write``). ``error`` carries an ``error``
(``name``, ``data.message``; an ``APIError`` also ``statusCode`` and ``isRetryable``),
and ``done`` says the session went idle.

Usage, as OpenCode counts it: ``input`` is the fresh input (cache reads and writes
apart), ``output`` leaves the ``reasoning`` out (newer versions), and reasoning is
billed as output: a step's output is the two summed. Each step's ``cost`` is
OpenCode's own price of it, recorded as reported; a $0 step that used tokens is a
model OpenCode has no price for, priced from the rate card instead. The stream names
no model (the task's ``model`` is booked) and no version (``agent_version_command``).

A line of any other shape is kept as a ``Note`` with its JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._conversation import Entry, FinalResult, Note, Text, Thinking, Tokens, ToolCall, ToolResult
from ._fields import as_json, count, number, text, text_or_none


def parse(data: Mapping[str, Any], *, blocks: bool = True) -> Entry:
    """One line of an OpenCode transcript as an ``Entry`` (``blocks``: read the parts'
    content; without it only what usage needs is read)."""
    kind = data.get("type")
    part = data.get("part")
    part = part if isinstance(part, Mapping) else {}
    message_id = text_or_none(part.get("messageID"))
    if kind == "step_start":
        return Entry("assistant", (), message_id=message_id)
    if kind == "step_finish":
        raw = part.get("tokens")
        return Entry("result", (FinalResult(
            f"step {text(part.get('reason')) or 'finished'}",
            cost_usd=number(part.get("cost")),
            tokens=tokens(raw) if isinstance(raw, Mapping) else None),), message_id=message_id)
    if kind in ("text", "reasoning", "tool_use"):
        return Entry("assistant", _part(str(kind), part) if blocks else (),
                     message_id=message_id)
    if kind == "error":
        return Entry("other", (Note("error", error_text(data.get("error"))),))
    if kind == "done":
        return Entry("other", ())  # the session went idle: its steps said all there is
    return Entry("other", (Note(text(kind) or "event", as_json(data)),))


def tokens(raw: Mapping[str, Any]) -> Tokens:
    """A step's ``tokens`` as token counts (see the module's docstring)."""
    cache = raw.get("cache")
    cache = cache if isinstance(cache, Mapping) else {}
    # Summed, the two could pass any real count: then they are garbage, as either would be.
    output = count((count(raw.get("output")) or 0) + (count(raw.get("reasoning")) or 0))
    return Tokens(input=count(raw.get("input")) or 0, output=output or 0,
                  cache_read=count(cache.get("read")) or 0,
                  cache_write=count(cache.get("write")) or 0)


def error_text(error: Any) -> str:
    """An ``error`` event's error in one line: its name, status and message."""
    if not isinstance(error, Mapping):
        return text(error)
    data = error.get("data")
    data = data if isinstance(data, Mapping) else {}
    status = data.get("statusCode")
    said = [text(error.get("name")) or "error"]
    if isinstance(status, int) and not isinstance(status, bool):
        said.append(str(status))
    return f"{' '.join(said)}: {text(data.get('message'))}"


def _part(kind: str, part: Mapping[str, Any]) -> tuple[Text | Thinking | ToolCall | ToolResult,
                                                        ...]:
    if kind == "text":
        return (Text(text(part.get("text"))),)
    if kind == "reasoning":
        return (Thinking(text(part.get("text"))),)
    # A tool is announced once it has completed or failed: its call and result at once.
    state = part.get("state")
    state = state if isinstance(state, Mapping) else {}
    call_id = text_or_none(part.get("callID"))
    failed = state.get("status") == "error"
    result = text(state.get("error") if failed else state.get("output"))
    return (ToolCall(text(part.get("tool")) or "tool", state.get("input", {}), call_id),
            ToolResult(result, is_error=failed, call_id=call_id))
