"""What an agent's transcript says, whoever wrote it: one typed model of a conversation.

An agent CLI prints one JSON object per line as it works. A parser for its
``stream_format`` (``_claude_code``, ``_codex``, ``_gemini``, ``_opencode``) reads each
line into an ``Entry``: who
speaks (the session, the assistant, the user side that carries tool results, the final
result) and its ``steps``: text, thinking, a tool call with its input, a tool's result,
the final result with its cost and turns. Every reader (the viewer's conversation, the
HTML report's transcript tail, ``run --stream``) shows entries; none reads an agent's
JSON itself.

Pure: no I/O. Whatever a line holds is untrusted text; showing it safely (``visible``,
HTML escaping) is the reader's job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts of one usage report (a message's, or a session's totals)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.input + other.input, self.output + other.output,
                      self.cache_read + other.cache_read, self.cache_write + other.cache_write)

    def __sub__(self, other: Tokens) -> Tokens:
        return Tokens(self.input - other.input, self.output - other.output,
                      self.cache_read - other.cache_read, self.cache_write - other.cache_write)


@dataclass(frozen=True, slots=True)
class SessionStart:
    """The agent's session began: its model, the tools it may call, its version."""

    kind: ClassVar[Literal["session"]] = "session"
    model: str | None
    tools: tuple[str, ...] = ()
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Text:
    """Text a party wrote (the assistant's answer, a user message)."""

    kind: ClassVar[Literal["text"]] = "text"
    text: str
    delta: bool = False
    """One chunk of a longer text, the rest in the lines that follow (Gemini CLI
    streams its answers so): a reader may join consecutive chunks."""


@dataclass(frozen=True, slots=True)
class Thinking:
    """The assistant's reasoning, where the agent shows it."""

    kind: ClassVar[Literal["thinking"]] = "thinking"
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The assistant calls a tool: its name and input (any JSON value)."""

    kind: ClassVar[Literal["tool_call"]] = "tool_call"
    name: str
    input: Any
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned to the assistant, as text; ``is_error`` when it failed."""

    kind: ClassVar[Literal["tool_result"]] = "tool_result"
    text: str
    is_error: bool = False
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class FinalResult:
    """The session ended: how (``subtype``: success, error_max_turns, ...), what it cost,
    in how many turns and how long, with its last answer and its token totals."""

    kind: ClassVar[Literal["final"]] = "final"
    subtype: str
    is_error: bool = False
    text: str = ""
    cost_usd: float | None = None
    turns: int | None = None
    duration_seconds: float | None = None
    tokens: Tokens | None = None
    models: tuple[tuple[str, Tokens], ...] = ()
    """The totals per model, where the agent says them (Gemini CLI's stats)."""


@dataclass(frozen=True, slots=True)
class Note:
    """A line or a part of one that the parser knows no meaning of: kept as its JSON."""

    kind: ClassVar[Literal["note"]] = "note"
    label: str
    text: str


Step = SessionStart | Text | Thinking | ToolCall | ToolResult | FinalResult | Note
Role = Literal["session", "assistant", "user", "result", "other"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One transcript line read: who speaks and what they did, in order."""

    role: Role
    steps: tuple[Step, ...] = ()
    message_id: str | None = None
    """The assistant message this line belongs to (a message may span several lines)."""
    model: str | None = None
    usage: Tokens | None = None
    """The usage this line reports for its message: counts only grow within a message,
    so each count of a message is its largest report."""
    output_final: int | None = None
    """The message's output count as its stream ended (Anthropic's ``message_delta``):
    its assistant lines repeat the count its start reported (1); this is the real one."""
    partial: bool = False
    """A part of a message the lines after it hold whole (a Claude Code ``stream_event``):
    counted by usage, not shown as a message of its own."""
    thread: str | None = None
    """The conversation the line belongs to where one agent holds several (a Claude
    Code subagent's: the tool call that started it). A line that ends a message without
    naming it (``output_final``) ends the one last started in its thread."""


Parser = Callable[[Mapping[str, Any]], Entry]


@dataclass
class RunningUsage:
    """Tokens used so far as a transcript's entries arrive.

    The rule the executor books usage by: per assistant message its last report (a
    message repeats its usage on every line of it), until a final result replaces its
    session's estimate with the totals it reports (an agent run twice in one command
    starts a second session on top).
    """

    finished: Tokens = Tokens()
    _messages: dict[str, Tokens] = field(default_factory=dict)
    # Invariant: the sum of _messages, kept as they change rather than re-added on every
    # read (a curve reads the total after each of thousands of messages).
    _estimate: Tokens = Tokens()
    _started: dict[str | None, str] = field(default_factory=dict)

    @property
    def total(self) -> Tokens:
        return self.finished + self._estimate

    def add(self, entry: Entry) -> bool:
        """Count ``entry``; True when the total moved."""
        key = message_key(entry, self._started, len(self._messages))
        if key is not None:
            previous = self._messages.get(key, Tokens())
            now = merged(previous, entry)
            self._messages[key] = now
            self._estimate = self._estimate + now - previous
            return now != previous
        final = next((s for s in entry.steps if isinstance(s, FinalResult)), None)
        if final is None:
            return False
        self.finished = self.total if final.tokens is None else self.finished + final.tokens
        self._messages.clear()
        self._started.clear()
        self._estimate = Tokens()
        return True


def message_key(entry: Entry, started: dict[str | None, str], count: int) -> str | None:
    """The message whose usage ``entry`` reports (None: it reports none). ``started``
    maps each thread to its message last started, kept here: an end that names no
    message is its thread's last one's."""
    if entry.usage is not None:
        key = entry.message_id or f"#{count}"
        started[entry.thread] = key
        return key
    if entry.output_final is not None:
        return entry.message_id or started.get(entry.thread)
    return None


def merged(previous: Tokens, entry: Entry) -> Tokens:
    """A message's usage with one more report of it: each count the largest reported
    (a message's counts only grow; its lines may come in any order), its output the
    final count once its end says it."""
    now = previous if entry.usage is None else Tokens(
        max(previous.input, entry.usage.input), max(previous.output, entry.usage.output),
        max(previous.cache_read, entry.usage.cache_read),
        max(previous.cache_write, entry.usage.cache_write))
    if entry.output_final is not None:
        now = Tokens(now.input, max(now.output, entry.output_final), now.cache_read,
                     now.cache_write)
    return now


# -- as plain text: the readable feed and the report's tail ------------------------------------

LineKind = Literal["session", "assistant", "user", "thinking", "tool", "result", "error",
                   "final", "note"]


@dataclass(frozen=True, slots=True)
class Line:
    """One line of an entry as plain text, with what it is (for colour or a class)."""

    kind: LineKind
    text: str


def lines_of(entry: Entry, *, width: int = 200, result_lines: int = 3) -> list[Line]:
    """``entry`` as short lines a person reads: ``assistant: ...``, ``→ Bash: pytest``,
    ``← 1 passed``, ``result: success, $0.0421, 3 turns, 5.3s``. Each line is cut at
    ``width`` characters and a tool's result at ``result_lines`` lines, with what was
    left out said; the text is raw (control characters are the reader's to escape)."""
    found: list[Line] = []
    for step in entry.steps:
        found += _STEP_LINES[type(step)](entry, step, width, result_lines)
    return found


def _session_lines(entry: Entry, step: SessionStart, width: int, most: int) -> list[Line]:
    facts = [step.model or "model not named"]
    if step.tools:
        facts.append(f"{len(step.tools)} tool{'' if len(step.tools) == 1 else 's'}")
    if step.version:
        facts.append(f"version {step.version}")
    return [Line("session", _cut(f"session: {', '.join(facts)}", width))]


def _text_lines(entry: Entry, step: Text, width: int, most: int) -> list[Line]:
    role: LineKind = "user" if entry.role == "user" else "assistant"
    return _block(role, f"{role}: ", step.text, width, None)


def _thinking_lines(entry: Entry, step: Thinking, width: int, most: int) -> list[Line]:
    return _block("thinking", "thinking: ", step.text, width, most)


def _call_lines(entry: Entry, step: ToolCall, width: int, most: int) -> list[Line]:
    return [Line("tool", _cut(f"\u2192 {step.name}: {brief(step.input)}", width))]


def _result_lines(entry: Entry, step: ToolResult, width: int, most: int) -> list[Line]:
    kind: LineKind = "error" if step.is_error else "result"
    return _block(kind, "\u2190 error: " if step.is_error else "\u2190 ", step.text, width,
                  most)


def _final_lines(entry: Entry, step: FinalResult, width: int, most: int) -> list[Line]:
    found = [Line("error" if step.is_error else "final",
                  _cut(f"result: {final_facts(step)}", width))]
    if step.text:
        found += _block("final", "  ", step.text, width, None)
    return found


def _note_lines(entry: Entry, step: Note, width: int, most: int) -> list[Line]:
    return [Line("note", _cut(f"{step.label}: {step.text}", width))]


# One small reader per kind of step (each takes the entry, the step, the width and the
# most lines of a result or a thought).
_STEP_LINES: dict[type, Callable[[Entry, Any, int, int], list[Line]]] = {
    SessionStart: _session_lines, Text: _text_lines, Thinking: _thinking_lines,
    ToolCall: _call_lines, ToolResult: _result_lines, FinalResult: _final_lines,
    Note: _note_lines,
}


def final_facts(step: FinalResult) -> str:
    """``success, $0.0421, 3 turns, 5.3s``: how a session ended, in one phrase."""
    facts = [step.subtype or "result"]
    if step.cost_usd is not None:
        facts.append(f"${step.cost_usd:.4f}")
    if step.turns is not None:
        facts.append(f"{step.turns} turn{'' if step.turns == 1 else 's'}")
    if step.duration_seconds is not None:
        facts.append(f"{step.duration_seconds:.1f}s")
    return ", ".join(facts)


def brief(value: Any) -> str:
    """A tool's input in one line: a lone text field as itself (``pytest -q``), the rest
    as compact JSON."""
    if isinstance(value, Mapping) and len(value) == 1:
        (only,) = value.values()
        if isinstance(only, str) and "\n" not in only:
            return only
    if isinstance(value, str):
        return value.replace("\n", " ")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def _block(kind: LineKind, prefix: str, text: str, width: int,
           most: int | None) -> list[Line]:
    rows = text.splitlines() or [""]
    shown = rows if most is None else rows[:most]
    found = [Line(kind, _cut((prefix if i == 0 else "  ") + row, width))
             for i, row in enumerate(shown)]
    if len(rows) > len(shown):
        left = len(rows) - len(shown)
        found.append(Line(kind, f"  [{left} more line{'' if left == 1 else 's'}]"))
    return found


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return f"{text[:width]}\u2026 [{len(text) - width:,} more characters]"
