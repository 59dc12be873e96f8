"""HTML for the viewer's pages and for the self-contained report: one set of templates.

The run page the server shows and the ``report.html`` written beside ``run.md``
are one template (``run.html``) rendered in two modes: ``app`` (links, live
updates, a stylesheet and a script served by the app) and ``file`` (the
stylesheet inline, no script, every task on one page). Both read a
``RunSummary``: the counting rules live in the projections, never here.

Everything a task produced is untrusted: Jinja escapes every value (autoescape),
and ``visible`` spells out control characters, so a task printing ``<script>``
or a terminal escape shows those characters; ANSI colour in a transcript is shown as
colour (``_ansi``: escaped text in spans of fixed classes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape
from jinja2.runtime import Context
from markupsafe import Markup

from evalledger._text import money, visible
from evalledger._version import __version__
from evalledger.agents import Entry, Text, final_facts, parser_for
from evalledger.app import diff_lines
from evalledger.projections import (
    MODEL_API,
    Interval,
    RoleUsage,
    RunSummary,
    TagStats,
    TaskRow,
    error_digest,
    failure_kinds,
    infra_note,
    rate_cell,
    success_cost_line,
    tag_stats,
    variant_table,
)
from evalledger.statuses import Category, FinalStatus

from . import _charts
from ._ansi import ansi_html
from ._highlight import Budget, highlighted
from ._memo import per_summary, recent_per_summary
from ._params import choice, whole
from ._queries import Attempt, Line

HERE = Path(__file__).parent
STATIC = HERE / "static"
DASH = "\u2013"  # an en dash: no value
OUTCOMES = ("succeeded", "failed", "error", "ungraded", "unfinished")
SORTS = ("failures", "key", "status", "score", "duration", "tokens", "cost", "attempts")
# The task table's order when it is not asked for one: errors and failures first (a
# person opens a run to read them), then the rest; by key within each.
DEFAULT_SORT = "failures"
# The task table's status filter: a bucket, or a final status (as its menu lists them).
# "flagged": the rows a scan flagged (docs/results.md, "Flags"), whatever their status.
FLAGGED = "flagged"
# "claimed": the agent said it ended well, and the grader did not pass it.
CLAIMED = "claimed"
TABLE_OUTCOMES = (*OUTCOMES, *(s.value for s in FinalStatus), FLAGGED, CLAIMED)


def spend(value: float | None, complete: bool, tokens: int) -> str:
    """A cost where nothing may have been used: a dash then, else ``money``."""
    if not tokens and not value and complete:
        return DASH
    return money(value, complete)


def role_costs(usage_by_role: Sequence[RoleUsage]) -> str:
    """Whose the cost was, when grading spent some: ``agent $14.1752, grader $0.0157``;
    empty when all of it was the agent's (every run that grades without a model)."""
    if all(r.role == "agent" for r in usage_by_role):
        return ""
    return ", ".join(f"{visible(r.role)} {money(r.cost_usd, r.cost_complete)}"
                     for r in usage_by_role)


def imported_differences(imported: Mapping[str, Any] | None, summary: RunSummary) -> str:
    """What this ledger counts differently from an imported run.json's own totals (the
    import said it too), on one line; empty when they agree or it stated none."""
    totals = (imported or {}).get("totals")
    if not isinstance(totals, dict):
        return ""
    from evalledger.importers.legacy import differences

    return ", ".join(differences(totals, summary))


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


def status_of(row: TaskRow, running: Collection[str] = ()) -> str:
    """A task's status as a person reads it: its final status, else RUNNING (an attempt
    is running now), NOT STARTED (no attempt yet) or UNFINISHED (its attempt ended
    without one: interrupted, or its run's process is gone)."""
    if row.final_status is not None:
        return row.final_status.value
    if row.task_key in running:
        return "RUNNING"
    return "NOT STARTED" if row.attempts == 0 else "UNFINISHED"


def _has_outcome(row: TaskRow, wanted: str, claimed: Collection[str]) -> bool:
    """Whether ``row`` is of the status ``wanted`` (a table's status filter)."""
    if wanted == FLAGGED:
        return bool(row.flags)
    if wanted == CLAIMED:  # the agent said it ended well, and the grader did not pass it
        return row.category in (Category.FAILED, Category.ERROR) and row.task_key in claimed
    return wanted in (outcome(row), status_of(row))


def kinds_of(row: TaskRow) -> tuple[str, ...]:
    """``failure_kinds`` of a row."""
    status = row.final_status.value if row.final_status is not None else None
    return failure_kinds(status, row.error_message, failure_class=row.failure_class,
                         flags=row.flags)


def kind_label(kind: str) -> str:
    """A failure kind as the bar names it: by its cause (``agent crashed``, ``tests
    failed``, ``model API failed``...), a criterion's type (``file_exists ✗``), a
    status (``ERROR``)."""
    if kind == MODEL_API:
        return "model API failed"
    if kind.isupper() or " " in kind:
        return visible(kind)
    return f"{visible(kind)} \u2717"


def kind_counts(summary: RunSummary) -> list[tuple[str, int]]:
    """How many of the run's tasks had each kind of failure, the most first (counted
    once per summary): the run page's bar of failure kinds."""
    def count() -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for row in summary.tasks:
            if row.category in (Category.FAILED, Category.ERROR):
                for kind in kinds_of(row):
                    counts[kind] = counts.get(kind, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    return per_summary(summary, "kind_counts", count)


def status_class(row: TaskRow, running: Collection[str] = ()) -> str:
    """The pill's class of ``status_of``."""
    if row.final_status is None and row.task_key in running:
        return "st-running"
    if row.final_status is None and row.attempts == 0:
        return "o-not-started"
    return f"o-{outcome(row)}"


def graded(succeeded: int, graded: int, ungraded: int, interval: Interval | None = None
           ) -> str:
    """A pass rate said with what it is of: ``4 of 18 graded (22.2% [9.0%, 45.2%]), 2
    ungraded``, the interval where given."""
    rest = f", {ungraded} ungraded" if ungraded else ""
    if not graded:
        return f"no graded tasks{rest}"
    said = f"{succeeded / graded:.1%}" + (
        f" [{interval.low:.1%}, {interval.high:.1%}]" if interval is not None else "")
    return f"{succeeded} of {graded} graded ({said}){rest}"


def _ends(interval: Interval) -> tuple[float, float]:
    return interval.low, interval.high


def tag_counts(summary: RunSummary) -> dict[str, tuple[int, int]]:
    """Per tag, its graded keys (as ``tag_stats`` rates by: infrastructure failures
    left out unless counted) and its ungraded ones (counted once per summary)."""
    return per_summary(summary, "tag_counts", lambda: _tag_counts(summary))


def _tag_counts(summary: RunSummary) -> dict[str, tuple[int, int]]:
    graded = {t.tag: t.tasks_graded for t in summary_tags(summary)}
    counts: dict[str, tuple[int, int]] = {}
    for row in summary.tasks:
        for tag in dict.fromkeys(row.tags):
            ungraded = counts.get(tag, (0, 0))[1]
            counts[tag] = (graded.get(tag, 0), ungraded + (row.category == Category.UNGRADED))
    return counts


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
                       status_class=status_class, segment=segment, ansi=ansi_html,
                       tool_input=tool_input, result_text=result_text,
                       final_facts=final_facts, record=imported_record, digest=_digest,
                       folded=folded, around=around,
                       highlighted=_highlighted)
    env.globals.update(url=_url, version=__version__, OUTCOMES=OUTCOMES, graded=graded,
                       tag_counts=tag_counts, role_costs=role_costs,
                       imported_differences=imported_differences, variant_table=variant_table,
                       success_cost_line=success_cost_line, rate_cell=rate_cell,
                       task_matrix=task_matrix, tool_shown=tool_shown, kind_counts=kind_counts,
                       kind_label=kind_label,
                       infra_note=infra_note)
    return env


def around(text: str, mark: str, width: int = 240) -> str:
    """``text`` cut to about ``width`` characters around the first ``mark`` in it (a
    search's long line: the part that holds what was looked for), its cuts marked."""
    if len(text) <= width:
        return text
    found = re.search(re.escape(mark), text, re.IGNORECASE) if mark else None
    at = found.start() if found else 0
    start = max(0, min(at - width // 3, len(text) - width))
    end = start + width
    return ("\u2026" if start else "") + text[start:end] + ("\u2026" if end < len(text) else "")


def _digest(message: str | None, failure_class: str | None = None) -> str:
    return visible(error_digest(message, failure_class=failure_class))


def render(template: str, **context: Any) -> str:
    """``template`` with ``context``; its diffs coloured within one ``Budget`` of time
    (``highlight_budget``: a page's, unless the caller gives its own)."""
    context.setdefault("highlight_budget", Budget())
    return environment().get_template(template).render(**context)


@pass_context
def _highlighted(context: Context, diff: Sequence[tuple[str, str]],
                 path: str | None) -> list[tuple[str, Markup]]:
    return highlighted(diff, path, context.get("highlight_budget"))


@cache
def stylesheet() -> Markup:
    return Markup(Path(STATIC / "viewer.css").read_text(encoding="utf-8"))


# -- the run page ----------------------------------------------------------------------------


@runtime_checkable
class _MultiMapping(Protocol):
    """A query string that can hold a name more than once (Starlette's)."""

    def getlist(self, key: str) -> list[str]: ...


@dataclass(frozen=True)
class TableQuery:
    """How the run page's task table is filtered, sorted and paged (its URL query)."""

    outcomes: tuple[str, ...] = ()
    """The statuses kept (any of them); none: every status."""
    kind: str = ""
    """A failure kind (``failure_kinds``): a failed criterion's type, a status, or
    ``model API``."""
    tag: str = ""
    variant: str = ""
    text: str = ""
    sort: str = DEFAULT_SORT
    descending: bool = False
    page: int = 1

    @property
    def outcome(self) -> str:
        """The statuses as one parameter's value (``failed,error``)."""
        return ",".join(self.outcomes)

    @property
    def filtered(self) -> bool:
        return bool(self.outcomes or self.kind or self.tag or self.variant or self.text)

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> TableQuery:
        """The table a URL asks for: ``outcome`` repeated (as a form's boxes send it) or
        comma-separated (as the page's links spell it).

        Raises:
            BadParameter: a status, sort key, direction or page out of range (tags,
                variants, kinds and text are free: an unknown one matches nothing).
        """
        given = query.getlist("outcome") if isinstance(query, _MultiMapping) else [
            query.get("outcome", "")]
        outcomes = [choice({"outcome": one}, "outcome", TABLE_OUTCOMES)
                    for value in given for one in value.split(",")]
        return cls(
            outcomes=tuple(dict.fromkeys(o for o in outcomes if o)),
            kind=query.get("kind", ""), tag=query.get("tag", ""),
            variant=query.get("variant", ""), text=query.get("q", ""),
            sort=choice(query, "sort", SORTS, DEFAULT_SORT),
            descending=choice(query, "dir", ("asc", "desc")) == "desc",
            page=whole(query, "page", 1, low=1),
        )

    def params(self, **changes: Any) -> dict[str, Any]:
        """This query as URL parameters, with ``changes`` applied (and defaults left out)."""
        values: dict[str, Any] = {
            "outcome": self.outcome, "kind": self.kind, "tag": self.tag,
            "variant": self.variant, "q": self.text,
            "sort": "" if self.sort == DEFAULT_SORT else self.sort,
            "dir": "desc" if self.descending else "", "page": self.page}
        values.update(changes)
        if values.get("page") == 1:
            values["page"] = None
        return values

    def rows_of(self, summary: RunSummary,
                claimed: Collection[str] = frozenset()) -> list[TaskRow]:
        """The summary's rows this query keeps, in its order: selected once per summary
        and query while it is among the recent ones (every page of a table reads the
        same selection). ``claimed``: the keys whose agent said it ended well (read
        from the transcripts, once per summary)."""
        key = (self.outcomes, self.kind, self.tag, self.variant, self.text, self.sort,
               self.descending)
        return recent_per_summary(summary, "rows", key,
                                  lambda: self.select(summary.tasks, claimed))

    def select(self, rows: Sequence[TaskRow],
               claimed: Collection[str] = frozenset()) -> list[TaskRow]:
        """The rows this query keeps, in its order."""
        chosen = [r for r in rows if self.keeps(r, claimed)]
        key = _SORT_KEYS[self.sort]
        # Unknown values (an unfinished task's score) sort last either way.
        known = [r for r in chosen if key(r) is not None]
        unknown = [r for r in chosen if key(r) is None]
        known.sort(key=lambda r: (key(r), r.task_key), reverse=self.descending)
        return known + unknown

    def keeps(self, row: TaskRow, claimed: Collection[str] = frozenset()) -> bool:
        """Whether ``row`` passes every filter of this query: any of its statuses, and
        each other filter."""
        if self.outcomes and not any(_has_outcome(row, o, claimed) for o in self.outcomes):
            return False
        if self.kind and self.kind not in kinds_of(row):
            return False
        if (self.tag and self.tag not in row.tags) or (
                self.variant and row.variant_id != self.variant):
            return False
        text = self.text.lower()
        return not text or text in row.task_key.lower() or text in (
            row.error_message or "").lower()

    def as_list(self) -> str:
        """This query (its filters and order, not its page) as one URL parameter's value:
        how a task page knows the list it was opened from (its neighbours, the way back)."""
        return urlencode({k: v for k, v in self.params(page=1).items()
                          if v not in (None, "", 0, False)})


@dataclass(frozen=True)
class Neighbours:
    """Where a task sits in the list it was opened from: the keys before and after it,
    and the nearest failures (failed or error) each way."""

    index: int
    total: int
    previous: str | None = None
    next: str | None = None
    previous_failure: str | None = None
    next_failure: str | None = None


def neighbours(rows: Sequence[TaskRow], task_key: str) -> Neighbours | None:
    """``task_key``'s neighbours in ``rows`` (None when it is not among them)."""
    keys = [r.task_key for r in rows]
    try:
        at = keys.index(task_key)
    except ValueError:
        return None
    failed = [outcome(r) in ("failed", "error") for r in rows]
    before = [i for i in range(at) if failed[i]]
    after = [i for i in range(at + 1, len(rows)) if failed[i]]
    return Neighbours(
        index=at, total=len(rows), previous=keys[at - 1] if at else None,
        next=keys[at + 1] if at + 1 < len(keys) else None,
        previous_failure=keys[before[-1]] if before else None,
        next_failure=keys[after[0]] if after else None)


@dataclass(frozen=True)
class MatrixRow:
    """One task id across the variants: each variant's replicates, in order (None where
    a variant has no such task), and how much they disagree."""

    task_id: str
    cells: tuple[tuple[TaskRow, ...] | None, ...]
    disagreement: float


@dataclass(frozen=True)
class Matrix:
    variants: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    total: int
    """Task ids in the run (``rows`` may hold fewer: the most disagreeing first)."""


def task_matrix(summary: RunSummary, most: int = 200) -> Matrix | None:
    """The run's task ids by variant, the ones whose outcomes disagree most first (then
    by id); None when there is nothing to cross (one variant, one replicate each).
    Made once per summary (``per_summary``): a 100,000-task run's took 0.45 s a page."""
    return per_summary(summary, ("task_matrix", most), lambda: _task_matrix(summary, most))


def _task_matrix(summary: RunSummary, most: int) -> Matrix | None:
    variants = tuple(sorted({r.variant_id for r in summary.tasks}))
    by_id: dict[str, dict[str, list[TaskRow]]] = {}
    for row in summary.tasks:
        by_id.setdefault(row.task_id, {}).setdefault(row.variant_id, []).append(row)
    if len(variants) < 2 and all(len(v) < 2 for cells in by_id.values() for v in cells.values()):
        return None
    rows = []
    for task_id, cells in by_id.items():
        outcomes = [outcome(r) for rs in cells.values() for r in rs]
        passed = sum(o == "succeeded" for o in outcomes)
        # 0 when every outcome is one (all passed, or none did); 1 at an even split.
        disagreement = 2 * min(passed, len(outcomes) - passed) / len(outcomes)
        rows.append(MatrixRow(task_id, tuple(
            tuple(sorted(cells[v], key=lambda r: r.replicate_index)) if v in cells else None
            for v in variants), round(disagreement, 6)))
    rows.sort(key=lambda r: (-r.disagreement, r.task_id))
    return Matrix(variants, tuple(rows[:most]), len(rows))


_FAILURES_FIRST = {"error": 0, "failed": 1, "unfinished": 2, "ungraded": 3, "succeeded": 4}
_SORT_KEYS: dict[str, Any] = {
    "failures": lambda r: _FAILURES_FIRST[outcome(r)],
    "key": lambda r: r.task_key,
    "status": status_of,
    "score": lambda r: r.weighted_score,
    "duration": lambda r: r.duration_seconds,
    "tokens": lambda r: r.tokens.total,
    "cost": lambda r: r.cost_usd,
    "attempts": lambda r: r.attempts,
}


def summary_tags(summary: RunSummary) -> list[TagStats]:
    """``tag_stats`` of the summary, computed once per summary (``per_summary``)."""
    return per_summary(summary, "tag_stats", lambda: tag_stats(summary))


def not_started(summary: RunSummary) -> int:
    """The summary's tasks with no attempt yet, counted once per summary."""
    return per_summary(summary, "not_started",
                       lambda: sum(1 for r in summary.tasks if r.attempts == 0))


def run_charts(summary: RunSummary) -> dict[str, Markup]:
    """The run page's charts, from its summary (made once per summary)."""
    return per_summary(summary, "charts", lambda: _run_charts(summary))


def _run_charts(summary: RunSummary) -> dict[str, Markup]:
    outcomes: dict[str, dict[str, int]] = {}
    for row in summary.tasks:
        counts = outcomes.setdefault(row.variant_id, dict.fromkeys(OUTCOMES, 0))
        counts[outcome(row)] += 1
    variants = summary.variants
    tags = summary_tags(summary)
    by_tag = tag_counts(summary)
    return {
        "outcomes": _charts.stacked_bars(sorted(outcomes.items()), "statuses per variant"),
        "variant_pass": _charts.bars(
            [(v.variant_id, v.pass_rate, graded(v.tasks_succeeded, v.graded, v.tasks_ungraded,
                                                v.pass_rate_interval)) for v in variants],
            "pass rate per variant (95% interval)", maximum=1.0,
            errors=[_ends(v.pass_rate_interval) if v.graded else None for v in variants]),
        "tag_pass": _charts.bars(
            [(t.tag, t.pass_rate, graded(t.tasks_succeeded, *by_tag.get(t.tag, (0, 0)),
                                         t.pass_rate_interval)) for t in tags],
            "pass rate per tag (95% Wilson interval)", maximum=1.0,
            errors=[_ends(t.pass_rate_interval) if t.tasks_graded else None for t in tags]),
        "variant_cost_pass": _charts.scatter(
            [(v.variant_id, v.cost_usd, v.pass_rate, _ends(v.pass_rate_interval))
             for v in variants if v.graded],
            "cost against pass rate per variant", x_title="cost (USD)",
            y_title="pass rate"),
        "durations": _charts.histogram(
            [r.duration_seconds for r in summary.tasks if r.duration_seconds is not None],
            "task durations", x_title="duration", y_title="tasks"),
        "model_cost": _charts.bars(
            [(m.model or "(no model)", m.cost_usd, money(m.cost_usd, m.cost_complete))
             for m in summary.usage_by_model], "cost per model"),
        "variant_cost": _charts.bars(
            [(v.variant_id, v.cost_usd, money(v.cost_usd, v.cost_complete)) for v in variants
             if v.cost_usd or not v.cost_complete], "cost per variant"),
    }


# -- a transcript: attempts apart, a conversation read by its agent's parser ----------------

# A tool result longer than this shows its start; the ledger holds all of it.
MAX_SHOWN_RESULT = 4000


@dataclass(frozen=True)
class AttemptMark:
    """Where an attempt's lines begin, in a transcript of several attempts."""

    number: int
    attempt: Attempt | None
    kind: str = "mark"


@dataclass(frozen=True)
class Said:
    """One transcript line of the conversation view: an agent's entry, or (``entry``
    None) a line that is no JSON of its agent (stdout, stderr) shown as it is."""

    line: Line
    entry: Entry | None
    kind: str = "said"
    elapsed: float | None = None
    """Seconds from its attempt's start to this line (None: a time unreadable)."""
    took: float | None = None
    """Seconds from the line shown before it in the same attempt (or the start)."""

    @property
    def seq(self) -> int:
        return self.line.seq


def with_marks(lines: Sequence[Line], tries: Sequence[Attempt],
               previous: int | None) -> list[Line | AttemptMark]:
    """``lines`` with a mark before the first line of each attempt, when the task has
    more than one; ``previous`` is the attempt of the row just before the first line
    (None: there is none), so a page or a live tail that starts inside an attempt does
    not mark it again."""
    if len(tries) < 2:
        return list(lines)
    by_number = {t.number: t for t in tries}
    rows: list[Line | AttemptMark] = []
    for line in lines:
        if line.attempt != previous:
            rows.append(AttemptMark(line.attempt, by_number.get(line.attempt)))
            previous = line.attempt
        rows.append(line)
    return rows


def conversation(rows: Sequence[Line | AttemptMark], tries: Sequence[Attempt], *,
                 from_start: bool = True) -> list[Said | AttemptMark]:
    """Transcript rows as a conversation: each JSON line read by the parser of its
    attempt's stream format (``agents``); other lines as they are. ``from_start``: the
    rows begin the transcript (else the first row's line before is not among them, and
    what it took is not known)."""
    reading = _Conversation(tries, from_start)
    for row in rows:
        reading.add(row)
    return reading.items()


class _Conversation:
    """``conversation``'s reading: the items so far, each attempt's last time, and the
    chunks of a streamed answer the last item began (joined once it ends)."""

    def __init__(self, tries: Sequence[Attempt], from_start: bool) -> None:
        self.parsers = {t.number: parser_for(t.stream_format) for t in tries}
        self.began = {t.number: seconds(t.started.ts) for t in tries}
        # Per attempt, its last item's time: its start where the rows begin it.
        self.latest: dict[int, float | None] = dict(self.began) if from_start else {}
        self.previous: int | None = None
        self.said: list[Said | AttemptMark] = []
        self.chunks: list[str] = []

    def add(self, row: Line | AttemptMark) -> None:
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

    def _entry(self, row: Line | AttemptMark) -> Entry | None:
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
