"""Reports rendered from a ``RunSummary``: ``run.json`` and ``run.md``.

Pure functions of the summary: no clock, no environment. A report written at the
end of a run and one rebuilt from the ledger in another process are therefore
byte-identical. (There is deliberately no "generated at" field; the ledger
records when everything happened.)
"""

from __future__ import annotations

import json
import re

from evalledger._text import money, visible
from evalledger.projections import RunSummary, TaskRow, error_digest

from ._cells import (
    calls_line,
    cost_line,
    infra_note,
    isolation_line,
    model_table,
    rate_cell,
    status_text,
    status_word,
    success_cost_line,
    unpriced_line,
    variant_table,
)
from ._cells import markdown_text as _text


def render_json(summary: RunSummary) -> str:
    return summary.model_dump_json(indent=2) + "\n"


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
