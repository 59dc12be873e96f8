"""A run's figures as text cells and lines: the same words in ``show``, ``runs``,
``run``'s closing lines, ``run.md`` and the viewer.

Pure functions of a summary (or of a headline, or a row): no clock, no environment.
Free text from the ledger in them (a model's name, a role's) is shown as written, its
line breaks and control characters spelled out (``markdown_text``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from evalledger._text import money, visible
from evalledger.projections import (
    Interval,
    RoleUsage,
    RunHeadline,
    RunSummary,
    TaskRow,
    shown_status,
)
from evalledger.statuses import FailureClass


def markdown_text(value: object) -> str:
    """Free text from the ledger (an agent's model name, an error message) on one line,
    shown as written: line breaks and control characters spelled out (no heading can
    start, no terminal escape reaches whoever cats the file), no HTML interpreted."""
    text = visible(str(value), tabs=False)
    return text.replace("&", "&amp;").replace("<", "&lt;")  # "<" is what opens HTML


class Confined(Protocol):
    """What ``isolation_counts`` reads of a row: a ``TaskRow``, or those two fields of one
    read alone (``show``'s page of a long run)."""

    @property
    def attempts(self) -> int: ...
    @property
    def isolation(self) -> str: ...


def isolation_counts(rows: Iterable[Confined]) -> dict[str, int]:
    """How many rows (that ran) each isolation confined: what ``isolation_line`` says."""
    counts: dict[str, int] = {}
    for row in rows:
        if row.attempts:
            counts[row.isolation] = counts.get(row.isolation, 0) + 1
    return counts


def isolation_line(s: RunSummary, counts: Mapping[str, int] | None = None) -> str:
    """What confined the tasks, by how many (their latest attempts; ``counts`` when the
    summary holds only some of its rows): the same words in ``show``, ``run`` and
    run.md. ``none`` is named for what it is."""
    counts = isolation_counts(s.tasks) if counts is None else counts
    if not counts:
        return "-"
    said = ", ".join(f"{name} ({n} task{'s' if n != 1 else ''})"
                     for name, n in sorted(counts.items()))
    if any(name.startswith("none") for name in counts):
        said += "; none is not a security boundary (docs/isolation.md)"
    return said


def status_text(row: TaskRow) -> str:
    """A row's status as reports print it: its final status, ``(pending)`` when a
    ``--no-grade`` run left it for a regrade, ``(infra)`` when its infrastructure failed
    it (left out of the rates); ``UNFINISHED`` without one."""
    if row.final_status is None:
        return "UNFINISHED"
    if row.grade_pending:
        return f"{row.final_status.value} (pending)"
    if row.failure_class == FailureClass.INFRA:
        return f"{row.final_status.value} (infra)"
    return row.final_status.value


def status_word(status: str, cut_off: bool) -> str:
    """A run's status in one word for people, the same in ``runs``, ``show``, ``report``
    and ``run.md``: what the ledger says, except that a run it still calls ``running``
    whose process is gone is ``cut off`` (``resume`` finishes it): ``shown_status``."""
    return shown_status(status, lambda: cut_off).value


def cost_line(total_cost_usd: float, cost_complete: bool,
              usage_by_role: Sequence[RoleUsage | Mapping[str, Any]],
              shown: Callable[[str], str] = visible) -> str:
    """A run's cost for people, and whose it was when grading spent some: ``$14.1909
    (agent $14.1752, grader $0.0157)``; the total alone when all of it is the agent's.
    The same words in ``show``, ``runs``, run.md and the viewer. ``usage_by_role`` as
    the summary has it, or as its JSON (a headline read from a snapshot); ``shown``
    makes a role's name safe where it goes."""
    text = money(total_cost_usd, cost_complete)
    roles = [(r.role, r.cost_usd, r.cost_complete) if isinstance(r, RoleUsage)
             else (str(r["role"]), float(r["cost_usd"]), bool(r["cost_complete"]))
             for r in usage_by_role]
    if any(role != "agent" for role, _, _ in roles):
        text += " (" + ", ".join(f"{shown(role)} {money(cost, complete)}"
                                 for role, cost, complete in roles) + ")"
    return text


def unpriced_line(summary: RunSummary) -> str:
    """Why the cost is a floor: which models had no price, and how much they used
    (``a model with no price: mystery (15 tokens), ...``); the tasks whose agent's usage
    went unread (their task said ``stream_format: native``); and when some other
    attempt's spend was never reported in full though what it reported was priced (an
    imported TIMEOUT: the old harness killed the agent mid-turn), that too."""
    named = [f"{markdown_text(m.model or '(no model named)')} ({m.tokens.total:,} tokens)"
             for m in summary.unpriced]
    parts = [("a model with no price: " if len(named) == 1 else "models with no price: ")
             + ", ".join(named)] if named else []
    unread = sum(summary.spend_unread.values())
    parts += [f"spend unread: {_how_many_tasks(n)} printed {markdown_text(name)} usage under "
              f"stream_format: native (name it: stream_format: {markdown_text(name)})"
              for name, n in summary.spend_unread.items()]
    if summary.unreported and summary.tasks_cost_incomplete > unread:
        parts.append("spend never reported in full (an attempt stopped mid-turn)")
    return "; ".join(parts)


def calls_line(s: RunSummary) -> str | None:
    """``model calls through the gateway: 14 (2 failed: 529 x2)``; None without any."""
    if not s.model_calls:
        return None
    total = sum(s.model_calls.values())
    failed = {k: n for k, n in s.model_calls.items() if not (k.isdigit() and int(k) < 400)}
    said = f"model calls through the gateway: {total:,}"
    if failed:
        said += (f" ({sum(failed.values()):,} failed: "
                 + ", ".join(f"{markdown_text(k)} x{n}" for k, n in failed.items()) + ")")
    return said


def _how_many_tasks(n: int) -> str:
    return f"{n} task{'s' if n != 1 else ''}"


def variant_table(summary: RunSummary) -> tuple[list[str], list[list[str]]]:
    """The per-variant table (``show``, ``run.md``): header and rows, as text. Every
    rate with its 95% interval (docs/results.md, "How sure a number is")."""
    most = max((len(v.pass_at_k) for v in summary.variants), default=0)
    ks = [str(k) for k in range(1, most + 1)] if most > 1 else []
    header = ["variant", "tasks", "run", "succeeded", "failed", "error", "ungraded",
              "pass rate [95%]", "mean score [95%]", *(f"pass@{k} [95%]" for k in ks),
              *(f"pass^{k}" for k in ks[1:]), *(["flaky"] if ks else []), "cost",
              "cost/success", "tokens/success", "mean duration"]
    rows = []
    for v in summary.variants:
        score = "-" if v.mean_score is None else with_interval(
            f"{v.mean_score:.3f}", v.score_interval, "{:.3f}")
        rows.append([
            v.variant_id, str(v.tasks), str(v.tasks_run), str(v.tasks_succeeded),
            str(v.tasks_failed), str(v.tasks_error), str(v.tasks_ungraded),
            rate_cell(v.pass_rate, v.pass_rate_interval, v.graded), score,
            *(with_interval(f"{v.pass_at_k[k]:.1%}", v.pass_at_k_interval.get(k), "{:.1%}")
              if k in v.pass_at_k else "-" for k in ks),
            *(f"{v.pass_hat_k[k]:.1%}" if k in v.pass_hat_k else "-" for k in ks[1:]),
            *([str(len(v.flaky_tasks))] if ks else []),
            money(v.cost_usd, v.cost_complete),
            "-" if v.cost_per_success is None else money(v.cost_per_success, v.cost_complete),
            "-" if v.tokens_per_success is None else f"{v.tokens_per_success:,.0f}",
            "-" if v.mean_duration_seconds is None else f"{v.mean_duration_seconds:.1f}s",
        ])
    return header, rows


def model_table(summary: RunSummary) -> tuple[list[str], list[list[str]]]:
    """What each model used and cost (``show``, ``run.md``): header and rows, as text."""
    header = ["model", "input", "output", "cache read", "cache write", "cost"]
    rows = [[m.model or "(not named)", f"{m.tokens.input_tokens:,}",
             f"{m.tokens.output_tokens:,}", f"{m.tokens.cache_read_tokens:,}",
             f"{m.tokens.cache_write_tokens:,}", money(m.cost_usd, m.whole)]
            for m in summary.usage_by_model]
    return header, rows


def with_interval(value: str, interval: Interval | None, spelled: str) -> str:
    """``value [low, high]``, each end spelled by the format ``spelled``; ``value``
    alone without an interval."""
    if interval is None:
        return value
    return f"{value} [{spelled.format(interval.low)}, {spelled.format(interval.high)}]"


def infra_note(s: RunHeadline) -> str:
    """What a pass rate says of infrastructure failures: how many it leaves out, or that
    it counts them; "" without any."""
    if not s.tasks_infra:
        return ""
    if s.infra_counted:
        return f" ({s.tasks_infra} infrastructure failure(s) counted)"
    return (f" ({s.tasks_infra} infrastructure failure(s) left out; --count-infra counts "
            "them)")


def interval_kind(stderr: float | None) -> str:
    """What a pass rate's interval is: Wilson's, or clustered by task (replicates)."""
    return "Wilson" if stderr is None else "clustered by task"


def rate_cell(rate: float, interval: Interval, graded: int) -> str:
    """A pass rate with its interval; "-" with nothing graded."""
    return with_interval(f"{rate:.1%}", interval, "{:.1%}") if graded else "-"


def success_cost_line(s: RunHeadline) -> str:
    """What one success cost: the run's cost, and each role's apart when grading had a
    cost of its own; tokens likewise. "" without a success."""
    if s.cost_per_success is None:
        return ""
    roles = s.cost_per_success_by_role
    apart = (" (" + ", ".join(f"{role} {money(cost, True)}" for role, cost in roles.items())
             + ")") if roles.get("grader") else ""
    return (f"{money(s.cost_per_success, s.cost_complete)} per success{apart}, "
            f"{s.tokens_per_success:,.0f} tokens per success")
