"""Codex's ``exec --json`` transcript, its real shape (codex-rs ``exec_events.rs``)."""

from __future__ import annotations

from typing import Any

# Two turns of `codex exec --json` (0.5x: usage per turn, cached input a part of input,
# reasoning a part of output), a command that fails then one that passes, a file change.
TRANSCRIPT: list[dict[str, Any]] = [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning",
                                        "text": "**Looking at the failing test**"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                      "command": "bash -lc 'pytest -q'",
                                      "aggregated_output": "", "exit_code": None,
                                      "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                        "command": "bash -lc 'pytest -q'",
                                        "aggregated_output": "1 failed\n", "exit_code": 1,
                                        "status": "failed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "file_change",
                                        "changes": [{"path": "calc.py", "kind": "update"}],
                                        "status": "completed"}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448,
                                         "output_tokens": 122,
                                         "reasoning_output_tokens": 64}},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "item_3", "type": "command_execution",
                                      "command": "bash -lc 'pytest -q'",
                                      "aggregated_output": "", "exit_code": None,
                                      "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "command_execution",
                                        "command": "bash -lc 'pytest -q'",
                                        "aggregated_output": "1 passed\n", "exit_code": 0,
                                        "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_4", "type": "agent_message",
                                        "text": "Fixed the off-by-one in calc.py."}},
    {"type": "turn.completed", "usage": {"input_tokens": 25310, "cached_input_tokens": 24704,
                                         "output_tokens": 58}},
]
