"""``stream_format: auto``: which agent wrote a JSON line, told by its shape alone.

Every format's lines say who wrote them (docs/tasks.md, "Usage and cost"): OpenCode's
carry a ``sessionID`` beside their ``part``; Claude Code's types are ``system``,
``assistant``, ``user`` and a ``result`` with a ``subtype``; Codex's are dotted
(``thread.started``, ``item.completed``) and its ``error`` has only a ``message``;
Gemini CLI's are ``init``, ``message``, ``tool_use``, ``tool_result``, an ``error``
with a ``severity`` and a ``result`` with ``stats``; a ``usage`` line is native. A
line of none of these shapes (``version``, a task's own JSON) says nothing.

The executor meters an attempt by the first format a line names (and records it);
readers read each line by its own shape, so a transcript's tail reads without its
first lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_CLAUDE = frozenset({"system", "assistant", "user", "stream_event"})
_CODEX = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed"})
_GEMINI = frozenset({"init", "message", "tool_use", "tool_result"})


def format_of(data: Mapping[str, Any]) -> str | None:
    """The stream format whose line ``data`` is, or None when its shape says nothing."""
    kind = data.get("type")
    if not isinstance(kind, str):
        return None
    if "sessionID" in data and ("part" in data or kind in ("error", "done")):
        return "opencode"
    if kind in _CLAUDE:
        return "claude-code"
    if kind in _CODEX or kind.startswith("item."):
        return "codex"
    if kind in _GEMINI:
        return "gemini"
    if kind == "result":
        if "stats" in data or "status" in data:
            return "gemini"
        return "claude-code" if "subtype" in data or "session_id" in data else None
    if kind == "error":
        return "gemini" if "severity" in data else "codex" if "message" in data else None
    return "native" if kind == "usage" else None
