"""What an agent's stream says of its model API, for the failure's class.

An attempt that fails while its model API is retrying or refusing (overloaded,
rate-limited, a 5xx) failed for the infrastructure, not for the agent
(docs/results.md, "Failure classes"). Each format says so its own way: Claude Code's
``system``/``api_retry`` and a ``result`` with ``api_error_status``; Codex's
``error`` "Reconnecting..." and a ``turn.failed``; Gemini CLI's ``error`` and a
failed ``result``; OpenCode's ``error`` with an ``APIError``. An answer (an assistant
message, a completed item or step) says the trouble is over.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ._opencode import error_text

# What a failed turn says when its model API, not the agent, failed it.
_API_TROUBLE = re.compile(r"overloaded|rate.?limit|\b(429|5\d\d)\b|stream disconnected|"
                          r"resource.?exhausted|service.?unavailable|quota metric|current quota",
                          re.IGNORECASE)


def _claude_code(kind: object, data: Mapping[str, Any]) -> str | None:
    if kind == "assistant":
        return ""
    if kind == "system" and data.get("subtype") == "api_retry":
        return (
            f"api_retry {data.get('attempt')}/{data.get('max_retries')}: "
            f"{data.get('error_status')} {data.get('error')}"
        )
    if kind == "result" and data.get("is_error") is True:
        status = data.get("api_error_status")
        said = f"{data.get('result') or ''} {data.get('terminal_reason') or ''}".lower()
        if (isinstance(status, int) and (status == 429 or status >= 500)) or ("overloaded" in said):
            return f"result is_error: {status} {said.strip()[:200]}"
    return None


def _codex(kind: object, data: Mapping[str, Any]) -> str | None:
    if kind == "item.completed":
        return ""
    if kind == "error" and "reconnecting" in str(data.get("message")).lower():
        return f"error: {str(data.get('message'))[:200]}"
    if kind == "turn.failed":
        error = data.get("error")
        said = str(error.get("message") if isinstance(error, Mapping) else error)
        if _API_TROUBLE.search(said):
            return f"turn.failed: {said[:200]}"
    return None


def _gemini(kind: object, data: Mapping[str, Any]) -> str | None:
    if kind == "message" and data.get("role") == "assistant":
        return ""
    error = data.get("error")
    said = str(error.get("message") if isinstance(error, Mapping) else data.get("message"))
    if (
        kind in ("error", "result")
        and (kind == "error" or data.get("status") == "error")
        and _API_TROUBLE.search(said)
    ):
        return f"{kind}: {said[:200]}"
    return None


def _opencode(kind: object, data: Mapping[str, Any]) -> str | None:
    if kind in ("step_finish", "text"):
        return ""
    error = data.get("error")
    if kind == "error" and isinstance(error, Mapping) and error.get("name") == "APIError":
        info = error.get("data")
        status = info.get("statusCode") if isinstance(info, Mapping) else None
        retryable = isinstance(info, Mapping) and info.get("isRetryable") is True
        if retryable or (isinstance(status, int) and (status == 429 or status >= 500)):
            return f"error: {error_text(error)[:200]}"
    return None


_READERS: dict[str, Callable[[object, Mapping[str, Any]], str | None]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini": _gemini,
    "opencode": _opencode,
}


def api_health(stream_format: str, data: Mapping[str, Any]) -> str | None:
    """What one line of a ``stream_format`` transcript says of the agent's model API:
    trouble (a phrase saying what), ``""`` (it answered: any trouble is over) or None
    (nothing)."""
    read = _READERS.get(stream_format)
    return None if read is None else read(data.get("type"), data)
