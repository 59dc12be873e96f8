"""A real-shaped transcript of each agent the executor reads (``stream_format``), one
module each; ``TRANSCRIPTS`` holds each whole, from its first line to its result."""

from __future__ import annotations

from typing import Any

from . import claude_code, codex, gemini, opencode

CLAUDE = [{"type": "system", "subtype": "init", "model": "claude-sonnet-4-5",
           "claude_code_version": "2.0.37", "session_id": "s"},
          *claude_code.TRANSCRIPT, claude_code.RESULT]
TRANSCRIPTS: dict[str, list[dict[str, Any]]] = {
    "claude-code": CLAUDE, "codex": codex.TRANSCRIPT,
    "gemini": gemini.TRANSCRIPT, "opencode": opencode.TRANSCRIPT}
