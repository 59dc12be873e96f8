"""Codex's ``exec --json`` (``codex exec --json PROMPT``), read as entries.

One JSON object a line (codex-rs ``exec/src/exec_events.rs``): ``thread.started``
(``thread_id``), ``turn.started``, ``item.started`` / ``item.updated`` /
``item.completed`` with an ``item`` (``agent_message`` and ``reasoning`` with ``text``;
``command_execution`` with ``command``, ``aggregated_output``, ``exit_code``;
``file_change`` with ``changes``; ``mcp_tool_call`` with ``server``, ``tool``,
``arguments``, ``result`` / ``error``; ``web_search`` with ``query``; ``todo_list``
with ``items``; ``error`` with ``message``), ``turn.completed`` with the turn's
``usage`` (``input_tokens``, ``cached_input_tokens``, ``output_tokens``; newer CLIs
add ``reasoning_output_tokens`` and ``cache_write_input_tokens``), ``turn.failed``
with an ``error``, and ``error``.

Usage, as codex-rs counts it (``TokenUsage``): cached input is part of
``input_tokens``, reasoning is part of ``output_tokens``. So a turn's usage is
``input_tokens - cached_input_tokens - cache_write_input_tokens`` fresh input, the
cached part as cache reads, ``output_tokens`` (reasoning priced as output, once). The
stream names no model and no cost: the task's ``model`` prices it from the rate card.

A command or an MCP call is a call when it starts (``item.started``) and its result
when it completes; a file change or a web search, which only complete, is both. A line of any other
shape is kept as a ``Note`` with its JSON.
"""

from __future__ import annotations

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
from ._fields import text as _text

_TOOLS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
# The tool items Codex announces with an ``item.started`` before they complete.
_STARTED = frozenset({"command_execution", "mcp_tool_call"})


def parse(data: Mapping[str, Any], *, blocks: bool = True) -> Entry:
    """One line of a Codex ``exec --json`` transcript as an ``Entry`` (``blocks``: read
    the items' content; without it only what usage needs is read)."""
    kind = data.get("type")
    if kind == "thread.started":
        return Entry("session", (SessionStart(model=None),), message_id=_id(data, "thread_id"))
    if kind == "turn.completed":
        usage = data.get("usage")
        return Entry("result", (FinalResult("turn completed",
                                            tokens=tokens(usage) if isinstance(usage, Mapping)
                                            else None),))
    if kind == "turn.failed":
        error = data.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        return Entry("result", (FinalResult("turn failed", is_error=True,
                                            text=_text(message)),))
    item = data.get("item")
    if kind in ("item.started", "item.updated", "item.completed") and isinstance(item, Mapping):
        if not blocks:
            return Entry("assistant", ())
        steps = _item(str(kind), item)
        # A command's or a call's result alone is the tool's word, as Claude Code's are.
        if steps and all(isinstance(s, ToolResult) for s in steps):
            return Entry("user", steps, message_id=_id(item, "id"))
        return Entry("assistant", steps, message_id=_id(item, "id"))
    if kind == "turn.started":
        return Entry("assistant", ())  # the model is at work: its items and end follow
    if kind == "error":
        return Entry("other", (Note("error", _text(data.get("message"))),))
    return Entry("other", (Note(_text(kind) or "event", _json(data)),))


def tokens(usage: Mapping[str, Any]) -> Tokens:
    """A turn's usage as token counts (see the module's docstring)."""
    cached = _count(usage.get("cached_input_tokens")) or 0
    written = _count(usage.get("cache_write_input_tokens")) or 0
    fresh = max(0, (_count(usage.get("input_tokens")) or 0) - cached - written)
    return Tokens(input=fresh, output=_count(usage.get("output_tokens")) or 0,
                  cache_read=cached, cache_write=written)


def _item(kind: str, item: Mapping[str, Any]) -> tuple[Step, ...]:
    """An item's steps: text and reasoning once complete; a tool's call when it starts,
    its result when it completes (both for one seen only complete)."""
    what = item.get("type")
    what = what if isinstance(what, str) else None  # any other JSON: no known item
    call_id = _id(item, "id")
    done = kind == "item.completed"
    if what == "agent_message":
        return (Text(_text(item.get("text"))),) if done else ()
    if what == "reasoning":
        return (Thinking(_text(item.get("text"))),) if done else ()
    if what in _TOOLS:
        if kind == "item.updated":
            return ()
        call = ToolCall(_tool_name(item), _tool_input(item), call_id)
        if not done:
            return (call,)
        result = _tool_result(item, call_id)
        # Commands and MCP calls say when they start (their call was shown then); the
        # others complete at once: the call and its result together.
        return (result,) if what in _STARTED else (call, result)
    if what == "todo_list":
        items = item.get("items")
        listed = [f"[{'x' if isinstance(i, Mapping) and i.get('completed') else ' '}] "
                  f"{_text(i.get('text')) if isinstance(i, Mapping) else _text(i)}"
                  for i in items] if isinstance(items, list) else []
        return (Note("todo list", "\n".join(listed)),) if done else ()
    if what == "error":
        return (Note("error", _text(item.get("message"))),)
    return (Note(f"item: {_text(what)}", _json(item)),) if done else ()


def _tool_name(item: Mapping[str, Any]) -> str:
    what = item.get("type")
    if what == "command_execution":
        return "shell"
    if what == "mcp_tool_call":
        return f"{_text(item.get('server'))}.{_text(item.get('tool'))}"
    return _text(what)


def _tool_input(item: Mapping[str, Any]) -> Any:
    what = item.get("type")
    if what == "command_execution":
        return {"command": item.get("command")}
    if what == "file_change":
        return {"changes": item.get("changes")}
    if what == "mcp_tool_call":
        return item.get("arguments")
    if what == "web_search":
        return {"query": item.get("query")}
    return dict(item)


def _tool_result(item: Mapping[str, Any], call_id: str | None) -> ToolResult:
    what = item.get("type")
    failed = item.get("status") == "failed"
    if what == "command_execution":
        code = item.get("exit_code")
        text = _text(item.get("aggregated_output"))
        return ToolResult(text if code in (0, None) else f"exit code {code}\n{text}",
                          is_error=failed or (isinstance(code, int) and code != 0),
                          call_id=call_id)
    if what == "file_change":
        changes = item.get("changes")
        said = [f"{_text(c.get('kind'))} {_text(c.get('path'))}" for c in changes
                if isinstance(c, Mapping)] if isinstance(changes, list) else []
        return ToolResult("\n".join(said) or _text(item.get("status")), is_error=failed,
                          call_id=call_id)
    if what == "mcp_tool_call":
        error = item.get("error")
        return ToolResult(_text(error if error else item.get("result")),
                          is_error=failed or bool(error), call_id=call_id)
    return ToolResult(_text(item.get("status")), is_error=failed, call_id=call_id)


def _id(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    return value if isinstance(value, str) and value else None
