"""Claude Code's ``stream-json`` transcript: its opening, two messages (the first told in
two lines, its usage repeated) and a tool call between them, then its result line."""

from __future__ import annotations

from typing import Any

MODEL = "claude-sonnet-4-5-20250929"
SESSION = "7f1c2d3e-0000-4000-8000-000000000001"


def assistant(msg_id: str, content: list[dict[str, Any]], usage: dict[str, Any], *,
               model: str = MODEL, parent: str | None = None) -> dict:
    return {
        "type": "assistant",
        "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "service_tier": "standard"},
        },
        "parent_tool_use_id": parent,
        "session_id": SESSION,
    }


TRANSCRIPT: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "cwd": "/tmp/sandbox", "session_id": SESSION,
     "tools": ["Bash", "Edit", "Read", "Write"], "mcp_servers": [], "model": MODEL,
     "permissionMode": "bypassPermissions", "apiKeySource": "ANTHROPIC_API_KEY"},
    assistant("msg_01", [{"type": "text", "text": "I'll create add.py."}],
               {"input_tokens": 4, "cache_creation_input_tokens": 5000,
                "cache_read_input_tokens": 12000, "output_tokens": 3}),
    # the same message again, its next content block: usage repeats (and grows)
    assistant("msg_01", [{"type": "tool_use", "id": "toolu_01", "name": "Write",
                           "input": {"file_path": "add.py", "content": "import sys\n"}}],
               {"input_tokens": 4, "cache_creation_input_tokens": 5000,
                "cache_read_input_tokens": 12000, "output_tokens": 120}),
    {"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_01", "type": "tool_result", "content": "File created"}]},
     "parent_tool_use_id": None, "session_id": SESSION},
    assistant("msg_02", [{"type": "text", "text": "Done."}],
               {"input_tokens": 6, "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 17000, "output_tokens": 40}),
]
RESULT = {
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 8123,
    "duration_api_ms": 7012, "num_turns": 2, "result": "Done.", "session_id": SESSION,
    "total_cost_usd": 0.0123,
    "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5300,
              "cache_read_input_tokens": 29000, "output_tokens": 160,
              "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"},
    "permission_denials": [],
}
