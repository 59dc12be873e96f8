"""``run --stream``: an agent's stream-json goes by as its conversation, a line per step,
never as raw JSON; other tasks' lines as before."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from evalledger.ledger import Ledger, TaskEmitted

from .helpers import evalledger

TRANSCRIPT = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "tools": ["Bash"]},
    {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [
        {"type": "text", "text": "I will list the files."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls -la"}}],
        "usage": {"input_tokens": 100, "output_tokens": 20}}},
    {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
         "content": "ls: \x1b[31mdenied\x1b[0m"}]}},
    {"type": "result", "subtype": "success", "total_cost_usd": 0.0123, "num_turns": 2,
     "duration_ms": 1500, "result": "All done.", "usage": {"input_tokens": 100}},
]


def test_stream_shows_an_agents_json_as_its_conversation(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    script = tmp_path / "agent.py"
    script.write_text("import json\n" + "".join(
        f"print(json.dumps({line!r}))\n" for line in TRANSCRIPT) + "print('plain text')\n",
        encoding="utf-8")
    (tasks / "agent.yaml").write_text(yaml.safe_dump({
        "command": ["python3", str(script)], "stream_format": "claude-code",
        "success_criteria": [{"type": "exit_code"}]}), encoding="utf-8")
    (tasks / "native.yaml").write_text(yaml.safe_dump({
        "command": "echo '{\"type\": \"note\", \"x\": 1}'",
        "success_criteria": [{"type": "exit_code"}]}), encoding="utf-8")
    db = tmp_path / "l.db"
    result = evalledger(tmp_path, db, "run", str(tasks), "--stream")
    assert result.returncode == 0, result
    agent = [line for line in result.out_lines if line.startswith("[default/agent/00] ")]
    assert [line.split("] ", 1)[1] for line in agent] == [
        "session: claude-sonnet-4-5, 1 tool",
        "assistant: I will list the files.",
        "\u2192 Bash: ls -la",
        "\u2190 error: ls: \\x1b[31mdenied\\x1b[0m",  # a terminal gets no escape from a task
        "result: success, $0.0123, 2 turns, 1.5s",
        "  All done.",
        "plain text",
    ]
    # A task of no agent format still shows its JSON as JSON.
    assert '[default/native/00] {"type": "note", "x": 1}' in result.out_lines
    # The ledger keeps the lines as they were: the feed is only how they are shown.
    with Ledger(db, read_only=True) as ledger:
        kept = [e.data for e in ledger.events() if isinstance(e, TaskEmitted)
                and e.task_key == "default/agent/00"]
    assert kept == [json.loads(json.dumps(line)) for line in TRANSCRIPT]
