"""Reports rendered from a ``RunSummary``: ``run.json`` and ``run.md``.

Pure functions of the summary: no clock, no environment. A report written at the
end of a run and one rebuilt from the ledger in another process are therefore
byte-identical. (There is deliberately no "generated at" field; the ledger
records when everything happened.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from evalledger._text import money, visible
from evalledger.statuses import FailureClass

from ._digest import error_digest as error_digest
from ._intervals import Interval
from ._results import RoleUsage, RunHeadline, RunSummary, TaskRow


def render_json(summary: RunSummary) -> str:
    return summary.model_dump_json(indent=2) + "\n"


def _text(value: object) -> str:
    """Free text from the ledger (an agent's model name, an error message) on one line,
    shown as written: line breaks and control characters spelled out (no heading can
    start, no terminal escape reaches whoever cats the file), no HTML interpreted."""
    text = visible(str(value), tabs=False)
    return text.replace("&", "&amp;").replace("<", "&lt;")  # "<" is what opens HTML


def _cell(value: object) -> str:
    return _text(value).replace("|", "\\|")


def _code(value: object) -> str:
    """An inline code span holding any text, backticks included (CommonMark)."""
    text = visible(str(value), tabs=False)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(summary: RunSummary, *, cut_off: bool = False) -> str:
    """``run.md``. ``cut_off``: the run is marked running but its process is gone (the
    caller knows; this function reads no process table), shown as ``runs`` shows it."""
    lines = [
        *_heading(summary, cut_off), *_counts(summary), *_variants(summary),
        *_tasks(summary), *_tokens_and_cost(summary), *_drift(summary),
        *_errors_in_full(summary), *_skipped_files(summary), *_environment(summary),
    ]
    return "\n".join(lines) + "\n"


# Each section of run.md, as its lines; every section after the heading opens with the
# blank line that separates it from the one before, and one that has nothing to say
# (no variants, no drift) has no lines at all.


def _heading(s: RunSummary, cut_off: bool) -> list[str]:
    experiment = f" (experiment `{s.experiment_id}`)" if s.experiment_id else ""
    duration = f"{s.duration_seconds:.1f}s" if s.duration_seconds is not None else "-"
    return [
        f"# Run {s.run_id}",
        "",
        f"- Status: **{status_word(s.status, cut_off)}**{experiment}",
        f"- Started: {s.started_at or '-'}",
        f"- Finished: {s.finished_at or '-'}",
        f"- Duration: {duration}",
        f"- Max parallel: {s.max_parallel}",
        f"- Models: {', '.join(map(_text, s.models)) if s.models else '-'}",
        f"- Isolation: {isolation_line(s)}",
        *([f"- {said[0].upper()}{said[1:]}"] if (said := calls_line(s)) else []),
    ]


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


def _counts(s: RunSummary) -> list[str]:
    return [
        "",
        "## Summary",
        "",
        "| planned | run | succeeded | failed | (token budget) | (cost budget) | error "
        "| ungraded | unfinished | pass rate [95%] | cost per success |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s.tasks_planned} | {s.tasks_run} | {s.tasks_succeeded} | {s.tasks_failed} "
        f"| {s.tasks_token_budget_exceeded} | {s.tasks_cost_budget_exceeded} | {s.tasks_error} "
        f"| {s.tasks_ungraded} | {s.tasks_unfinished} "
        f"| {rate_cell(s.pass_rate, s.pass_rate_interval, s.graded)} "
        f"| {_text(success_cost_line(s)) or '-'} |",
        *(["", f"Pass rates:{_text(infra_note(s))}."] if s.tasks_infra else []),
    ]


def _variants(s: RunSummary) -> list[str]:
    if not s.variants:
        return []
    header, rows = variant_table(s)
    return ["", "## Variants", "", "| " + " | ".join(header) + " |",
            "|---|" + "---:|" * (len(header) - 1),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)]


def _tasks(s: RunSummary) -> list[str]:
    return [
        "",
        "## Tasks",
        "",
        "| task | status | score | duration | tokens | cost | error |",
        "|---|---|---:|---:|---:|---:|---|",
        *map(_task_row, s.tasks),
    ]


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


def _task_row(row: TaskRow) -> str:
    status = status_text(row)
    score = f"{row.weighted_score:.2f}" if row.weighted_score is not None else "-"
    duration = f"{row.duration_seconds:.1f}s" if row.duration_seconds is not None else "-"
    return (f"| {_cell(row.task_key)} | {status} | {score} | {duration} | {row.tokens.total} "
            f"| {money(row.cost_usd, row.cost_complete)} "
            f"| {_cell(error_digest(row.error_message, failure_class=row.failure_class))} |")


def _tokens_and_cost(s: RunSummary) -> list[str]:
    t = s.tokens
    lines = [
        "",
        "## Tokens and cost",
        "",
        f"- Input: {t.input_tokens}, output: {t.output_tokens}, cache read: "
        f"{t.cache_read_tokens}, cache write: {t.cache_write_tokens}",
        f"- Total cost: {cost_line(s.total_cost_usd, s.cost_complete, s.usage_by_role, _text)}",
    ]
    if not s.cost_complete:
        lines.append(f"- Cost is a floor: {s.tasks_cost_incomplete} task(s) "
                     f"{'used ' if s.unpriced else 'with '}{unpriced_line(s)}"
                     f"{' (see `--pricing`)' if s.unpriced else ''}.")
    if len(s.usage_by_model) > 1:  # one model: the totals above say it all
        header, rows = model_table(s)
        lines += ["", "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1),
                  *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)]
    return lines


def _drift(s: RunSummary) -> list[str]:
    if not s.fingerprint_drift:
        return []
    return ["", "## Drift since the run started", "",
            *(f"- at {_text(drift.get('at'))}: " + "; ".join(map(_text, drift.get("lines", [])))
              for drift in s.fingerprint_drift)]


def _errors_in_full(s: RunSummary) -> list[str]:
    """The messages the task table shows only a digest of, whole."""
    whole = [(row.task_key, row.error_message) for row in s.tasks
             if row.error_message
             and error_digest(row.error_message, failure_class=row.failure_class)
             != row.error_message.strip()]
    if not whole:
        return []
    lines = ["", "## Errors in full", ""]
    for key, message in whole:
        lines += [f"- {_code(key)}:", "", *_fenced(message), ""]
    return lines[:-1]


def _skipped_files(s: RunSummary) -> list[str]:
    if not s.skipped_tasks:
        return []
    return ["", "## Skipped task files", "",
            *(f"- {_code(k.path)}: {_cell(k.reason)}" for k in s.skipped_tasks)]


def _environment(s: RunSummary) -> list[str]:
    lines = ["", "## Environment", ""]
    lines += [f"- {_text(name)}: {_text(_shown(value))}"
              for name, value in s.version_consensus.items()]
    for name, values in s.version_drift.items():
        spread = ", ".join(f"{_text(v)} ({n})" for v, n in values.items())
        lines.append(f"- **{_text(name)} differs across tasks**: {spread}")
    return lines


def _fenced(text: str) -> list[str]:
    """A fenced code block holding ``text`` as written, line breaks included, indented
    under a list item: longer fences than any run of backticks inside, so nothing in it
    can close the block; control characters spelled out; nothing interpreted."""
    body = visible(text.replace("\r\n", "\n"), newlines=True).split("\n")
    fence = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`+", text))])
    return [f"  {line}" if line else "" for line in (fence, *body, fence)]


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def status_word(status: str, cut_off: bool) -> str:
    """A run's status in one word for people, the same in ``runs``, ``show``, ``report``
    and ``run.md``: what the ledger says, except that a run it still calls ``running``
    whose process is gone is ``cut off`` (``resume`` finishes it): ``shown_status``."""
    from ._status import shown_status

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
    named = [f"{_text(m.model or '(no model named)')} ({m.tokens.total:,} tokens)"
             for m in summary.unpriced]
    parts = [("a model with no price: " if len(named) == 1 else "models with no price: ")
             + ", ".join(named)] if named else []
    unread = sum(summary.spend_unread.values())
    parts += [f"spend unread: {_how_many_tasks(n)} printed {_text(name)} usage under "
              f"stream_format: native (name it: stream_format: {_text(name)})"
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
                 + ", ".join(f"{_text(k)} x{n}" for k, n in failed.items()) + ")")
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
             f"{m.tokens.cache_write_tokens:,}", money(m.cost_usd, m.cost_complete)]
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
