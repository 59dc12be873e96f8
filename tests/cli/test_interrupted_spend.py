"""What an attempt spent is recorded however it ends: Ctrl-C on a real ``evalledger run``.

A pretend Claude Code (a Python script printing a real-shaped stream-json transcript:
the system init line, assistant messages of two models with usage and ids, tool
results) pauses mid-transcript waiting on a file that never comes; a native-format
agent beside it has printed its usage deltas and waits too. Ctrl-C (SIGINT to the
runner process) ends both. Each interrupted attempt must have its spend in the
ledger, before its ``task.interrupted``, and the README's "spend of interrupted
attempts" query must return it. Codex, Gemini CLI and OpenCode agents stopped mid-turn
beside them book what they reported and the turn under way as unknown.
"""

from __future__ import annotations

import json
import signal
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger, TaskEmitted, TaskInterrupted, TaskUsage, TokenCounts
from evalledger.pricing import DEFAULT_RATES
from tests.agents.transcripts import codex, gemini, opencode
from tests.ledger.audits import QUERIES

from .helpers import PATIENCE, events, spawn, wait_for_events, wait_until

RUN = "spend-1"
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
SESSION = "4b7e2a90-5c1d-4e8f-9a3b-0d6c8e1f2a47"

# Prints the JSON lines of argv[1]; then says so (argv[2]) and waits for argv[3] before
# printing those of argv[4]. SIGTERM ends it at once, as it ends the real CLI.
AGENT = """\
import json, sys, time
from pathlib import Path
before, paused, go, after = sys.argv[1:5]
for line in json.loads(Path(before).read_text()):
    print(json.dumps(line), flush=True)
Path(paused).touch()
while not Path(go).exists():
    time.sleep(0.05)
for line in json.loads(Path(after).read_text()):
    print(json.dumps(line), flush=True)
"""


def _assistant(msg_id: str, model: str, content: list[dict[str, Any]], *,
               input_tokens: int, output_tokens: int, cache_read: int = 0,
               cache_write: int = 0, parent: str | None = None) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "cache_read_input_tokens": cache_read,
                      "cache_creation_input_tokens": cache_write,
                      "cache_creation": {"ephemeral_5m_input_tokens": cache_write,
                                         "ephemeral_1h_input_tokens": 0},
                      "service_tier": "standard"},
        },
        "parent_tool_use_id": parent,
        "session_id": SESSION,
    }


def _tool_result(tool_id: str, text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": tool_id, "type": "tool_result", "content": text}]},
        "parent_tool_use_id": None, "session_id": SESSION}


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _tool(tool_id: str, name: str, **tool_input: str) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]


# Eight assistant messages before the pause, two of them reported twice (one line per
# content block, usage growing), three of them the small model's (a subagent's).
BEFORE: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "cwd": "/tmp/sandbox", "session_id": SESSION,
     "tools": ["Bash", "Edit", "Read", "Task", "Write"], "mcp_servers": [], "model": SONNET,
     "permissionMode": "bypassPermissions", "apiKeySource": "ANTHROPIC_API_KEY",
     "claude_code_version": "2.0.14", "output_style": "default", "agents": [],
     "slash_commands": [], "uuid": "0f3b1c2d-0000-4000-8000-000000000000"},
    _assistant("msg_01", SONNET, _text("Let me look at the project."), input_tokens=3,
               output_tokens=2, cache_write=9500, cache_read=13000),
    _assistant("msg_01", SONNET, _tool("toolu_01", "Task", prompt="find the tests"),
               input_tokens=3, output_tokens=180, cache_write=9500, cache_read=13000),
    _assistant("msg_h1", HAIKU, _tool("toolu_h1", "Bash", command="ls tests"),
               input_tokens=2400, output_tokens=60, parent="toolu_01"),
    _tool_result("toolu_h1", "test_add.py"),
    _assistant("msg_h2", HAIKU, _tool("toolu_h2", "Read", file_path="tests/test_add.py"),
               input_tokens=2600, output_tokens=55, parent="toolu_01"),
    _tool_result("toolu_h2", "def test_add(): assert add(2, 3) == 5"),
    _assistant("msg_h3", HAIKU, _text("The tests are in tests/test_add.py."),
               input_tokens=3100, output_tokens=40, parent="toolu_01"),
    _tool_result("toolu_01", "The tests are in tests/test_add.py."),
    _assistant("msg_02", SONNET, _tool("toolu_02", "Write", file_path="add.py",
                                       content="def add(a, b):\n    return a + b\n"),
               input_tokens=6, output_tokens=95, cache_write=400, cache_read=22500),
    _tool_result("toolu_02", "File created successfully at: add.py"),
    _assistant("msg_03", SONNET, _tool("toolu_03", "Bash", command="pytest -q"),
               input_tokens=4, output_tokens=30, cache_write=250, cache_read=22900),
    _tool_result("toolu_03", "1 passed in 0.01s"),
    _assistant("msg_04", SONNET, _text("The tests pass."), input_tokens=4,
               output_tokens=12, cache_write=120, cache_read=23150),
    _assistant("msg_04", SONNET, _text("The tests pass. Done."), input_tokens=4,
               output_tokens=25, cache_write=120, cache_read=23150),
    _assistant("msg_05", SONNET, _tool("toolu_05", "Bash", command="git diff --stat"),
               input_tokens=4, output_tokens=28, cache_write=90, cache_read=23270),
]
# What never comes: the rest of the session and its result line.
AFTER: list[dict[str, Any]] = [
    _tool_result("toolu_05", " add.py | 2 ++"),
    {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 41000,
     "duration_api_ms": 38000, "num_turns": 6, "result": "Done.", "session_id": SESSION,
     "total_cost_usd": 0.25, "usage": {"input_tokens": 21, "output_tokens": 370},
     "modelUsage": {SONNET: {"inputTokens": 21, "outputTokens": 370, "costUSD": 0.24},
                    HAIKU: {"inputTokens": 8100, "outputTokens": 155, "costUSD": 0.01}},
     "permission_denials": [], "uuid": "9a8b7c6d-0000-4000-8000-000000000000"},
]
DELTAS = [
    {"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 1200, "output_tokens": 300,
     "cache_read_tokens": 800, "cost_usd": 0.0081},
    {"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 1500, "output_tokens": 90},
]


# The agents that report usage as each turn ends, each stopped in its second turn (Gemini
# CLI: in its one session): what they reported is booked, and the turn under way as
# unknown (no tokens, no cost: the attempt's cost a floor, never a guess).
CODEX = [*codex.TRANSCRIPT[:9]]  # turn 1 done, turn 2's command started
GEMINI = [gemini.INIT, *gemini.BODY]  # no result yet
OPENCODE = [*opencode.TRANSCRIPT[:6]]  # step 1 done, step 2 under way
MODELS = {"codex": "gpt-5", "opencode": "anthropic/claude-sonnet-4-5"}
AGENTS: list[tuple[str, str, list[dict[str, Any]]]] = [
    ("claude", "claude-code", BEFORE), ("native", "native", DELTAS),
    ("codex", "codex", CODEX), ("gemini", "gemini", GEMINI), ("opencode", "opencode", OPENCODE)]


def _suite(root: Path) -> tuple[Path, dict[str, Path]]:
    tasks = root / "suite"
    tasks.mkdir()
    notes = root / "notes"  # outside every sandbox
    notes.mkdir()
    agent = tasks / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    paused = {}
    for name, fmt, before in AGENTS:
        (notes / f"{name}-before.json").write_text(json.dumps(before), encoding="utf-8")
        (notes / f"{name}-after.json").write_text(json.dumps(AFTER if fmt != "native" else []),
                                                 encoding="utf-8")
        paused[name] = notes / f"{name}.paused"
        argv = [sys.executable, str(agent), str(notes / f"{name}-before.json"),
                str(paused[name]), str(notes / f"{name}.go"), str(notes / f"{name}-after.json")]
        task = {"command": argv, "stream_format": fmt, "timeout": 600,
                "success_criteria": [{"type": "exit_code", "equals": 0}],
                **({"model": MODELS[fmt]} if fmt in MODELS else {})}
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    return tasks, paused


def _estimate(emitted: list[dict[str, Any]]) -> dict[str, TokenCounts]:
    """The transcript's usage as recorded: the last report per message id, per model."""
    last: dict[str, tuple[str, dict[str, int]]] = {}
    for data in emitted:
        if data.get("type") == "assistant":
            message = data["message"]
            last[message["id"]] = (message["model"], message["usage"])
    per_model: dict[str, TokenCounts] = defaultdict(TokenCounts)
    for model, usage in last.values():
        per_model[model] += TokenCounts(
            input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"],
            cache_read_tokens=usage["cache_read_input_tokens"],
            cache_write_tokens=usage["cache_creation_input_tokens"])
    return dict(per_model)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_ctrl_c_books_the_spend_of_every_interrupted_attempt(tmp_path: Path) -> None:
    """Regression: a claude-code attempt stopped by Ctrl-C recorded no task.usage at all
    (its transcript's running estimate was dropped), while a native task beside it had
    its deltas; the README's interrupted-spend query missed the first entirely."""
    tasks, paused = _suite(tmp_path)
    db = tmp_path / "l.db"
    proc = spawn(tmp_path, db, "run", str(tasks), "-j", str(len(AGENTS)), "--run-id", RUN)
    try:
        wait_until(lambda: all(p.exists() for p in paused.values()) or proc.poll() is not None,
                   "both agents to pause")
        # Every line they printed is committed: what the test expects is known.
        wait_for_events(db, RUN, "task.event", at_least=sum(len(a[2]) for a in AGENTS),
                        proc=proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr

    evs = events(db, RUN)
    claude, native = "default/claude/00", "default/native/00"
    for key in (claude, native):
        mine = [e for e in evs if e.task_key == key]
        assert isinstance(mine[-1], TaskInterrupted), [e.type for e in mine]
        assert not [e for e in mine if e.type == "task.completed"]
    emitted = [e.data for e in evs if isinstance(e, TaskEmitted) and e.task_key == claude]
    assert emitted == BEFORE

    # The claude-code attempt: its estimate, one usage per model, before the interruption.
    usages = [e for e in evs if isinstance(e, TaskUsage) and e.task_key == claude]
    expected = _estimate(emitted)
    assert set(expected) == {SONNET, HAIKU}
    assert {u.model: u.tokens for u in usages} == expected
    assert len(usages) == 2 and all(u.estimate for u in usages)
    for usage in usages:
        assert usage.cost_usd == DEFAULT_RATES.price(usage.model, usage.tokens)
    [interrupted] = [e for e in evs if isinstance(e, TaskInterrupted) and e.task_key == claude]
    assert all(u.seq is not None and interrupted.seq is not None and u.seq < interrupted.seq
               for u in usages)
    # The native one: its deltas, as they came (nothing estimated).
    deltas = [e for e in evs if isinstance(e, TaskUsage) and e.task_key == native]
    assert [(u.input_tokens, u.output_tokens, u.estimate) for u in deltas] == [
        (1200, 300, False), (1500, 90, False)]

    # The per-turn formats: what they reported, then the turn under way as unknown.
    booked = {name: [(u.input_tokens, u.cost_usd is None, u.estimate) for u in evs
                     if isinstance(u, TaskUsage) and u.task_key == f"default/{name}/00"]
              for name in ("codex", "gemini", "opencode")}
    assert booked == {"codex": [(315, False, False), (0, True, True)],
                      "gemini": [(0, True, True)],
                      "opencode": [(1520, False, False), (0, True, True)]}

    # The README's audit finds both.
    with Ledger(db, read_only=True) as ledger:
        found = ledger.query(QUERIES["spend of interrupted attempts"], {"run": RUN})[1]
    assert [row[0] for row in found] == sorted(f"default/{a[0]}/00" for a in AGENTS)
    rows = [row for row in found if row[0] in (claude, native)]
    cost = {key: sum(u.cost_usd or 0.0 for u in us) for key, us in
            ((claude, usages), (native, deltas))}
    assert [(k, n, t) for k, n, _, t in rows] == [
        (claude, 1, sum(t.total for t in expected.values())),
        (native, 1, sum(u.tokens.total for u in deltas)),
    ]
    for key, _, got, _ in rows:
        assert abs(got - cost[key]) < 1e-12
    assert cost[claude] > 0.05  # a real sum: tens of thousands of cached tokens
