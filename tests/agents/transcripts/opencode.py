"""``opencode run --format json``'s transcript, its real shape (opencode ``cli/cmd/run.ts``
and ``session/message-v2.ts``): three steps, their tools and their costs."""

from __future__ import annotations

from typing import Any

SESSION = "ses_5b7e2d1c8ffeQz3kR1vT9wXy"
T = 1764496800000


def _line(kind: str, part: dict[str, Any], at: int = 0) -> dict[str, Any]:
    return {"type": kind, "timestamp": T + at, "sessionID": SESSION,
            "part": {"sessionID": SESSION, **part}}


def _step(message: str, reason: str, cost: float, fresh: int, output: int, reasoning: int,
          read: int, write: int) -> dict[str, Any]:
    return _line("step_finish", {
        "id": f"prt_{message}_end", "messageID": message, "type": "step-finish",
        "reason": reason, "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "cost": cost,
        "tokens": {"input": fresh, "output": output, "reasoning": reasoning,
                   "cache": {"read": read, "write": write}}})


def _tool(message: str, call: str, tool: str, state: dict[str, Any]) -> dict[str, Any]:
    return _line("tool_use", {"id": f"prt_{call}", "messageID": message, "type": "tool",
                              "callID": call, "tool": tool, "state": state})


TIME = {"start": T, "end": T + 900}
TRANSCRIPT: list[dict[str, Any]] = [
    _line("step_start", {"id": "prt_a1", "messageID": "msg_a", "type": "step-start",
                         "snapshot": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"}),
    _line("reasoning", {"id": "prt_a2", "messageID": "msg_a", "type": "reasoning",
                        "text": "The test divides by len + 1.", "time": TIME}),
    _tool("msg_a", "toolu_01", "bash", {
        "status": "completed", "input": {"command": "python3 test_stats.py",
                                         "description": "Run the tests"},
        "output": "AssertionError: mean([2, 4]) == 2.0\n", "title": "Run the tests",
        "metadata": {"exit": 1}, "time": TIME}),
    _step("msg_a", "tool-calls", 0.019422, 1520, 210, 64, 10240, 2048),
    _line("step_start", {"id": "prt_b1", "messageID": "msg_b", "type": "step-start"}),
    _tool("msg_b", "toolu_02", "read", {
        "status": "error", "input": {"filePath": "/w/nope.py"},
        "error": "File not found: /w/nope.py", "time": TIME}),
    _tool("msg_b", "toolu_03", "edit", {
        "status": "completed", "input": {"filePath": "/w/stats.py",
                                         "oldString": "(len(xs) + 1)", "newString": "len(xs)"},
        "output": "", "title": "stats.py", "metadata": {}, "time": TIME}),
    _step("msg_b", "tool-calls", 0.0097164, 310, 180, 0, 12288, 640),
    _line("step_start", {"id": "prt_c1", "messageID": "msg_c", "type": "step-start"}),
    _line("text", {"id": "prt_c2", "messageID": "msg_c", "type": "text",
                   "text": "Fixed the divisor in mean().", "time": TIME}),
    _step("msg_c", "stop", 0.0055809, 95, 42, 0, 12928, 210),
    {"type": "done", "timestamp": T + 9000, "sessionID": SESSION, "reason": "idle",
     "rejected": []},
]
