"""The real Claude Code and Codex CLIs (pinned, from npm: tests/real_agents.py) run as
task commands through ``evalledger run``, offline, against local fake model APIs that
stream as the real ones do (tests/fake_agent_api.py). What the ledger recorded is
checked against the truth: the usage each answer reported (the server's word) and the
CLI's own result line.

Each agent writes ``answer.txt`` with its own shell tool, as the scripted model asks.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger, TaskCompleted, TaskUsage, TokenCounts
from evalledger.pricing import DEFAULT_RATES, normalize_model
from evalledger.statuses import FinalStatus
from tests.cli.helpers import PATIENCE, evalledger, spawn, wait_until
from tests.docker_images import build
from tests.fake_agent_api import FakeAgentApi, Turn, Usage
from tests.real_agents import PINNED, require

from .real_agent_tasks import (
    CODEX_MODEL,
    CRITERIA,
    OPUS,
    SUBAGENT,
    TOOL,
    claude_task,
    codex_script,
    codex_task,
    counts,
    emitted,
    only_run,
    recorded,
    result_line,
    script,
    show,
    truth,
    write,
)

# The slow tier: the real agent CLIs (Node.js programs) in every ending.
pytestmark = pytest.mark.slow

@pytest.mark.parametrize("subagent", [False, True], ids=["alone", "subagent-on-haiku"])
def test_claude_code_usage_is_what_each_model_was_answered(tmp_path: Path,
                                                          subagent: bool) -> None:
    """Tokens exact per model; the cost the CLI's own, to 1e-9; a subagent on a second
    model booked to that model; the CLI's default model priced (no "no price" warning)."""
    db = tmp_path / "l.db"
    with FakeAgentApi(script(subagent=subagent), main_model=OPUS, side=SUBAGENT) as api:
        tasks = write(tmp_path, answer=claude_task(tmp_path, api))
        out = evalledger(tmp_path, db, "run", str(tasks))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no price" not in out.stderr
    by_model, usages, (done,), lines = recorded(db)
    assert done.final_status == FinalStatus.SUCCESS
    assert by_model == truth(api.served) and len(by_model) == 1 + subagent
    assert all(call.finished for call in api.served)
    cli = result_line(lines)
    assert done.cost_complete and done.cost_usd is not None
    assert math.isclose(done.cost_usd, cli["total_cost_usd"], rel_tol=0, abs_tol=1e-9)
    # The rate card prices each model as the CLI does.
    for model, tokens in by_model.items():
        [reported] = [u.cost_usd for u in usages if normalize_model(u.model or "") == model]
        assert reported is not None
        assert math.isclose(DEFAULT_RATES.price(model, tokens) or -1, reported, abs_tol=1e-9)
    assert done.environment_info["claude_code_version"] == PINNED["claude"][1][0]
    summary = show(tmp_path, db)
    assert summary["cost_complete"] and summary["models"] == sorted(
        {u.model for u in usages if u.model})


@pytest.mark.parametrize(("ending", "flags"), [
    ("ctrl-c", ""), ("ctrl-c", "--include-partial-messages"),
    ("timeout", "--include-partial-messages")])
def test_claude_code_cut_off_books_what_its_stream_showed_as_a_floor(
        tmp_path: Path, ending: str, flags: str) -> None:
    """The second answer is held after its start; the attempt ends there (Ctrl-C to the
    runner, or its timeout). What the stream showed is booked, marked an estimate and a
    floor. With --include-partial-messages the first call is exact (its output 87 from
    its message_delta) and the second's input is in; without, each message shows only
    its start (output 1)."""
    db = tmp_path / "l.db"
    partial = bool(flags)
    hold = threading.Event()
    with FakeAgentApi(script(hold=hold), main_model=OPUS) as api:
        tasks = write(tmp_path, answer=claude_task(
            tmp_path, api, flags=flags, timeout=8 if ending == "timeout" else 60))
        if ending == "timeout":
            out = evalledger(tmp_path, db, "run", str(tasks))
            assert out.returncode == 1, out.stdout + out.stderr
            # The run's line says the cost is a floor, and why.
            assert "cost ≥ $" in out.stdout and "spend never reported in full" in out.stdout
        else:
            proc = spawn(tmp_path, db, "run", str(tasks))
            assert api.holding.wait(PATIENCE), "the agent never asked for its second answer"
            # What the stream shows of the held answer is recorded before the signal.
            shown = "msg_0002" if partial else "msg_0001"
            wait_until(lambda: any(shown in json.dumps(line) for line in emitted(db)),
                       f"{shown} recorded")
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=PATIENCE)
        assert api.holding.is_set()
    by_model, usages, completed, _ = recorded(db)
    if ending == "timeout":
        assert [c.final_status for c in completed] == [FinalStatus.TIMEOUT]
        assert not completed[0].cost_complete
    first, held = api.served
    assert first.finished and not held.finished
    exact = counts(first.usage) if partial else counts(first.usage).model_copy(
        update={"output_tokens": 1})
    started = counts(held.usage).model_copy(update={"output_tokens": 1})
    assert by_model == {OPUS: exact + started if partial else exact}
    assert usages and all(u.estimate for u in usages)
    summary = show(tmp_path, db)
    assert summary["cost_complete"] is False
    assert summary["total_cost_usd"] == pytest.approx(
        DEFAULT_RATES.price(OPUS, by_model[OPUS]), abs=1e-9)


def test_claude_code_budget_sees_each_message_real_output_as_it_ends(tmp_path: Path) -> None:
    """A token budget between what the first message's start says (14,881) and what it
    used (14,967, its message_delta): the attempt is stopped as that message ends, by
    the exact figure."""
    db = tmp_path / "l.db"
    hold = threading.Event()
    with FakeAgentApi(script(hold=hold), main_model=OPUS) as api:
        tasks = write(tmp_path, answer=claude_task(
            tmp_path, api, flags="--include-partial-messages", budget={"max_tokens": 14_900}))
        out = evalledger(tmp_path, db, "run", str(tasks))
    assert out.returncode == 1, out.stdout + out.stderr
    by_model, _, (done,), _ = recorded(db)
    assert done.final_status == FinalStatus.TOKEN_BUDGET_EXCEEDED, done.error_message
    assert by_model[OPUS].output_tokens == TOOL.output  # the real count, not the start's 1
    assert done.tokens.total >= 14_900 and not done.cost_complete


def test_codex_usage_is_what_it_was_answered(tmp_path: Path) -> None:
    """Codex names no model and no cost: the task's model, priced from the card (here
    a pricing file); input as fresh plus cached, as the Responses API counts it."""
    db = tmp_path / "l.db"
    pricing = tmp_path / "prices.yaml"
    pricing.write_text(f"{CODEX_MODEL}: {{input: 2, output: 12, cache_read: 0.2}}\n")
    with FakeAgentApi(codex_script(), main_model=CODEX_MODEL) as api:
        tasks = write(tmp_path, answer=codex_task(tmp_path, api))
        out = evalledger(tmp_path, db, "run", str(tasks), "--pricing", str(pricing))
    assert out.returncode == 0, out.stdout + out.stderr
    by_model, usages, (done,), _ = recorded(db)
    assert done.final_status == FinalStatus.SUCCESS
    assert by_model == truth(api.served)
    assert [u.model for u in usages] == [CODEX_MODEL]  # one turn, one turn.completed
    assert done.cost_complete and done.cost_usd == pytest.approx(
        (9342 * 2 + 70 * 12 + 9088 * 0.2) / 1e6, abs=1e-12)
    assert PINNED["codex"][1][0] in str(done.environment_info["agent_version"])


def test_codex_cut_off_mid_turn_books_the_turn_unknown(tmp_path: Path) -> None:
    """Codex reports a turn's usage only as the turn ends: Ctrl-C while its second answer
    is pending leaves the turn unreported, booked as unknown (a floor), never $0."""
    db = tmp_path / "l.db"
    hold = threading.Event()
    with FakeAgentApi(codex_script(hold), main_model=CODEX_MODEL) as api:
        proc = spawn(tmp_path, db, "run", str(write(tmp_path, answer=codex_task(tmp_path, api))))
        assert api.holding.wait(PATIENCE), "Codex never asked for its second answer"
        wait_until(lambda: any(line.get("type") == "item.completed" for line in emitted(db)),
                   "the shell call recorded")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=PATIENCE)
    _, usages, completed, _ = recorded(db)
    assert completed == []  # interrupted
    assert [(u.model, u.tokens.total, u.cost_usd, u.estimate) for u in usages] == [
        (CODEX_MODEL, 0, None, True)]
    summary = show(tmp_path, db)
    assert summary["cost_complete"] is False and summary["total_cost_usd"] == 0


def test_claude_code_json_read_as_native_is_no_silent_zero(tmp_path: Path) -> None:
    """A Claude Code task without its stream_format: no $0, a floor, and one line
    naming the format that reads it."""
    db = tmp_path / "l.db"
    with FakeAgentApi(script(), main_model=OPUS) as api:
        task = claude_task(tmp_path, api)
        del task["stream_format"]
        out = evalledger(tmp_path, db, "run", str(write(tmp_path, answer=task)))
    assert out.returncode == 0, out.stdout + out.stderr
    [hint] = [line for line in out.err_lines if line.startswith("hint:")]
    assert "stream_format: claude-code" in hint
    _, usages, (done,), _ = recorded(db)
    assert done.environment_info["unread_format"] == "claude-code"
    assert not done.cost_complete and [u.cost_usd for u in usages] == [None]
    assert show(tmp_path, db)["cost_complete"] is False


def test_two_pinned_claude_code_versions_are_told_apart(tmp_path: Path) -> None:
    """One experiment, a variant per pinned CLI version: each attempt records its
    version, the summary calls them drift, and each books its tokens exactly."""
    old, new = PINNED["claude"][1]
    db = tmp_path / "l.db"
    turns = script() + script()
    with FakeAgentApi(turns, main_model=OPUS) as api:
        tasks = write(tmp_path, answer={"prompt": "Write 42 to answer.txt.",
                                        "success_criteria": CRITERIA})
        variants = []
        for version in (old, new):
            fields = claude_task(tmp_path, api, version=version, flags="--model " + OPUS)
            variants.append({"variant_id": f"cli-{version}", **{
                k: fields[k] for k in ("command", "stream_format", "env")}})
        experiment = tmp_path / "experiment.yaml"
        experiment.write_text(yaml.safe_dump({
            "experiment_id": "versions", "tasks": [str(tasks)], "max_parallel": 1,
            "variants": variants}), encoding="utf-8")
        out = evalledger(tmp_path, db, "run", "-e", str(experiment))
    assert out.returncode == 0, out.stdout + out.stderr
    by_model, _, completed, _ = recorded(db)
    assert sorted(c.environment_info["claude_code_version"] for c in completed) == [old, new]
    assert by_model == truth(api.served)
    drift = show(tmp_path, db)["version_drift"]
    assert drift["claude_code_version"] == {old: 1, new: 1}


def test_claude_code_killed_runner_then_resume_books_the_lost_attempt(tmp_path: Path) -> None:
    """The runner is killed (SIGKILL) while the agent waits for its second answer; resume
    runs the task again. The lost attempt's spend, as far as its recorded stream shows
    it, is booked as an estimate: the run's cost is a floor, never the second attempt's
    alone."""
    db = tmp_path / "l.db"
    hold = threading.Event()
    with FakeAgentApi(script(hold=hold), main_model=OPUS) as api:
        tasks = write(tmp_path, answer=claude_task(tmp_path, api))
        proc = spawn(tmp_path, db, "run", str(tasks))
        assert api.holding.wait(PATIENCE), "the agent never asked for its second answer"
        wait_until(lambda: any("msg_0001" in json.dumps(line) for line in emitted(db)),
                   "msg_0001 recorded")
        proc.kill()
        proc.communicate(timeout=PATIENCE)
        api.script = script()
        out = evalledger(tmp_path, db, "resume", only_run(db))
    assert out.returncode == 0, out.stdout + out.stderr
    by_model, usages, completed, _ = recorded(db)
    assert [c.final_status for c in completed] == [FinalStatus.SUCCESS]
    first, _, *again = api.served
    lost = counts(first.usage).model_copy(update={"output_tokens": 1})
    assert by_model == {OPUS: lost + truth(again)[OPUS]}
    assert [u.estimate for u in usages] == [True, False]  # the lost attempt's, the rerun's
    assert show(tmp_path, db)["cost_complete"] is False


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_claude_code_runs_confined(tmp_path: Path, backend: str,
                                   request: pytest.FixtureRequest) -> None:
    """The real CLI under ``isolation: bwrap`` and ``docker`` (an image of busybox, bash
    and the libraries the CLI links, built here): its binary bound in read-only, its
    key passed through by name, the fake API reached over the host's network. It works
    in its workspace, and its usage is booked as outside."""
    db = tmp_path / "l.db"
    binary = require("claude").resolve()
    confined: dict[str, Any] = {"isolation": backend}
    if backend == "bwrap":
        request.getfixturevalue("bwrap")
    else:
        request.getfixturevalue("docker_images")
        confined["image"] = build("agent", (str(binary),))
    with FakeAgentApi(script(), main_model=OPUS) as api:
        task = claude_task(tmp_path, api)
        env = {k: v for k, v in task["env"].items() if k not in ("HOME", "ANTHROPIC_API_KEY")}
        task.update(command=task["command"].replace(str(require("claude")), '"$CLAUDE"'),
                    network="host", binds={"CLAUDE": str(binary)}, env=env,
                    env_passthrough=["ANTHROPIC_API_KEY"], **confined)
        out = evalledger(tmp_path, db, "run", str(write(tmp_path, answer=task)),
                         env={"ANTHROPIC_API_KEY": "sk-ant-passed"})
    assert out.returncode == 0, out.stdout + out.stderr
    by_model, _, (done,), lines = recorded(db)
    assert done.final_status == FinalStatus.SUCCESS
    assert by_model == truth(api.served)
    assert math.isclose(done.cost_usd or -1, result_line(lines)["total_cost_usd"], abs_tol=1e-9)
    assert {r["headers"].get("x-api-key") for r in api.requests} == {"sk-ant-passed"}
    assert not (tmp_path / "home" / ".claude").exists()  # its HOME was the sandbox's /tmp


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents"


def test_the_real_agents_example_runs_both_clis_as_written(tmp_path: Path) -> None:
    """examples/agents/real-agents.yaml as a user runs it (the CLIs on PATH, the keys and
    Codex's config in the environment), each CLI pointed at a fake API: every command,
    flag and prompt-on-stdin of the example works with the pinned CLIs, and each
    variant's usage is what its API answered. The scripted model writes no solution:
    the tasks fail their criteria (exit 1)."""
    claude, codex = require("claude"), require("codex")
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    db = tmp_path / "l.db"
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (tmp_path / "home").mkdir()
    anthropic_turns = [turn for _ in range(3) for turn in script()]
    openai_turns = [turn for _ in range(3) for turn in (
        Turn(command="echo 42 > answer.txt", usage=Usage(900, 30, 8000)),
        Turn(text="Done.", usage=Usage(50, 10, 8900)))]
    with FakeAgentApi(anthropic_turns, main_model="claude-sonnet-4-5") as anthropic, \
            FakeAgentApi(openai_turns, main_model="gpt-5") as openai:
        (codex_home / "config.toml").write_text(
            'model_provider = "fake"\n[model_providers.fake]\nname = "fake"\n'
            f'base_url = "{openai.url}/v1"\nwire_api = "responses"\n'
            'env_key = "OPENAI_API_KEY"\n')
        env = {"PATH": f"{claude.parent}:{codex.parent}:{os.environ['PATH']}",
               "ANTHROPIC_BASE_URL": anthropic.url, "ANTHROPIC_API_KEY": "sk-ant-test",
               "OPENAI_API_KEY": "sk-test", "CODEX_HOME": str(codex_home),
               "HOME": str(tmp_path / "home"), "DISABLE_TELEMETRY": "1"}
        out = evalledger(folder, db, "run", "-e", "real-agents.yaml", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    with Ledger(db, read_only=True) as ledger:
        evs = list(ledger.events(only_run(db)))
    done = {e.task_key: e for e in evs if isinstance(e, TaskCompleted)}
    assert len(done) == 6 and all(d.final_status == FinalStatus.FAILURE for d in done.values())
    spent: dict[str, TokenCounts] = defaultdict(lambda: TokenCounts())
    for u in (e for e in evs if isinstance(e, TaskUsage)):
        spent[u.task_key.split("/")[0]] += u.tokens
    assert spent["claude-code"] == sum(truth(anthropic.served).values(), TokenCounts())
    assert spent["codex"] == sum(truth(openai.served).values(), TokenCounts())
    for key, completed in done.items():
        info = completed.environment_info
        assert completed.cost_complete, key
        if key.startswith("claude-code/"):
            assert info["claude_code_version"] == PINNED["claude"][1][0]
        else:
            assert PINNED["codex"][1][0] in str(info["agent_version"])
