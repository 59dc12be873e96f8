"""``stream_format: gemini``: Gemini CLI's ``--output-format stream-json`` (its real
shape, gemini-cli ``packages/core/src/output/types.ts``) read for usage per model, cost,
version and the conversation, through real runs of a command that replays it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalledger.agents import FinalResult, Text, Tokens, ToolCall, ToolResult, read_line
from evalledger.ledger import TaskCompleted, TaskEmitted, TaskOutput, TaskUsage
from evalledger.pricing import DEFAULT_RATES
from evalledger.statuses import FailureClass, FinalStatus
from tests.executor.batches import config, make_task, of_type
from tests.executor.replay import ran, replay

from .transcripts.gemini import BODY, INIT, RESULT, TRANSCRIPT, TS

# By hand, per model: fresh input is `input`, cached is a cache read, output is what
# total_tokens holds beyond the prompt (the answer and the thoughts, billed as output):
# pro 11845 - 11220 = 625 (289 answered, 336 thought), flash 1176 - 1084 = 92.
# The models add up to the session: 3028 + 1084 = 4112 fresh, 8192 cached, 625 + 92 = 717
# output, 13021 in all.
PER_MODEL = {"gemini-2.5-pro": (3028, 625, 8192), "gemini-2.5-flash": (1084, 92, 0)}
# At list price (genai-prices, $ per million: pro 1.25 in, 10 out, 0.125 cached; flash
# 0.30, 2.50): pro 3785 + 6250 + 1024 = 11059e-6, flash 325.2 + 230 = 555.2e-6.
COST = 0.011059 + 0.0005552


def _counts(fresh: int, output: int, cached: int) -> Any:
    from evalledger.ledger import TokenCounts

    return TokenCounts(input_tokens=fresh, output_tokens=output, cache_read_tokens=cached)


def test_usage_per_model_is_priced_and_the_version_recorded(tmp_path: Path) -> None:
    task = make_task("gemini", replay(tmp_path, TRANSCRIPT), stream_format="gemini")
    evs = ran(tmp_path, [task], config(tmp_path))
    usages = of_type(evs, TaskUsage)
    assert {u.model: (u.input_tokens, u.output_tokens, u.cache_read_tokens)
            for u in usages} == PER_MODEL
    assert {u.model: u.cost_usd for u in usages} == {
        model: DEFAULT_RATES.price(model, _counts(*t)) for model, t in PER_MODEL.items()}
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.SUCCESS and done.cost_complete
    assert done.cost_usd == pytest.approx(COST, abs=1e-12)
    assert done.tokens.total == 13021
    assert done.environment_info["gemini_cli_version"] == "0.18.4"
    assert done.environment_info["model"] == "gemini-2.5-flash, gemini-2.5-pro"
    assert len(of_type(evs, TaskEmitted)) == len(TRANSCRIPT)


def test_an_older_cli_without_models_books_its_totals_to_the_sessions_model(
        tmp_path: Path) -> None:
    stats = {k: v for k, v in RESULT["stats"].items() if k != "models"}  # type: ignore[union-attr]
    init = {k: v for k, v in INIT.items() if k != "cli_version"}
    task = make_task("gemini", replay(tmp_path, [init, *BODY, {**RESULT, "stats": stats}]),
                     stream_format="gemini", model="not-this-one")
    evs = ran(tmp_path, [task], config(tmp_path))
    [usage] = of_type(evs, TaskUsage)
    # 12304 - 8192 fresh, 8192 cached, 13021 - 12304 = 717 out.
    assert (usage.model, usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (
        "gemini-2.5-pro", 4112, 8192, 717)
    [done] = of_type(evs, TaskCompleted)
    assert "gemini_cli_version" not in done.environment_info


def test_a_cost_budget_stops_a_second_session_at_its_result(tmp_path: Path) -> None:
    """The stream reports usage at its result only: a command that runs the CLI twice
    is stopped at the first result that passes the budget, and nothing after it is read."""
    task = make_task("gemini", replay(tmp_path, TRANSCRIPT * 3, hang=True),
                     stream_format="gemini", budget={"max_cost_usd": 0.02}, timeout=3600)
    evs = ran(tmp_path, [task], config(tmp_path))
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.COST_BUDGET_EXCEEDED
    assert len(of_type(evs, TaskEmitted)) == 2 * len(TRANSCRIPT)
    # Two sessions reported; what the command did after it was stopped is owed: a floor.
    usages = of_type(evs, TaskUsage)
    assert sum(u.cost_usd or 0.0 for u in usages) == pytest.approx(2 * COST, abs=1e-12)
    assert (usages[-1].estimate, usages[-1].cost_usd) == (True, None)
    # What had a price is the attempt's cost, marked a floor (as show's total says).
    assert (done.cost_usd, done.cost_complete) == (pytest.approx(2 * COST, abs=1e-12), False)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_interrupted_session_leaves_its_cost_unknown_never_zero(tmp_path: Path) -> None:
    """Killed before its result: the tokens it used are nowhere in the stream, so the
    usage is booked as unknown (an estimate of no tokens, no cost) and the cost is not
    complete."""
    task = make_task("gemini", replay(tmp_path, [INIT, *BODY], hang=True),
                     stream_format="gemini", timeout=2)
    evs = ran(tmp_path, [task], config(tmp_path))
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.TIMEOUT
    [usage] = of_type(evs, TaskUsage)
    assert (usage.model, usage.estimate, usage.cost_usd, usage.input_tokens) == (
        "gemini-2.5-pro", True, None, 0)
    assert done.cost_usd is None and not done.cost_complete


def test_garbage_and_a_cut_line_are_recorded_as_text_and_the_rest_is_read(
        tmp_path: Path) -> None:
    lines: list[Any] = [INIT, "\x1b[31mnot json\x1b[0m", '{"type": "result", "stats": {"tot',
                        *BODY, RESULT]
    task = make_task("gemini", replay(tmp_path, lines), stream_format="gemini")
    evs = ran(tmp_path, [task], config(tmp_path))
    assert [o.line for o in of_type(evs, TaskOutput)] == [
        "\x1b[31mnot json\x1b[0m", '{"type": "result", "stats": {"tot']
    assert sorted(u.model for u in of_type(evs, TaskUsage)) == sorted(PER_MODEL)


def test_a_quota_error_from_the_model_api_is_said_and_stays_the_agents(tmp_path: Path) -> None:
    failed = {"type": "result", "timestamp": TS, "status": "error", "error": {
        "type": "Error", "message": "[API Error: 429 RESOURCE_EXHAUSTED: Quota exceeded for "
                                    "quota metric 'Generate Content API requests per minute']"},
        "stats": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0, "cached": 0,
                  "input": 0, "duration_ms": 2100, "tool_calls": 0, "models": {}}}
    task = make_task("gemini", replay(tmp_path, [INIT, BODY[0], failed], exit_code=1),
                     stream_format="gemini")
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert (done.final_status, done.failure_class) == (FinalStatus.FAILURE, FailureClass.AGENT)
    assert "429 RESOURCE_EXHAUSTED" in (done.error_message or "")


def test_the_conversation_reads_as_steps() -> None:
    entries = [read_line("gemini", line) for line in TRANSCRIPT]
    steps = [s for e in entries if e is not None for s in e.steps]
    assert [type(s).__name__ for s in steps] == [
        "SessionStart", "Text", "Text", "Text", "ToolCall", "ToolResult", "ToolCall",
        "ToolResult", "ToolCall", "ToolResult", "Text", "FinalResult"]
    assert [e.role for e in entries if e is not None][:3] == ["session", "user", "assistant"]
    calls = [s for s in steps if isinstance(s, ToolCall)]
    assert [c.name for c in calls] == ["run_shell_command", "read_file", "replace"]
    assert calls[0].input == {"command": "python3 test_stats.py",
                              "description": "Run the tests"}
    results = [s for s in steps if isinstance(s, ToolResult)]
    assert [(r.is_error, r.call_id) for r in results] == [
        (False, c.call_id) for c in calls[:1]] + [(True, calls[1].call_id),
                                                   (False, calls[2].call_id)]
    assert results[1].text == "File not found: /w/nope.py"
    texts = [s for s in steps if isinstance(s, Text)]
    assert texts[-1] == Text("Fixed the divisor in mean().", delta=True)
    assert not texts[0].delta  # the user's prompt: whole
    [final] = [s for s in steps if isinstance(s, FinalResult)]
    assert (final.subtype, final.duration_seconds) == ("success", 18.45)
    assert final.tokens == Tokens(input=4112, output=717, cache_read=8192)
    assert dict(final.models) == {m: Tokens(input=f, output=o, cache_read=c)
                                  for m, (f, o, c) in PER_MODEL.items()}
