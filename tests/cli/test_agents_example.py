"""``examples/agents``: Claude Code, Codex, Gemini CLI and OpenCode on the same three
tasks, each replaying a transcript in its CLI's real stream format. The mixed run's
verdicts, its cost per model, its versions, ``compare`` between the agents, ``diff``
after one agent got better, and each agent's conversation in the viewer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from evalledger.viewer import create_app

from .helpers import evalledger

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents"
AGENTS = ("claude-code", "codex", "gemini", "opencode")
TASKS = ("add-median", "fix-mean", "fizzbuzz")
# Each agent but Claude Code gets one task wrong (transcripts/make.py says which).
FAILED = {"codex/fizzbuzz/00", "gemini/add-median/00", "opencode/fix-mean/00"}


@dataclass
class Example:
    folder: Path
    db: Path
    first: str
    second: str


def _run(folder: Path, db: Path) -> str:
    done = evalledger(folder, db, "run", "-e", "experiment.yaml", "--out", str(folder / "out"))
    assert done.returncode == 1, done.stderr  # some tasks failed: exit 1, by design
    return json.loads(evalledger(folder, db, "show", "latest", "--json").stdout)["run_id"]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Example]:
    folder = tmp_path_factory.mktemp("agents") / "agents"
    shutil.copytree(EXAMPLE, folder)
    db = folder / "l.db"
    first = _run(folder, db)
    # A newer Gemini gets median right: what a second run of the comparison finds.
    fixed = json.loads((folder / "transcripts" / "claude-code" / "add-median.files.json")
                       .read_text())
    (folder / "transcripts" / "gemini" / "add-median.files.json").write_text(json.dumps(fixed))
    yield Example(folder, db, first, _run(folder, db))


def _show(example: Example, run_id: str) -> dict[str, Any]:
    return json.loads(evalledger(example.folder, example.db, "show", run_id, "--json").stdout)


def _transcript(agent: str, task: str) -> list[dict[str, Any]]:
    text = (EXAMPLE / "transcripts" / agent / f"{task}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_every_agent_ran_every_task_and_failed_where_its_transcript_did(
        example: Example) -> None:
    summary = _show(example, example.first)
    assert {row["task_key"]: row["final_status"] for row in summary["tasks"]} == {
        f"{a}/{t}/00": "FAILURE" if f"{a}/{t}/00" in FAILED else "SUCCESS"
        for a in AGENTS for t in TASKS}
    assert {v["variant_id"]: v["tasks_succeeded"] for v in summary["variants"]} == {
        "claude-code": 3, "codex": 2, "gemini": 2, "opencode": 2}


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_cost_per_model_is_what_each_transcript_says(example: Example) -> None:
    by_model = {m["model"]: m for m in _show(example, example.first)["usage_by_model"]}
    # Claude Code and OpenCode report their cost: the sum of what the CLIs said.
    claude: dict[str, float] = {}
    for task in TASKS:
        for model, used in _transcript("claude-code", task)[-1]["modelUsage"].items():
            claude[model] = claude.get(model, 0.0) + used["costUSD"]
    opencode = sum(line["part"]["cost"] for task in TASKS
                   for line in _transcript("opencode", task) if line["type"] == "step_finish")
    expected = {**claude, "anthropic/claude-sonnet-4-5": opencode,
                # Codex and Gemini CLI report none: priced from genai-prices' card. By
                # hand, over the three tasks: gpt-5 8,040 fresh x $1.25 + 871 out x $10 +
                # 104,800 cached x $0.125 a million = $0.03186; gemini-2.5-pro 8,040 x
                # $1.25 + 1,170 (answers and thoughts) x $10 + 104,800 x $0.125 =
                # $0.03485; gemini-2.5-flash-lite 1,830 x $0.10 + 36 x $0.40 = $0.0001974.
                "gpt-5": 0.03186, "gemini-2.5-pro": 0.03485,
                "gemini-2.5-flash-lite": 0.0001974}
    assert {m: round(used["cost_usd"], 9) for m, used in by_model.items()} == {
        m: round(cost, 9) for m, cost in expected.items()}
    assert all(used["cost_complete"] for used in by_model.values())
    assert (by_model["gpt-5"]["tokens"]["input_tokens"],
            by_model["gpt-5"]["tokens"]["cache_read_tokens"]) == (8040, 104800)


def test_each_agents_version_is_recorded_and_the_format_auto_found(example: Example) -> None:
    summary = _show(example, example.first)
    assert summary["version_drift"]["agent_version"] == {
        "2.0.37 (Claude Code)": 3, "codex-cli 0.46.0": 3, "0.18.4": 3, "1.0.118": 3}
    from evalledger.ledger import Ledger, TaskCompleted

    with Ledger(example.db, read_only=True) as ledger:
        info = {e.task_key: e.environment_info for e in ledger.events(example.first)
                if isinstance(e, TaskCompleted)}
    assert info["claude-code/fix-mean/00"]["claude_code_version"] == "2.0.37"
    assert info["opencode/fix-mean/00"]["stream_format"] == "opencode"  # stream_format auto
    assert "stream_format" not in info["codex/fix-mean/00"]


def test_compare_tests_each_agent_against_claude_code(example: Example) -> None:
    done = evalledger(example.folder, example.db, "compare", example.first,
                      "--baseline", "claude-code", "--json")
    assert done.returncode == 0, done.stderr
    comparisons = json.loads(done.stdout)
    assert [c["b"]["name"] for c in comparisons] == [f"{example.first}/{a}" for a in AGENTS[1:]]
    for each in comparisons:
        # One task passed for Claude Code only: 3 pairs can show no significant difference.
        assert (each["pairs"], each["worse_in_b"], each["better_in_b"]) == (3, 1, 0)
        assert (each["verdict"], each["correction"]) == ("no significant difference", "holm")


def test_diff_finds_the_one_task_a_newer_agent_fixed(example: Example) -> None:
    done = evalledger(example.folder, example.db, "diff", example.first, example.second,
                      "--json")
    assert done.returncode == 0, done.stderr
    tasks = {t["task_key"]: t["change"] for t in json.loads(done.stdout)["tasks"]}
    assert {k for k, change in tasks.items() if change != "unchanged"} == {
        "gemini/add-median/00"}
    assert tasks["gemini/add-median/00"] == "fix"


@pytest.fixture(scope="module")
def client(example: Example) -> Iterator[TestClient]:
    with TestClient(create_app(example.db, interval=0.05, keepalive=0.2)) as opened:
        yield opened


# What each agent's fix-mean conversation shows: its tool names and words, read from
# its own format.
SAID = {"claude-code": ["<b>Bash</b>", "<b>Edit</b>", "Fixed mean(): it divides by len(xs).",
                        "model claude-sonnet-4-5-20250929, 8 tools", "version 2.0.37"],
        "codex": ["<b>shell</b>", "<b>file_change</b>", "exit code 1",
                  "Fixed mean(): it divides by len(xs).", "turn completed"],
        "gemini": ["<b>run_shell_command</b>", "<b>replace</b>", "Exit Code: 1",
                   # Its answer streamed in chunks (a line each) reads as one message.
                   "Fixed mean(): it divides by len(xs).",
                   '<div class="who">user <span class="muted at"', "model gemini-2.5-pro"],
        "opencode": ["<b>bash</b>", "<b>edit</b>", "step tool-calls, $0.0", "thinking",
                     "a single value still looks off"]}


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agents_conversation_reads_in_the_viewer(client: TestClient, example: Example,
                                                      agent: str) -> None:
    html = client.get(f"/runs/{example.first}/tasks/{agent}/fix-mean/00").text
    assert "<b>conversation</b>" in html
    for said in SAID[agent]:
        assert said in html, (agent, said)
    assert "msg m-raw" not in html  # every line of the transcript read as the agent's
