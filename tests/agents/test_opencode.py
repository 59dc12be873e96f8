"""``stream_format: opencode``: ``opencode run --format json`` (its real shape, opencode
``cli/cmd/run.ts`` and ``session/message-v2.ts``) read for usage and cost per step, the
version (asked: the stream names none) and the conversation, through real runs of a
command that replays it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalledger.agents import FinalResult, Text, Thinking, Tokens, ToolCall, ToolResult, read_line
from evalledger.ledger import TaskCompleted, TaskEmitted, TaskOutput, TaskUsage
from evalledger.projections import SummaryFold, fold
from evalledger.render import unpriced_line
from evalledger.statuses import FailureClass, FinalStatus
from tests.executor.batches import RUN, config, make_task, of_type
from tests.executor.replay import ran, replay

from .transcripts.opencode import SESSION, TRANSCRIPT, T

# By hand, per step (reasoning billed as output, so output + reasoning), and OpenCode's
# own cost of it at Sonnet 4.5's list price ($3 in, $15 out, $0.30 cache read, $3.75
# cache write a million): 4560 + 4110 + 3072 + 7680 = 19422e-6; 930 + 2700 + 3686.4 +
# 2400 = 9716.4e-6; 285 + 630 + 3878.4 + 787.5 = 5580.9e-6.
STEPS = [(1520, 274, 10240, 2048, 0.019422), (310, 180, 12288, 640, 0.0097164),
         (95, 42, 12928, 210, 0.0055809)]
MODEL = "anthropic/claude-sonnet-4-5"


def test_each_step_is_booked_at_the_cost_opencode_reports(tmp_path: Path) -> None:
    task = make_task("opencode", replay(tmp_path, TRANSCRIPT), stream_format="opencode",
                     model=MODEL, agent_version_command="echo 1.0.118")
    task = task.model_copy(update={"source": str(tmp_path / "opencode.yaml")})
    evs = ran(tmp_path, [task], config(tmp_path))
    usages = of_type(evs, TaskUsage)
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens,
             u.cost_usd) for u in usages] == STEPS
    assert {u.model for u in usages} == {MODEL}
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.SUCCESS and done.cost_complete
    assert done.cost_usd == pytest.approx(sum(s[4] for s in STEPS), abs=1e-12)
    assert done.environment_info["agent_version"] == "1.0.118"
    assert done.environment_info["model"] == MODEL
    assert len(of_type(evs, TaskEmitted)) == len(TRANSCRIPT)


def test_a_step_opencode_priced_at_zero_is_priced_from_the_rate_card(tmp_path: Path) -> None:
    """$0 for tokens is a model OpenCode has no price for: priced here instead, and
    unknown (never $0) when the rate card has none either."""
    free = [{**line, "part": {**line["part"], "cost": 0}} if line["type"] == "step_finish"
            else line for line in TRANSCRIPT]
    priced = make_task("priced", replay(tmp_path, free, name="a"), stream_format="opencode",
                       model=MODEL)
    unknown = make_task("unknown", replay(tmp_path, free, name="b"), stream_format="opencode",
                        model="someone/model-without-a-price")
    evs = ran(tmp_path, [priced, unknown], config(tmp_path))
    done = {e.task_key: e for e in of_type(evs, TaskCompleted)}
    assert done[priced.task_key].cost_usd == pytest.approx(sum(s[4] for s in STEPS), abs=1e-9)
    assert done[unknown.task_key].cost_usd is None
    assert not done[unknown.task_key].cost_complete


def test_a_token_budget_stops_it_at_the_step_that_passed_it(tmp_path: Path) -> None:
    task = make_task("opencode", replay(tmp_path, TRANSCRIPT, hang=True),
                     stream_format="opencode", model=MODEL, budget={"max_tokens": 20000},
                     timeout=3600)
    evs = ran(tmp_path, [task], config(tmp_path))
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.TOKEN_BUDGET_EXCEEDED
    # Step one is 14,082 tokens, step two brings 13,418 more: read no further. What it
    # did after it was stopped is owed (unknown): the cost is a floor.
    assert [(u.input_tokens, u.estimate) for u in of_type(evs, TaskUsage)] == [
        (1520, False), (310, False), (0, True)]
    assert len(of_type(evs, TaskEmitted)) == 8
    assert not done.cost_complete


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_interrupted_step_leaves_the_cost_a_floor(tmp_path: Path) -> None:
    """Killed mid-step: the steps that finished are booked at their cost; the one that
    did not is booked as unknown, so the cost is a floor, not a total."""
    task = make_task("opencode", replay(tmp_path, TRANSCRIPT[:6], hang=True),
                     stream_format="opencode", model=MODEL, timeout=2)
    evs = ran(tmp_path, [task], config(tmp_path))
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.TIMEOUT
    assert [(u.cost_usd, u.estimate) for u in of_type(evs, TaskUsage)] == [
        (0.019422, False), (None, True)]
    # What had a price is the attempt's cost, marked a floor (as show's total says).
    assert (done.cost_usd, done.cost_complete) == (pytest.approx(0.019422), False)
    assert done.tokens.input_tokens == 1520
    # Said as spend never reported, not as a model without a price (it has one).
    summary = fold(SummaryFold(RUN), evs).summary()
    assert (summary.unpriced, summary.unreported) == ([], True)
    assert unpriced_line(summary) == "spend never reported in full (an attempt stopped mid-turn)"


def test_garbage_and_a_cut_line_are_recorded_as_text_and_the_rest_is_read(
        tmp_path: Path) -> None:
    lines: list[Any] = [TRANSCRIPT[0], "Error: \x00 not json", '{"type":"step_finish","ti',
                        *TRANSCRIPT[1:]]
    task = make_task("opencode", replay(tmp_path, lines), stream_format="opencode",
                     model=MODEL)
    evs = ran(tmp_path, [task], config(tmp_path))
    assert [o.line for o in of_type(evs, TaskOutput)] == [
        "Error: \x00 not json", '{"type":"step_finish","ti']
    assert len(of_type(evs, TaskUsage)) == 3


def test_an_api_error_is_said_and_stays_the_agents(tmp_path: Path) -> None:
    error = {"type": "error", "timestamp": T, "sessionID": SESSION, "error": {
        "name": "APIError", "data": {"message": "Overloaded", "statusCode": 529,
                                     "isRetryable": True}}}
    task = make_task("opencode", replay(tmp_path, [TRANSCRIPT[0], error], exit_code=1),
                     stream_format="opencode", model=MODEL)
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert (done.final_status, done.failure_class) == (FinalStatus.FAILURE, FailureClass.AGENT)
    assert "APIError 529: Overloaded" in (done.error_message or "")


def test_the_conversation_reads_as_steps() -> None:
    steps = [s for line in TRANSCRIPT if (e := read_line("opencode", line)) for s in e.steps]
    assert [type(s).__name__ for s in steps] == [
        "Thinking", "ToolCall", "ToolResult", "FinalResult", "ToolCall", "ToolResult",
        "ToolCall", "ToolResult", "FinalResult", "Text", "FinalResult"]
    assert isinstance(steps[0], Thinking) and "len + 1" in steps[0].text
    calls = [s for s in steps if isinstance(s, ToolCall)]
    assert [(c.name, c.call_id) for c in calls] == [
        ("bash", "toolu_01"), ("read", "toolu_02"), ("edit", "toolu_03")]
    results = [s for s in steps if isinstance(s, ToolResult)]
    assert [(r.text, r.is_error) for r in results] == [
        ("AssertionError: mean([2, 4]) == 2.0\n", False),
        ("File not found: /w/nope.py", True), ("", False)]
    finals = [s for s in steps if isinstance(s, FinalResult)]
    assert [(f.subtype, f.cost_usd, f.tokens) for f in finals] == [
        (f"step {reason}", cost, Tokens(fresh, out, read, write))
        for reason, (fresh, out, read, write, cost)
        in zip(["tool-calls", "tool-calls", "stop"], STEPS, strict=True)]
    assert any(isinstance(s, Text) and s.text == "Fixed the divisor in mean()." for s in steps)
