"""Gemini CLI's ``stream-json`` (``gemini -p PROMPT --output-format stream-json``), read
as entries.

One JSON object a line (gemini-cli ``packages/core/src/output/types.ts``), each with a
``timestamp``: ``init`` (``session_id``, ``model``; newer CLIs add ``cli_version``),
``message`` (``role`` user or assistant, ``content``; ``delta: true`` when it is one
chunk of a longer answer), ``tool_use`` (``tool_name``, ``tool_id``, ``parameters``),
``tool_result`` (``tool_id``, ``status`` success or error, ``output`` or an ``error``
with a ``message``), ``error`` (``severity`` warning or error, ``message``) and a last
``result`` (``status``, an ``error`` when it failed, ``stats``).

Usage comes once, in the result's ``stats``: ``input_tokens`` (the prompt, cached part
included), ``cached`` and ``input`` (its cached and fresh parts), ``output_tokens``
(the answer) and ``total_tokens``, which also counts the model's thoughts; newer CLIs
add the same counts per model (``models``). Thoughts are billed as output, so a
model's output is ``total_tokens - input_tokens`` where that is more than
``output_tokens``. No cost is reported: the rate card prices each model.

A line of any other shape is kept as a ``Note`` with its JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._conversation import (
    Entry,
    FinalResult,
    Note,
    SessionStart,
    Text,
    Tokens,
    ToolCall,
    ToolResult,
)
from ._fields import as_json, count, number, text, text_or_none


def parse(data: Mapping[str, Any], *, blocks: bool = True) -> Entry:
    """One line of a Gemini CLI transcript as an ``Entry`` (``blocks``: read the
    messages' and tools' content; without it only what usage needs is read)."""
    kind = data.get("type")
    if kind == "init":
        return Entry("session", (SessionStart(model=text_or_none(data.get("model")),
                                              version=text_or_none(data.get("cli_version"))),),
                     message_id=text_or_none(data.get("session_id")))
    if kind == "result":
        return Entry("result", (_result(data),))
    if kind in ("message", "tool_use", "tool_result"):
        user = kind == "tool_result" or data.get("role") == "user"
        return Entry("user" if user else "assistant", _content(str(kind), data) if blocks else ())
    if kind == "error":
        return Entry("other", (Note(f"error ({text(data.get('severity')) or 'error'})",
                                    text(data.get("message"))),))
    return Entry("other", (Note(text(kind) or "event", as_json(data)),))


def tokens(stats: Mapping[str, Any]) -> Tokens:
    """A ``stats`` object's (or one model's) counts as tokens (see the module's docstring)."""
    prompt = count(stats.get("input_tokens")) or 0
    cached = count(stats.get("cached")) or 0
    fresh = count(stats.get("input"))
    answer = count(stats.get("output_tokens")) or 0
    total = count(stats.get("total_tokens")) or 0
    return Tokens(input=max(0, prompt - cached) if fresh is None else fresh,
                  output=max(answer, total - prompt), cache_read=cached)


def _content(kind: str, data: Mapping[str, Any]) -> tuple[Text | ToolCall | ToolResult, ...]:
    if kind == "message":
        return (Text(text(data.get("content")), delta=data.get("delta") is True),)
    call_id = text_or_none(data.get("tool_id"))
    if kind == "tool_use":
        return (ToolCall(text(data.get("tool_name")) or "tool", data.get("parameters", {}),
                         call_id),)
    error = data.get("error")
    failed = data.get("status") == "error"
    said = error.get("message") if isinstance(error, Mapping) else error
    return (ToolResult(text(said) if failed and said else text(data.get("output")),
                       is_error=failed, call_id=call_id),)


def _result(data: Mapping[str, Any]) -> FinalResult:
    stats = data.get("stats")
    stats = stats if isinstance(stats, Mapping) else None
    error = data.get("error")
    by_model = stats.get("models") if stats is not None else None
    models = tuple((name, tokens(counts)) for name, counts in by_model.items()
                   if isinstance(name, str) and name and isinstance(counts, Mapping)
                   ) if isinstance(by_model, Mapping) else ()
    duration_ms = number(stats.get("duration_ms")) if stats is not None else None
    return FinalResult(
        subtype=text(data.get("status")) or "result",
        is_error=data.get("status") == "error",
        text=text(error.get("message") if isinstance(error, Mapping) else error),
        duration_seconds=None if duration_ms is None else duration_ms / 1000,
        tokens=None if stats is None else tokens(stats),
        models=models,
    )
