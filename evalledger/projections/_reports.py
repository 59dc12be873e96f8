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

from ._results import RunSummary


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


def render_markdown(summary: RunSummary) -> str:
    s = summary
    lines = [
        f"# Run {s.run_id}",
        "",
        f"- Status: **{s.status}**" + (f" (experiment `{s.experiment_id}`)" if s.experiment_id
                                         else ""),
        f"- Started: {s.started_at or '-'}",
        f"- Finished: {s.finished_at or '-'}",
        f"- Duration: {f'{s.duration_seconds:.1f}s' if s.duration_seconds is not None else '-'}",
        f"- Max parallel: {s.max_parallel}",
        f"- Models: {', '.join(map(_text, s.models)) if s.models else '-'}",
        "",
        "## Summary",
        "",
        "| planned | run | succeeded | failed | (token budget) | (cost budget) | error "
        "| ungraded | unfinished | pass rate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s.tasks_planned} | {s.tasks_run} | {s.tasks_succeeded} | {s.tasks_failed} "
        f"| {s.tasks_token_budget_exceeded} | {s.tasks_cost_budget_exceeded} | {s.tasks_error} "
        f"| {s.tasks_ungraded} | {s.tasks_unfinished} | {s.pass_rate:.1%} |",
    ]
    if s.variants:
        header, rows = variant_table(s)
        lines += ["", "## Variants", "", "| " + " | ".join(header) + " |",
                  "|---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    lines += [
        "",
        "## Tasks",
        "",
        "| task | status | score | duration | tokens | cost | error |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in s.tasks:
        status = row.final_status.value if row.final_status else "UNFINISHED"
        score = f"{row.weighted_score:.2f}" if row.weighted_score is not None else "-"
        duration = f"{row.duration_seconds:.1f}s" if row.duration_seconds is not None else "-"
        lines.append(
            f"| {_cell(row.task_key)} | {status} | {score} | {duration} | {row.tokens.total} "
            f"| {money(row.cost_usd, row.cost_complete)} "
            f"| {_cell((row.error_message or '')[:120])} |"
        )
    t = s.tokens
    lines += [
        "",
        "## Tokens and cost",
        "",
        f"- Input: {t.input_tokens}, output: {t.output_tokens}, cache read: "
        f"{t.cache_read_tokens}, cache write: {t.cache_write_tokens}",
        f"- Total cost: {money(s.total_cost_usd, s.cost_complete)}",
    ]
    if not s.cost_complete:
        lines.append(f"- Cost is a floor: {s.tasks_cost_incomplete} task(s) used "
                     f"{unpriced_line(s)} (see `--pricing`).")
    if s.fingerprint_drift:
        lines += ["", "## Drift since the run started", ""]
        for drift in s.fingerprint_drift:
            lines.append(f"- at {_text(drift.get('at'))}: "
                         + "; ".join(map(_text, drift.get("lines", []))))
    if s.skipped_tasks:
        lines += ["", "## Skipped task files", ""]
        lines += [f"- {_code(k.path)}: {_cell(k.reason)}" for k in s.skipped_tasks]
    lines += ["", "## Environment", ""]
    lines += [f"- {_text(name)}: {_text(_shown(value))}"
              for name, value in s.version_consensus.items()]
    for name, values in s.version_drift.items():
        spread = ", ".join(f"{_text(v)} ({n})" for v, n in values.items())
        lines.append(f"- **{_text(name)} differs across tasks**: {spread}")
    return "\n".join(lines) + "\n"


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def unpriced_line(summary: RunSummary) -> str:
    """Which models had no price, and how much they used: ``mystery (15 tokens), ...``."""
    named = [f"{_text(m.model or '(no model named)')} ({m.tokens.total:,} tokens)"
             for m in summary.unpriced]
    return ("a model with no price: " if len(named) == 1 else "models with no price: ") + (
        ", ".join(named))


def variant_table(summary: RunSummary) -> tuple[list[str], list[list[str]]]:
    """The per-variant table (``show``, ``run.md``): header and rows, as text."""
    most = max((len(v.pass_at_k) for v in summary.variants), default=0)
    ks = [str(k) for k in range(1, most + 1)] if most > 1 else []
    header = ["variant", "tasks", "run", "succeeded", "failed", "error", "ungraded",
              "pass rate", "mean score ± se", *(f"pass@{k}" for k in ks), "cost",
              "mean duration"]
    rows = []
    for v in summary.variants:
        score = "-" if v.mean_score is None else f"{v.mean_score:.3f}" + (
            "" if v.score_stderr is None else f" ± {v.score_stderr:.3f}")
        rows.append([
            v.variant_id, str(v.tasks), str(v.tasks_run), str(v.tasks_succeeded),
            str(v.tasks_failed), str(v.tasks_error), str(v.tasks_ungraded),
            f"{v.pass_rate:.1%}", score,
            *(f"{v.pass_at_k[k]:.1%}" if k in v.pass_at_k else "-" for k in ks),
            money(v.cost_usd, v.cost_complete),
            "-" if v.mean_duration_seconds is None else f"{v.mean_duration_seconds:.1f}s",
        ])
    return header, rows
