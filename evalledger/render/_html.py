"""HTML for the viewer's pages and for the self-contained report: one set of templates.

The run page the server shows and the ``report.html`` written beside ``run.md``
are one template (``run.html``) rendered in two modes: ``app`` (links, live
updates, the viewer's script) and ``file`` (no script, every task on one page); the
stylesheet is inline in both, and so is the app's script (a page is drawn without
waiting on another request; the app's Content-Security-Policy allows both by their
hashes). Both read a ``RunSummary``: the counting rules live in the projections,
never here.

Everything a task produced is untrusted: Jinja escapes every value (autoescape),
and ``visible`` spells out control characters, so a task printing ``<script>``
or a terminal escape shows those characters; ANSI colour in a transcript is shown as
colour (``_ansi``: escaped text in spans of fixed classes).

Jinja is imported with this module, and this module only when a page or an HTML
report is rendered: ``run.md`` and a table's cells need neither.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape
from jinja2.runtime import Context
from markupsafe import Markup

from evalledger._text import money, visible
from evalledger._version import __version__
from evalledger.agents import final_facts
from evalledger.projections import (
    MODEL_API,
    Interval,
    RoleUsage,
    RunHeadline,
    RunSummary,
    TagStats,
    TaskRow,
    error_digest,
    tag_stats,
)
from evalledger.statuses import Category

from . import _charts
from ._ansi import ansi_html
from ._cells import infra_note, rate_cell, success_cost_line, variant_table
from ._highlight import Budget, highlighted
from ._memo import per_summary
from ._table import OUTCOMES, kinds_of, outcome, status_of, task_matrix
from ._transcript import (
    Try,
    between,
    folded,
    imported_record,
    in_workspace,
    result_text,
    seconds,
    tool_input,
    tool_shown,
)

HERE = Path(__file__).parent
STATIC = HERE / "static"
DASH = "\u2013"  # an en dash: no value


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
                       folded=folded, around=around, in_workspace=in_workspace,
                       highlighted=_highlighted)
    env.globals.update(url=_url, version=__version__, OUTCOMES=OUTCOMES, graded=graded,
                       tag_counts=tag_counts, role_costs=role_costs,
                       imported_differences=imported_differences, variant_table=variant_table,
                       success_cost_line=success_cost_line, rate_cell=rate_cell,
                       task_matrix=task_matrix, tool_shown=tool_shown, kind_counts=kind_counts,
                       kind_label=kind_label,
                       infra_note=infra_note, stylesheet=stylesheet, script=script)
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


def compile_templates() -> None:
    """Compile every template now: what a server does before it takes requests, so the
    first page of each kind is rendered in milliseconds, not after Jinja compiled it
    (measured on 2 cores: 100-170 ms for the run page's, 270-400 ms for all of them).
    Compiled templates stay in the environment's cache, which holds more than there
    are."""
    env = environment()
    for name in env.list_templates(extensions=["html"]):
        env.get_template(name)


def render_page(template: str, **context: Any) -> str:
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
    """The pages' stylesheet, inline in each (the report is one file; the viewer's pages
    are drawn without waiting on another request)."""
    return Markup(Path(STATIC / "viewer.css").read_text(encoding="utf-8"))


@cache
def script() -> Markup:
    """The viewer's script, inline at the end of each of its pages (none in the report).
    Its Content-Security-Policy allows it, and the stylesheet, by their hashes."""
    return Markup(Path(STATIC / "viewer.js").read_text(encoding="utf-8"))


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
            [(m.model or "(no model)", m.cost_usd, money(m.cost_usd, m.whole))
             for m in summary.usage_by_model], "cost per model"),
        "variant_cost": _charts.bars(
            [(v.variant_id, v.cost_usd, money(v.cost_usd, v.cost_complete)) for v in variants
             if v.cost_usd or not v.cost_complete], "cost per variant"),
    }


def usage_chart(attempt: Try, curve: Sequence[tuple[str, int]] | None) -> Markup:
    """Tokens used so far against seconds since the attempt started: the running count
    of its agent's messages where its transcript is a conversation (such an agent records
    its usage once, at the end), else its usage reports as they were recorded (behind
    the gateway always: each call's, as the API answered it)."""
    start = seconds(attempt.started.ts)

    def since(ts: str) -> float:
        return between(start, seconds(ts)) or 0.0

    points = []
    if curve and not any(u.call and u.call.get("via") == "gateway" for u in attempt.usage):
        points = [(since(ts), float(total)) for ts, total in curve]
    else:
        total = 0
        for usage in attempt.usage:
            total += usage.tokens.total
            points.append((since(usage.ts), float(total)))
    ended = attempt.completed or attempt.interrupted
    return _charts.steps(points, "tokens used over the attempt", y_title="tokens",
                         x_title="time since the attempt started",
                         until=since(ended.ts) if ended else None)


def runs_cost_pass(runs: Sequence[RunHeadline]) -> Markup | None:
    """Cost against pass rate for the runs listed, when they are runs of one suite (one
    experiment id) and two or more have graded tasks; else None."""
    graded = [r for r in runs if r.graded]
    if len(graded) < 2 or {r.experiment_id for r in runs} in ({None}, set()) or len(
            {r.experiment_id for r in runs}) != 1:
        return None
    return _charts.scatter(
        [(r.run_id, r.total_cost_usd, r.pass_rate,
          (r.pass_rate_interval.low, r.pass_rate_interval.high)) for r in graded],
        "cost against pass rate per run", x_title="cost (USD)", y_title="pass rate")
