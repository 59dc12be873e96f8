"""A task's transcript as its page shows it: attempts apart, a conversation read by its
agent's parser (``agents``), a tool call by what the tool does, an imported attempt's
record field by field.

Pure: the lines and attempts are read by the viewer (``Row`` and ``Try`` name what is
read of them here); what an agent wrote is shown, never acted on.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from evalledger._diffs import diff_lines
from evalledger.agents import Entry, Text, ToolCall, ToolResult, parser_for
from evalledger.ledger import TaskCompleted, TaskInterrupted, TaskStarted, TaskUsage
from evalledger.statuses import FinalStatus


class Row(Protocol):
    """What is read here of a transcript line (the viewer's ``Line``)."""

    @property
    def seq(self) -> int: ...
    @property
    def ts(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def data(self) -> dict[str, Any] | None: ...


class Try(Protocol):
    """What is read here (and by ``usage_chart``) of an attempt (the viewer's ``Attempt``)."""

    @property
    def number(self) -> int: ...
    @property
    def stream_format(self) -> str: ...
    @property
    def started(self) -> TaskStarted: ...
    @property
    def usage(self) -> Sequence[TaskUsage]: ...
    @property
    def completed(self) -> TaskCompleted | None: ...
    @property
    def interrupted(self) -> TaskInterrupted | None: ...


R = TypeVar("R", bound=Row)


# A tool result longer than this shows its start; the ledger holds all of it.
MAX_SHOWN_RESULT = 4000


@dataclass(frozen=True)
class AttemptMark:
    """Where an attempt's lines begin, in a transcript of several attempts."""

    number: int
    attempt: Try | None
    kind: str = "mark"


@dataclass(frozen=True)
class Said:
    """One transcript line of the conversation view: an agent's entry, or (``entry``
    None) a line that is no JSON of its agent (stdout, stderr) shown as it is."""

    line: Row
    entry: Entry | None
    kind: str = "said"
    elapsed: float | None = None
    """Seconds from its attempt's start to this line (None: a time unreadable)."""
    took: float | None = None
    """Seconds from the line shown before it in the same attempt (or the start)."""
    unanswered: frozenset[str] = frozenset()
    """Its tool calls (by id) that no result answered before their attempt ended: still
    running then (a timeout's command, say)."""
    ended: str = ""
    """How its attempt ended, said after "when the attempt" (``timed out``)."""

    @property
    def seq(self) -> int:
        return self.line.seq


def with_marks(lines: Sequence[R], tries: Sequence[Try],
               previous: int | None) -> list[R | AttemptMark]:
    """``lines`` with a mark before the first line of each attempt, when the task has
    more than one; ``previous`` is the attempt of the row just before the first line
    (None: there is none), so a page or a live tail that starts inside an attempt does
    not mark it again."""
    if len(tries) < 2:
        return list(lines)
    by_number = {t.number: t for t in tries}
    rows: list[R | AttemptMark] = []
    for line in lines:
        if line.attempt != previous:
            rows.append(AttemptMark(line.attempt, by_number.get(line.attempt)))
            previous = line.attempt
        rows.append(line)
    return rows


def conversation(rows: Sequence[Row | AttemptMark], tries: Sequence[Try], *,
                 from_start: bool = True, to_end: bool = False) -> list[Said | AttemptMark]:
    """Transcript rows as a conversation: each JSON line read by the parser of its
    attempt's stream format (``agents``); other lines as they are. ``from_start``: the
    rows begin the transcript (else the first row's line before is not among them, and
    what it took is not known); ``to_end``: they end it (else an attempt's last rows
    may be on the next page, and a call's result with them)."""
    reading = _Conversation(tries, from_start)
    for row in rows:
        reading.add(row)
    return _unanswered(reading.items(), tries, to_end)


def _unanswered(items: list[Said | AttemptMark], tries: Sequence[Try],
                to_end: bool) -> list[Said | AttemptMark]:
    """``items`` with each tool call that its attempt ended without a result for marked
    (an attempt whose rows all are here: a later attempt's follow them, or they end the
    transcript and it has ended)."""
    ended = {t.number: _ending(t) for t in tries}
    said = [item for item in items if isinstance(item, Said) and item.entry is not None]
    answered = _answered(said)
    # The last attempt on the page may go on past it, unless the page ends the transcript.
    lines = [item for item in items if isinstance(item, Said)]
    going_on = lines[-1].line.attempt if lines and not to_end else None
    marked = list(items)
    for i, item in enumerate(items):
        if not isinstance(item, Said) or item.entry is None:
            continue
        attempt = item.line.attempt
        if ended.get(attempt) and attempt != going_on and (calls := frozenset(
                s.call_id for s in item.entry.steps if isinstance(s, ToolCall)
                and s.call_id and s.call_id not in answered.get(attempt, ()))):
            marked[i] = dataclasses.replace(item, unanswered=calls, ended=ended[attempt])
    return marked


def _answered(said: list[Said]) -> dict[int, set[str]]:
    """Per attempt, the tool calls (by id) a result on the page answered."""
    answered: dict[int, set[str]] = {}
    for item in said:
        assert item.entry is not None
        answered.setdefault(item.line.attempt, set()).update(
            s.call_id for s in item.entry.steps if isinstance(s, ToolResult) and s.call_id)
    return answered


def _ending(attempt: Try) -> str:
    """How an attempt ended, after "when the attempt" ("" while it runs)."""
    if attempt.interrupted is not None:
        return "was interrupted"
    if attempt.completed is None:
        return ""
    status = attempt.completed.final_status
    return "timed out" if status is FinalStatus.TIMEOUT else f"ended ({status.value})"


class _Conversation:
    """``conversation``'s reading: the items so far, each attempt's last time, and the
    chunks of a streamed answer the last item began (joined once it ends)."""

    def __init__(self, tries: Sequence[Try], from_start: bool) -> None:
        self.parsers = {t.number: parser_for(t.stream_format) for t in tries}
        self.began = {t.number: seconds(t.started.ts) for t in tries}
        # Per attempt, its last item's time: its start where the rows begin it.
        self.latest: dict[int, float | None] = dict(self.began) if from_start else {}
        self.previous: int | None = None
        self.said: list[Said | AttemptMark] = []
        self.chunks: list[str] = []

    def add(self, row: Row | AttemptMark) -> None:
        entry = self._entry(row)
        if _chunks(entry) and self.chunks:
            # An answer streamed in chunks reads as one message (its lines apart in raw).
            assert entry is not None
            self.chunks += [s.text for s in entry.steps if isinstance(s, Text)]
            return
        self._join()
        if isinstance(row, AttemptMark):
            self.said.append(row)
            return
        if self.previous is not None and row.attempt != self.previous:  # one begins here
            self.latest.setdefault(row.attempt, self.began.get(row.attempt))
        at, start = seconds(row.ts), self.began.get(row.attempt)
        before = self.latest.get(row.attempt)
        self.said.append(Said(row, entry, elapsed=between(start, at), took=between(before, at)))
        self.latest[row.attempt] = at
        self.previous = row.attempt
        if _chunks(entry):
            assert entry is not None
            self.chunks += [s.text for s in entry.steps if isinstance(s, Text)]

    def items(self) -> list[Said | AttemptMark]:
        self._join()
        return self.said

    def _entry(self, row: Row | AttemptMark) -> Entry | None:
        if isinstance(row, AttemptMark):
            return None
        parser = self.parsers.get(row.attempt)
        return parser(row.data) if parser is not None and row.data is not None else None

    def _join(self) -> None:
        """The streamed answer the last item began, its chunks as one text."""
        if len(self.chunks) > 1:
            last = self.said[-1]
            assert isinstance(last, Said) and last.entry is not None
            self.said[-1] = dataclasses.replace(last, entry=dataclasses.replace(
                last.entry, steps=(Text("".join(self.chunks), delta=True),)))
        self.chunks.clear()


def seconds(ts: str | None) -> float | None:
    """A ledger ``ts`` (ISO 8601, UTC where it names no zone) as seconds since the
    epoch; None when unreadable (a forged or hand-written row)."""
    try:
        moment = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def between(earlier: float | None, later: float | None) -> float | None:
    """Seconds from ``earlier`` to ``later``, never below 0; None when either is."""
    return None if earlier is None or later is None else max(0.0, later - earlier)


def _chunks(entry: Entry | None) -> bool:
    """``entry`` is the assistant's chunk of a streamed answer, and nothing else."""
    return (entry is not None and entry.role == "assistant" and bool(entry.steps)
            and all(isinstance(s, Text) and s.delta for s in entry.steps))


def result_text(text: str) -> tuple[str, int]:
    """A tool's result as shown: its start, and how many characters were left out."""
    return text[:MAX_SHOWN_RESULT], max(0, len(text) - MAX_SHOWN_RESULT)


# Lines of a tool's input or result shown at once; the rest one click away.
FOLD_LINES = 12
# The tools whose input is a command line, by the name each agent gives its shell.
_SHELLS = frozenset({"bash", "shell", "run_shell_command", "exec_command", "local_shell"})
_EDITS = frozenset({"edit", "str_replace", "replace", "str_replace_based_edit_tool"})
# Diff lines shown of one edit: a rewrite of a whole file is the ledger's to hold.
MAX_DIFF_LINES = 400


@dataclass(frozen=True)
class ToolShown:
    """A tool call as a person reads it: a command line (``shell``), an edit as a diff,
    a file written (its content) or read (its path), else its input as text."""

    kind: str
    text: str = ""
    path: str | None = None
    note: str = ""
    diff: tuple[tuple[str, str], ...] = ()


def tool_shown(name: str, value: Any) -> ToolShown:
    """How ``name``'s call with ``value`` reads: by what the tool does (Claude Code's
    Bash, Edit, MultiEdit, Write, Read; any agent's shell), else as ``tool_input``."""
    kind = name.lower()
    if isinstance(value, Mapping):
        command = value.get("command", value.get("cmd"))
        if kind in _SHELLS and isinstance(command, str | list):
            line = command if isinstance(command, str) else " ".join(map(str, command))
            return ToolShown("shell", line)
        path = next((v for k in ("file_path", "path", "filePath", "notebook_path")
                     if isinstance(v := value.get(k), str)), None)
        shown = _file_tool(kind, value, path)
        if shown is not None:
            return shown
    return ToolShown("input", tool_input(value))


def _file_tool(kind: str, value: Mapping[str, Any], path: str | None) -> ToolShown | None:
    """An edit (one, or several) as a diff, a file written, a file read; None for any
    other call."""
    old, new = value.get("old_string"), value.get("new_string")
    if kind in _EDITS and isinstance(old, str) and isinstance(new, str):
        return ToolShown("diff", path=path, diff=_diff_lines(old, new))
    edits = value.get("edits")
    if kind == "multiedit" and isinstance(edits, list):
        lines: list[tuple[str, str]] = []
        for edit in edits:
            if isinstance(edit, Mapping) and isinstance(edit.get("old_string"), str) \
                    and isinstance(edit.get("new_string"), str):
                lines += _diff_lines(edit["old_string"], edit["new_string"])
        return ToolShown("diff", path=path, diff=tuple(lines[:MAX_DIFF_LINES]),
                         note=f"{len(edits)} edits")
    if kind == "write" and isinstance(value.get("content"), str):
        content = value["content"]
        return ToolShown("file", content, path, f"{len(content.splitlines()):,} lines written")
    if kind == "read" and path is not None:
        span = [f"{k} {value[k]}" for k in ("offset", "limit") if k in value]
        return ToolShown("read", path=path, note=", ".join(map(str, span)))
    return None


def _diff_lines(old: str, new: str) -> tuple[tuple[str, str], ...]:
    """An edit as a unified diff's lines, each with its kind (add, del, hunk, ctx)."""
    return diff_lines(old.splitlines(), new.splitlines(), context=2, most=MAX_DIFF_LINES)


# An attempt's sandbox as the runner made it (``{TMPDIR}/evalledger-{run}-{16 hex}/{n}``,
# executor/_batch.py): where an agent without isolation found its workspace, so the path
# its tools named. What follows it is the path in the workspace.
_SANDBOX = re.compile(r"(?:/[^\s/\"'<>]+)*/evalledger-[^\s/\"'<>]+-[0-9a-f]{16}/[0-9]+"
                      r"(?:/|(?=[\s\"'<>:;,)\]}]|$))")


def in_workspace(text: str) -> str:
    """``text`` with each path into an attempt's sandbox made relative to its workspace
    (``/tmp/evalledger-…/17/median.py``: ``median.py``; the workspace itself: ``.``), as
    under isolation every path already reads from ``/work``."""
    if "/evalledger-" not in text:
        return text
    return _SANDBOX.sub(lambda m: "" if m.group().endswith("/") else ".", text)


def folded(text: str, most: int = FOLD_LINES) -> tuple[str, str, int]:
    """``text``'s first ``most`` lines, the rest, and how many lines the rest holds."""
    lines = text.split("\n")
    if len(lines) <= most + 2:  # folding two lines away saves nothing
        return text, "", 0
    return "\n".join(lines[:most]), "\n".join(lines[most:]), len(lines) - most


def tool_input(value: Any) -> str:
    """A tool call's input: a lone text field as itself, else indented JSON."""
    if isinstance(value, Mapping) and len(value) == 1:
        (only,) = value.values()
        if isinstance(only, str):
            return only
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


# -- an imported attempt's record (the old harness's task.json) ------------------------------


@dataclass(frozen=True)
class RecordField:
    name: str
    text: str
    nested: bool  # a list or an object: shown folded, as indented JSON
    size: int = 0


def imported_record(data: Mapping[str, Any] | None) -> list[RecordField] | None:
    """The fields of an imported ``task.json`` (the ``task.event`` an import records),
    one per row: text as text, a nested value folded; None for any other line."""
    if not data or "imported_from" not in data or not isinstance(data.get("record"), dict):
        return None
    fields = []
    for name, value in sorted(data["record"].items()):
        if isinstance(value, dict | list):
            fields.append(RecordField(name, json.dumps(value, ensure_ascii=False, indent=2,
                                                       sort_keys=True), True, len(value)))
        else:
            fields.append(RecordField(name, value if isinstance(value, str)
                                      else json.dumps(value), False))
    return fields
