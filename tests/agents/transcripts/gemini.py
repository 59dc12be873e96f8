"""Gemini CLI's ``--output-format stream-json`` transcript, its real shape (gemini-cli
``packages/core/src/output/types.ts``): its opening, its body and its result."""

from __future__ import annotations

from typing import Any

TS = "2026-11-30T10:00:00.000Z"
INIT = {"type": "init", "timestamp": TS, "session_id": "5d2f6a8e-61b4-4c8e-9d0c-2b7e1f3a9c41",
        "model": "gemini-2.5-pro", "cli_version": "0.18.4"}
BODY: list[dict[str, Any]] = [
    {"type": "message", "timestamp": TS, "role": "user",
     "content": "Fix mean() in stats.py so that test_stats.py passes."},
    {"type": "message", "timestamp": TS, "role": "assistant",
     "content": "I'll run the tests", "delta": True},
    {"type": "message", "timestamp": TS, "role": "assistant", "content": " first.",
     "delta": True},
    {"type": "tool_use", "timestamp": TS, "tool_name": "run_shell_command",
     "tool_id": "run_shell_command-1764496800123-8f1a2b", "parameters": {
         "command": "python3 test_stats.py", "description": "Run the tests"}},
    {"type": "tool_result", "timestamp": TS, "tool_id": "run_shell_command-1764496800123-8f1a2b",
     "status": "success", "output": "Command: python3 test_stats.py\nDirectory: (root)\n"
                                    "Output: AssertionError: mean([2, 4]) == 2.0\n"
                                    "Exit Code: 1"},
    {"type": "tool_use", "timestamp": TS, "tool_name": "read_file",
     "tool_id": "read_file-1764496801544-c3d4", "parameters": {"absolute_path": "/w/nope.py"}},
    {"type": "tool_result", "timestamp": TS, "tool_id": "read_file-1764496801544-c3d4",
     "status": "error", "error": {"type": "file_not_found",
                                  "message": "File not found: /w/nope.py"}},
    {"type": "tool_use", "timestamp": TS, "tool_name": "replace",
     "tool_id": "replace-1764496802310-e5f6", "parameters": {
         "file_path": "/w/stats.py", "old_string": "return sum(xs) / (len(xs) + 1)",
         "new_string": "return sum(xs) / len(xs)"}},
    {"type": "tool_result", "timestamp": TS, "tool_id": "replace-1764496802310-e5f6",
     "status": "success", "output": "Successfully modified file: /w/stats.py (1 replacements)."},
    {"type": "message", "timestamp": TS, "role": "assistant",
     "content": "Fixed the divisor in mean().", "delta": True},
]
# Gemini CLI 0.18: the session's totals and the same counts per model (the main model
# and the small one that routes and summarises).
RESULT = {"type": "result", "timestamp": TS, "status": "success", "stats": {
    "total_tokens": 13021, "input_tokens": 12304, "output_tokens": 310, "cached": 8192,
    "input": 4112, "duration_ms": 18450, "tool_calls": 3, "models": {
        "gemini-2.5-pro": {"total_tokens": 11845, "input_tokens": 11220, "output_tokens": 289,
                           "cached": 8192, "input": 3028},
        "gemini-2.5-flash": {"total_tokens": 1176, "input_tokens": 1084, "output_tokens": 21,
                             "cached": 0, "input": 1084}}}}
TRANSCRIPT = [INIT, *BODY, RESULT]
