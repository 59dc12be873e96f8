"""HTML for the viewer's pages and for the self-contained report: one set of templates.

The run page the server shows and the ``report.html`` written beside ``run.md``
are one template (``run.html``) rendered in two modes: ``app`` (links, live
updates, a stylesheet and a script served by the app) and ``file`` (the
stylesheet inline, no script, every task on one page). Both read a
``RunSummary``: the counting rules live in the projections, never here.

Everything a task produced is untrusted: Jinja escapes every value (autoescape),
and ``visible`` spells out control characters, so a task printing ``<script>``
or an ANSI escape shows those characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from evalledger import __version__
from evalledger._text import money, visible
from evalledger.projections import RunSummary, TaskRow, tag_stats
from evalledger.statuses import FinalStatus

from . import _charts
from ._params import choice, whole

HERE = Path(__file__).parent
STATIC = HERE / "static"
DASH = "\u2013"  # an en dash: no value
OUTCOMES = ("succeeded", "failed", "error", "ungraded", "unfinished")
SORTS = ("key", "status", "score", "duration", "tokens", "cost", "attempts")
# The task table's status filter: a bucket, or a final status (as its menu lists them).
TABLE_OUTCOMES = (*OUTCOMES, *(s.value for s in FinalStatus))


def spend(value: float | None, complete: bool, tokens: int) -> str:
    """A cost where nothing may have been used: a dash then, else ``money``."""
    if not tokens and not value and complete:
        return DASH
    return money(value, complete)


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return DASH
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def percent(value: float | None) -> str:
    return DASH if value is None else f"{value:.1%}"


def number(value: int | float | None) -> str:
    return DASH if value is None else f"{value:,}"


def when(ts: str | None) -> str:
    """An ISO timestamp as a person reads it (UTC, to the second)."""
    if not ts:
        return DASH
    try:
        moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return visible(ts)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + ("Z" if ts.endswith("Z") else "")


def outcome(row: TaskRow) -> str:
    return row.category.value if row.category is not None else "unfinished"


def status_of(row: TaskRow) -> str:
    return row.final_status.value if row.final_status is not None else "UNFINISHED"


def _url(path: str, **query: Any) -> str:
    """``path`` with the query parameters that have a value."""
    params = {k: v for k, v in query.items() if v not in (None, "", 0, False)}
    return path + (f"?{urlencode(params)}" if params else "")


def segment(value: str) -> str:
    """A run id or task key as a URL path (a task key's slashes stay slashes)."""
    return quote(value, safe="/")


@cache
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html", "xml"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(money=money, spend=spend, duration=duration, percent=percent, number=number,
                       when=when, visible=visible, outcome=outcome, status=status_of,
                       segment=segment)
    env.globals.update(url=_url, version=__version__, OUTCOMES=OUTCOMES)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


@cache
def stylesheet() -> Markup:
    return Markup(Path(STATIC / "viewer.css").read_text(encoding="utf-8"))


# -- the run page ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TableQuery:
    """How the run page's task table is filtered, sorted and paged (its URL query)."""

    outcome: str = ""
    tag: str = ""
    variant: str = ""
    text: str = ""
    sort: str = "key"
    descending: bool = False
    page: int = 1

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> TableQuery:
        """The table a URL asks for.

        Raises:
            BadParameter: a status, sort key, direction or page out of range (tags,
                variants and text are free: an unknown one matches nothing).
        """
        return cls(
            outcome=choice(query, "outcome", TABLE_OUTCOMES), tag=query.get("tag", ""),
            variant=query.get("variant", ""), text=query.get("q", ""),
            sort=choice(query, "sort", SORTS, "key"),
            descending=choice(query, "dir", ("asc", "desc")) == "desc",
            page=whole(query, "page", 1, low=1),
        )

    def params(self, **changes: Any) -> dict[str, Any]:
        """This query as URL parameters, with ``changes`` applied (and defaults left out)."""
        values: dict[str, Any] = {"outcome": self.outcome, "tag": self.tag, "variant": self.variant,
                  "q": self.text, "sort": "" if self.sort == "key" else self.sort,
                  "dir": "desc" if self.descending else "", "page": self.page}
        values.update(changes)
        if values.get("page") == 1:
            values["page"] = None
        return values

    def select(self, rows: Sequence[TaskRow]) -> list[TaskRow]:
        text = self.text.lower()
        chosen = [
            r for r in rows
            if (not self.outcome or outcome(r) == self.outcome
                or status_of(r) == self.outcome)
            and (not self.tag or self.tag in r.tags)
            and (not self.variant or r.variant_id == self.variant)
            and (not text or text in r.task_key.lower()
                 or text in (r.error_message or "").lower())
        ]
        key = _SORT_KEYS[self.sort]
        # Unknown values (an unfinished task's score) sort last either way.
        known = [r for r in chosen if key(r) is not None]
        unknown = [r for r in chosen if key(r) is None]
        known.sort(key=lambda r: (key(r), r.task_key), reverse=self.descending)
        return known + unknown


_SORT_KEYS: dict[str, Any] = {
    "key": lambda r: r.task_key,
    "status": status_of,
    "score": lambda r: r.weighted_score,
    "duration": lambda r: r.duration_seconds,
    "tokens": lambda r: r.tokens.total,
    "cost": lambda r: r.cost_usd,
    "attempts": lambda r: r.attempts,
}


def run_charts(summary: RunSummary) -> dict[str, Markup]:
    """The run page's charts, from its summary."""
    outcomes: dict[str, dict[str, int]] = {}
    for row in summary.tasks:
        counts = outcomes.setdefault(row.variant_id, dict.fromkeys(OUTCOMES, 0))
        counts[outcome(row)] += 1
    variants = summary.variants
    tags = tag_stats(summary)
    return {
        "outcomes": _charts.stacked_bars(sorted(outcomes.items()), "statuses per variant"),
        "variant_pass": _charts.bars(
            [(v.variant_id, v.pass_rate, f"{v.pass_rate:.1%} of {v.tasks_run}") for v in variants],
            "pass rate per variant", maximum=1.0),
        "tag_pass": _charts.bars(
            [(t.tag, t.pass_rate, f"{t.pass_rate:.1%} of {t.tasks_run}") for t in tags],
            "pass rate per tag", maximum=1.0),
        "durations": _charts.histogram(
            [r.duration_seconds for r in summary.tasks if r.duration_seconds is not None],
            "task durations"),
        "model_cost": _charts.bars(
            [(m.model or "(no model)", m.cost_usd, money(m.cost_usd, m.cost_complete))
             for m in summary.usage_by_model], "cost per model"),
        "variant_cost": _charts.bars(
            [(v.variant_id, v.cost_usd, money(v.cost_usd, v.cost_complete)) for v in variants
             if v.cost_usd or not v.cost_complete], "cost per variant"),
    }


# -- a Claude Code transcript as a conversation ------------------------------------------------

# A tool result longer than this shows its start; the ledger holds all of it.
MAX_SHOWN_RESULT = 4000


@dataclass
class Part:
    kind: str  # text | tool | result | meta
    text: str
    name: str = ""
    error: bool = False
    cut: int = 0


@dataclass
class Message:
    seq: int
    kind: str  # init | assistant | tool_result | result | other | raw
    who: str
    parts: list[Part]


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content blocks
        return "\n".join(_as_text(v.get("text", v) if isinstance(v, dict) else v) for v in value)
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _result_part(block: dict[str, Any]) -> Part:
    text = _as_text(block.get("content", ""))
    cut = max(0, len(text) - MAX_SHOWN_RESULT)
    return Part("result", text[:MAX_SHOWN_RESULT], error=bool(block.get("is_error")), cut=cut)


def conversation(lines: Sequence[Any]) -> list[Message]:
    """Transcript lines of a ``stream-json`` run as messages: the session's start, what the
    assistant said and which tools it called with what input, the tools' results, and the
    final result with its cost and turns. Lines that are not such JSON show as they are."""
    messages: list[Message] = []
    for line in lines:
        data = line.data
        kind = data.get("type") if isinstance(data, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if kind == "system":
            tools = data.get("tools") if isinstance(data.get("tools"), list) else []
            text = f"{data.get('subtype', 'system')}: model {data.get('model', '?')}"
            text += f", {len(tools)} tools" if tools else ""
            messages.append(Message(line.seq, "init", "session", [Part("meta", text)]))
        elif kind == "assistant" and isinstance(content, list):
            parts = []
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    parts.append(Part("text", str(block.get("text", ""))))
                elif block.get("type") == "tool_use":
                    parts.append(Part("tool", _as_text(block.get("input", {})),
                                      name=str(block.get("name", "tool"))))
                elif block.get("type") == "thinking":
                    parts.append(Part("meta", str(block.get("thinking", ""))))
            messages.append(Message(line.seq, "assistant", "assistant", parts))
        elif kind == "user" and isinstance(content, list):
            parts = [_result_part(b) if b.get("type") == "tool_result"
                     else Part("text", _as_text(b.get("text", b)))
                     for b in content if isinstance(b, dict)]
            messages.append(Message(line.seq, "tool_result", "tool result", parts))
        elif kind == "result":
            facts = [f"{data.get('subtype', 'result')}"]
            if data.get("total_cost_usd") is not None:
                facts.append(f"cost ${data['total_cost_usd']}")
            if data.get("num_turns") is not None:
                facts.append(f"{data['num_turns']} turns")
            if data.get("duration_ms") is not None:
                facts.append(f"{data['duration_ms'] / 1000:.1f}s")
            parts = [Part("meta", ", ".join(facts))]
            if data.get("result"):
                parts.append(Part("text", str(data["result"])))
            messages.append(Message(line.seq, "result", "result", parts))
        elif data is not None:
            messages.append(Message(line.seq, "other", str(kind or "event"),
                                    [Part("meta", line.text)]))
        else:
            messages.append(Message(line.seq, "raw", line.stream, [Part("meta", line.text)]))
    return messages
