"""The real Claude Code, Codex, Gemini CLI and OpenCode (pinned, from npm) through the gateway,
against fake APIs: in every ending, the tokens and cost recorded per model are what the
upstream answered (its truth), never what the CLI printed, and no key of the runner's
reaches the CLI.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from evalledger.ledger import TokenCounts
from evalledger.pricing import DEFAULT_RATES, RateCard, normalize_model
from evalledger.statuses import FinalStatus
from tests.cli.helpers import evalledger
from tests.fake_agent_api import FakeAgentApi, Turn, Usage

from .real_agent_tasks import (
    CODEX,
    GEMINI,
    GEMINI_AUTO,
    GEMINI_MODEL,
    GEMINI_ROUTED,
    GEMINI_ROUTER,
    OPENCODE,
    OPUS,
    RUNNER_KEY,
    SUBAGENT,
    Behind,
    claude_task,
    gateway_env,
    recorded,
    run_to_its_end,
    script,
    through_gateway,
    truth,
    write,
)

# The slow tier: the real agent CLI (a Node.js program) in every ending.
pytestmark = pytest.mark.slow


def _env(api: FakeAgentApi) -> dict[str, str]:
    return gateway_env(api)


def _task(folder: Path, api: FakeAgentApi, **fields: Any) -> Path:
    return write(folder, answer=through_gateway(claude_task(folder, api, **fields)))


def _exact(db: Path, api: FakeAgentApi, rates: RateCard = DEFAULT_RATES,
           ) -> dict[str, TokenCounts]:
    """Every call's usage recorded as the upstream answered it: per model the truth,
    no estimate, each priced from the rates (the rate card's, a pricing file's); the
    attempts' totals the same."""
    by_model, usages, completed, _ = recorded(db)
    assert all(call.finished for call in api.served)
    assert by_model == truth(api.served)
    assert all(u.call and u.call["via"] == "gateway" and not u.estimate for u in usages)
    for usage in usages:
        assert usage.cost_usd == rates.price(usage.model, usage.tokens)
    total = TokenCounts()
    for usage in usages:
        total += usage.tokens
    if completed:  # an interrupted attempt has none: its usage events are its spend
        assert sum((c.tokens for c in completed), TokenCounts()) == total
        assert all(c.cost_complete for c in completed)
    # The upstream only ever saw the runner's key; the CLI only its token.
    assert {r["headers"].get("x-api-key") or r["headers"].get("authorization")
            or r["headers"].get("x-goog-api-key")
            for r in api.requests} <= {RUNNER_KEY, f"Bearer {RUNNER_KEY}"}
    return by_model


@pytest.mark.parametrize("subagent", [False, True], ids=["alone", "subagent-on-haiku"])
def test_claude_code_through_the_gateway_books_what_each_model_was_answered(
        tmp_path: Path, subagent: bool) -> None:
    db = tmp_path / "l.db"
    with FakeAgentApi(script(subagent=subagent), main_model=OPUS, side=SUBAGENT) as api:
        out = evalledger(tmp_path, db, "run", str(_task(tmp_path, api)), env=_env(api))
    assert out.returncode == 0, out.stdout + out.stderr
    by_model = _exact(db, api)
    assert len(by_model) == 1 + subagent
    (done,) = recorded(db)[2]
    assert done.final_status == FinalStatus.SUCCESS


@pytest.mark.parametrize("ending", ["ctrl-c", "timeout"])
def test_claude_code_cut_off_through_the_gateway_is_booked_exact(tmp_path: Path,
                                                                 ending: str) -> None:
    """Its second answer is held after its start; the attempt ends there (Ctrl-C to the
    runner, its timeout) and the CLI is killed. The gateway reads the answer on once it
    comes: the usage is the upstream's, whole, where the CLI's stream showed 1 token."""
    db = tmp_path / "l.db"
    hold = threading.Event()
    with FakeAgentApi(script(hold=hold), main_model=OPUS) as api:
        tasks = _task(tmp_path, api, timeout=8 if ending == "timeout" else 60)
        run_to_its_end(tmp_path, db, tasks, api, hold, _env(api), ending=ending)
    by_model, usages, completed, _ = recorded(db)
    assert len(api.served) == 2 and _exact(db, api) == by_model
    if ending == "timeout":
        assert [c.final_status for c in completed] == [FinalStatus.TIMEOUT]
    assert [u.call and u.call.get("cut", False) for u in usages] == [False, False]


def test_claude_code_past_its_budget_gets_no_further_call(tmp_path: Path) -> None:
    """Its first answer passes the task's budget: the runner stops it at the next line
    it prints, before its next call (a call made meanwhile is refused at the gateway);
    the upstream never sees one, and the attempt ends COST_BUDGET_EXCEEDED."""
    db = tmp_path / "l.db"
    turns = [Turn(command="echo 42 > answer.txt", usage=Usage(4, 87, 0, 14876)),
             Turn(text="never sent", usage=Usage(1, 1))]
    with FakeAgentApi(turns, main_model=OPUS) as api:
        out = evalledger(tmp_path, db, "run", str(_task(
            tmp_path, api, budget={"max_cost_usd": 0.01})), env=_env(api))
    assert out.returncode == 1, out.stdout + out.stderr
    by_model, usages, (done,), _ = recorded(db)
    assert len(api.served) == 1
    assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
    assert by_model == truth(api.served)  # the refused call: recorded, no tokens
    assert usages[0].call is not None and usages[0].call["status"] == 200
    assert {normalize_model(u.model or "") for u in usages} == {normalize_model(OPUS)}


@pytest.mark.parametrize("ending", ["end", "ctrl-c"])
def test_codex_through_the_gateway_books_what_it_was_answered(tmp_path: Path,
                                                              ending: str) -> None:
    """Its stream reports usage only as a turn ends: cut off, it reported nothing of the
    held call (a floor of 0 without the gateway). Through it: the upstream's, whole."""
    api, db = CODEX.run(tmp_path, ending)
    usages = recorded(db)[1]
    _exact(db, api, CODEX.rates(tmp_path))
    assert len(api.served) == 2
    assert all(u.call and u.call["api"] == "responses" for u in usages)
    assert {r["headers"].get("authorization") for r in api.requests
            if r["path"].endswith("/responses")} == {f"Bearer {RUNNER_KEY}"}


@pytest.mark.parametrize("ending", ["end", "ctrl-c"])
def test_gemini_cli_through_the_gateway_books_what_each_model_was_answered(
        tmp_path: Path, ending: str) -> None:
    """Left to its router, it asks a small model which model to use (a side call its
    stream never reports), then works on the one chosen: both booked, exact. Cut off
    (Ctrl-C, its second answer held), the held call is read on: exact too."""
    routed = ending == "end"
    api, db = (GEMINI_AUTO if routed else GEMINI).run(tmp_path, ending)
    by_model = _exact(db, api)
    assert set(by_model) == ({GEMINI_ROUTER, GEMINI_ROUTED} if routed else {GEMINI_MODEL})
    assert len(api.served) == 2 + routed


@pytest.mark.parametrize("ending", ["end", "ctrl-c"])
def test_opencode_through_the_gateway_books_its_title_call_and_every_step(
        tmp_path: Path, ending: str) -> None:
    """It names its session with a call on a small model (a side call its stream never
    reports), then works: every call booked, exact; cut off by Ctrl-C, the held call
    read on."""
    api, db = OPENCODE.run(tmp_path, ending)
    by_model = _exact(db, api)
    assert any(call.side for call in api.served)  # its title
    assert len(by_model) == 2


@pytest.mark.parametrize("ending", ["timeout", "budget", "budget-reached"])
@pytest.mark.parametrize("agent", [CODEX, GEMINI, OPENCODE], ids=["codex", "gemini", "opencode"])
def test_a_cli_ended_by_its_timeout_or_budget_through_the_gateway_is_booked_exact(
        tmp_path: Path, agent: Behind, ending: str) -> None:
    """Its timeout fires while its second answer is held: the gateway reads that answer
    on once it comes (the CLI dead), whole. Its first answer passes its cost budget: the
    runner stops it at the next line it prints, and a call it made meanwhile is refused
    at the gateway. Its token budget spent to the token by what it was answered before
    its second step: that step is refused at the gateway (the upstream never sees it),
    booked with no tokens, and the attempt ends as its budget does."""
    api, db = agent.run(tmp_path, ending)
    _exact(db, api, agent.rates(tmp_path))
    _, usages, (done,), _ = recorded(db)
    steps = [call for call in api.served if not call.side]
    refused = [u for u in usages if u.call and u.call["status"] != 200]
    if ending == "timeout":
        assert done.final_status == FinalStatus.TIMEOUT
        assert len(steps) == 2 and not refused
        assert not any(u.call and u.call.get("cut") for u in usages)
        return
    assert len(steps) == 1  # the second never left the gateway
    assert all(u.call and u.call["status"] == 400 and u.tokens == TokenCounts()
               for u in refused)
    if ending == "budget":
        assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
        return
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED
    assert refused and "the gateway refused a call" in (done.error_message or "")
