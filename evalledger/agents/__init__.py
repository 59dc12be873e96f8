"""Agents' transcripts read as conversations: one model, one parser per stream format.

A task's ``stream_format`` says what its JSON lines are (docs/tasks.md). ``parser_for``
gives the parser of a format, or None for one that is no conversation (``native``:
usage lines only); a parser turns one JSON line into an ``Entry`` of typed steps
(``_conversation``); ``auto`` reads each line by the format its shape names
(``_detect``). The viewer's conversation view, the HTML report's transcript tail
and ``run --stream`` all read transcripts through here. A format is added by writing its
parser module and registering it in ``PARSERS``.

Pure: no I/O, no trio, no SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Any, Protocol

from . import _claude_code, _codex, _gemini, _opencode
from ._api import api_health as api_health
from ._conversation import Entry as Entry
from ._conversation import FinalResult as FinalResult
from ._conversation import Line as Line
from ._conversation import Note as Note
from ._conversation import Parser as Parser
from ._conversation import RunningUsage as RunningUsage
from ._conversation import SessionStart as SessionStart
from ._conversation import Step as Step
from ._conversation import Text as Text
from ._conversation import Thinking as Thinking
from ._conversation import Tokens as Tokens
from ._conversation import ToolCall as ToolCall
from ._conversation import ToolResult as ToolResult
from ._conversation import brief as brief
from ._conversation import final_facts as final_facts
from ._conversation import lines_of as lines_of
from ._detect import format_of as format_of
from ._fields import as_json


class _FormatParser(Protocol):
    def __call__(self, data: Mapping[str, Any], *, blocks: bool = True) -> Entry: ...


_FORMATS: dict[str, _FormatParser] = {
    "claude-code": _claude_code.parse, "codex": _codex.parse, "gemini": _gemini.parse,
    "opencode": _opencode.parse}
# The agents' formats: native (usage lines only) has no conversation; auto is any of them.
AGENT_FORMATS = tuple(_FORMATS)


def _auto(data: Mapping[str, Any], *, blocks: bool = True) -> Entry:
    """A line of ``stream_format: auto``, read by the parser of the format its shape
    names (``format_of``); a line no agent wrote is kept as a ``Note``."""
    parse = _FORMATS.get(format_of(data) or "")
    if parse is not None:
        return parse(data, blocks=blocks)
    return Entry("other", (Note(str(data.get("type") or "event"), as_json(data)),))


PARSERS: Mapping[str, Parser] = MappingProxyType({**_FORMATS, "auto": _auto})
"""stream_format -> the parser of its JSON lines."""

USAGE_PARSERS: Mapping[str, Parser] = MappingProxyType(
    {name: partial(parse, blocks=False)
     for name, parse in {**_FORMATS, "auto": _auto}.items()})
"""stream_format -> its parser without the messages' content: the session, each line's
model, message id and usage, the final result (what the executor meters usage by)."""


def parser_for(stream_format: str | None) -> Parser | None:
    """The parser of ``stream_format``'s lines; None when its lines are no conversation."""
    return PARSERS.get(stream_format or "native")


def read_line(stream_format: str | None, data: Mapping[str, Any]) -> Entry | None:
    """One JSON line of a transcript in ``stream_format`` as an entry (None: no parser)."""
    parser = parser_for(stream_format)
    return None if parser is None else parser(data)


def read_usage(stream_format: str | None, data: Mapping[str, Any]) -> Entry | None:
    """``read_line`` for what the line says of usage only: a message's steps are left
    out (None: no parser)."""
    parser = USAGE_PARSERS.get(stream_format or "native")
    return None if parser is None else parser(data)


__all__ = [
    "AGENT_FORMATS",
    "PARSERS",
    "USAGE_PARSERS",
    "Entry",
    "FinalResult",
    "Line",
    "Note",
    "Parser",
    "RunningUsage",
    "SessionStart",
    "Step",
    "Text",
    "Thinking",
    "Tokens",
    "ToolCall",
    "ToolResult",
    "api_health",
    "brief",
    "final_facts",
    "format_of",
    "lines_of",
    "parser_for",
    "read_line",
    "read_usage",
]
