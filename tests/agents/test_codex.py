"""``stream_format: codex``: Codex's ``exec --json`` transcript (its real shape, codex-rs
``exec_events.rs``) read for usage, cost, model and the conversation, through a real
run of a script that replays it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalledger.agents import FinalResult, Text, Thinking, ToolCall, ToolResult, read_line
from evalledger.ledger import TaskCompleted, TaskEmitted, TaskOutput, TaskUsage
from evalledger.pricing import DEFAULT_RATES
from evalledger.statuses import FailureClass, FinalStatus
from tests.executor.batches import config, make_task, of_type
from tests.executor.replay import ran, replay

from .transcripts.codex import TRANSCRIPT

# By hand: turn 1 is 24763 - 24448 = 315 fresh input, 24448 cached, 122 output (its 64
# reasoning tokens among them); turn 2 is 606 fresh, 24704 cached, 58 output.
TURNS = [(315, 122, 24448), (606, 58, 24704)]


def _agent(tmp_path: Path, lines: list[Any], exit_code: int = 0) -> list[str]:
    return replay(tmp_path, lines, exit_code)


def _price(fresh: int, output: int, cached: int) -> float:
    rate = DEFAULT_RATES.rate_of("gpt-5")
    assert rate is not None and rate.cache_read is not None
    return (fresh * rate.input + output * rate.output + cached * rate.cache_read) / 1e6


def test_usage_per_turn_is_priced_for_the_tasks_model(tmp_path: Path) -> None:
    task = make_task("codex", _agent(tmp_path, TRANSCRIPT), stream_format="codex",
                     model="gpt-5")
    evs = ran(tmp_path, [task], config(tmp_path))
    usages = of_type(evs, TaskUsage)
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.model)
            for u in usages] == [(*t, "gpt-5") for t in TURNS]
    assert [u.cost_usd for u in usages] == [
        DEFAULT_RATES.price("gpt-5", _counts(t)) for t in TURNS]
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.SUCCESS
    assert done.environment_info["model"] == "gpt-5"
    assert done.tokens.input_tokens == 315 + 606 and done.tokens.output_tokens == 180
    assert done.cost_usd == pytest.approx(sum(_price(*t) for t in TURNS), abs=1e-12)
    assert len(of_type(evs, TaskEmitted)) == len(TRANSCRIPT)


def _counts(turn: tuple[int, int, int]) -> Any:
    from evalledger.ledger import TokenCounts

    fresh, output, cached = turn
    return TokenCounts(input_tokens=fresh, output_tokens=output, cache_read_tokens=cached)


def test_an_unpriced_model_leaves_the_cost_unknown_never_zero(tmp_path: Path) -> None:
    task = make_task("codex", _agent(tmp_path, TRANSCRIPT), stream_format="codex",
                     model="gpt-99-unknown")
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert done.cost_usd is None and not done.cost_complete


def test_a_token_budget_stops_it_at_the_turn_that_passed_it(tmp_path: Path) -> None:
    task = make_task("codex", _agent(tmp_path, TRANSCRIPT), stream_format="codex",
                     model="gpt-5", budget={"max_tokens": 20000})
    evs = ran(tmp_path, [task], config(tmp_path))
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.TOKEN_BUDGET_EXCEEDED
    # The first turn's usage, and nothing read after the line that passed the budget;
    # what the command did after it was stopped is owed (unknown): the cost is a floor.
    assert [(u.input_tokens, u.estimate) for u in of_type(evs, TaskUsage)] == [
        (315, False), (0, True)]
    assert not done.cost_complete
    assert len(of_type(evs, TaskEmitted)) == 7


def test_garbage_and_a_cut_line_are_recorded_as_text_and_the_rest_is_read(
    tmp_path: Path,
) -> None:
    lines: list[Any] = [TRANSCRIPT[0], "not json at all", '{"type": "turn.completed", "us',
                        *TRANSCRIPT[1:]]
    task = make_task("codex", _agent(tmp_path, lines), stream_format="codex", model="gpt-5")
    evs = ran(tmp_path, [task], config(tmp_path))
    assert [o.line for o in of_type(evs, TaskOutput)] == [
        "not json at all", '{"type": "turn.completed", "us']
    assert [u.input_tokens for u in of_type(evs, TaskUsage)] == [315, 606]


def test_a_turn_failed_on_its_model_api_is_said_and_stays_the_agents(tmp_path: Path) -> None:
    """Its word only: a printed failure of its API is no evidence (#45)."""
    lines = [TRANSCRIPT[0], TRANSCRIPT[1],
             {"type": "error", "message": "Reconnecting... 1/5 (stream disconnected before "
                                          "completion: 503 Service Unavailable)"},
             {"type": "turn.failed", "error": {"message": "exceeded retry limit, last "
                                                         "status: 503 Service Unavailable"}}]
    task = make_task("codex", _agent(tmp_path, lines, exit_code=1), stream_format="codex",
                     model="gpt-5")
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert (done.final_status, done.failure_class) == (FinalStatus.FAILURE,
                                                       FailureClass.AGENT)
    assert "(the agent's model API failed: turn.failed: exceeded retry limit" in (
        done.error_message or "")


def test_the_conversation_reads_as_steps() -> None:
    steps = [s for line in TRANSCRIPT for s in (read_line("codex", line) or _none()).steps]
    kinds = [type(s).__name__ for s in steps]
    assert kinds == ["SessionStart", "Thinking", "ToolCall", "ToolResult", "ToolCall",
                     "ToolResult", "FinalResult", "ToolCall", "ToolResult", "Text",
                     "FinalResult"]
    calls = [s for s in steps if isinstance(s, ToolCall)]
    assert [(c.name, c.input) for c in calls] == [
        ("shell", {"command": "bash -lc 'pytest -q'"}),
        ("file_change", {"changes": [{"path": "calc.py", "kind": "update"}]}),
        ("shell", {"command": "bash -lc 'pytest -q'"})]
    results = [s for s in steps if isinstance(s, ToolResult)]
    assert [(r.text, r.is_error) for r in results] == [
        ("exit code 1\n1 failed\n", True), ("update calc.py", False), ("1 passed\n", False)]
    assert any(isinstance(s, Thinking) and "failing test" in s.text for s in steps)
    assert any(isinstance(s, Text) and "off-by-one" in s.text for s in steps)
    finals = [s for s in steps if isinstance(s, FinalResult)]
    assert [f.tokens.input if f.tokens else None for f in finals] == [315, 606]


def _none() -> Any:
    from evalledger.agents import Entry

    return Entry("other")
