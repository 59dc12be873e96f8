"""Writes the example's transcripts: one plan per agent and task, printed in the real
stream format of that agent's CLI (the shapes evalledger.agents reads; see
docs/tasks.md, "Usage and cost"). Run it to remake them: python3 make.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
STATS = '"""Small statistics helpers."""\n\n\n'
MEAN = "def mean(xs):\n    return sum(xs) / len(xs)\n"
MEDIAN = ("\n\ndef median(xs):\n    s = sorted(xs)\n    mid = len(s) // 2\n"
          "    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n")
FIZZ = ("for i in range({stop}):\n"
        "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else "
        "'Buzz' if i % 5 == 0 else i)\n")

# What each agent does on each task: its turns, each a list of actions; and the files
# it leaves. ("think", text) ("say", text) ("run", command, output, exit code)
# ("edit", path, old, new) ("write", path, content).
Plan = tuple[list[list[tuple[Any, ...]]], dict[str, str]]


def fix_mean(right: bool) -> Plan:
    new = "sum(xs) / len(xs)" if right else "sum(xs) / max(len(xs), 2)"
    after = STATS + MEAN.replace("sum(xs) / len(xs)", new)
    return ([[("think", "The test says mean([2, 4]) should be 3.0; let me run it."),
              ("run", "python3 test_stats.py", "Traceback (most recent call last):\n"
               "AssertionError: mean([2, 4]) == 2.0", 1)],
             [("say", "The divisor is off by one."),
              ("edit", "stats.py", "sum(xs) / (len(xs) + 1)", new),
              ("run", "python3 test_stats.py", "ok" if right else
               "AssertionError", 0 if right else 1)],
             [("say", "Fixed mean(): it divides by len(xs)." if right else
               "Changed the divisor; a single value still looks off but I'll stop here.")]],
            {"stats.py": after})


def add_median(right: bool) -> Plan:
    body = MEDIAN if right else "\n\ndef median(xs):\n    return sorted(xs)[len(xs) // 2]\n"
    return ([[("think", "I need median(); even lengths average the middle two."),
              ("run", "cat stats.py", "def mean(xs):\n    return sum(xs) / (len(xs) + 1)", 0)],
             [("write", "stats.py", STATS + "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n"
               + body),
              ("run", "python3 -c 'from stats import median; print(median([3, 1, 2]))'", "2",
               0)],
             [("say", "Added median() to stats.py.")]],
            {"stats.py": STATS + "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n" + body})


def fizzbuzz(right: bool) -> Plan:
    code = FIZZ.format(stop="1, 16" if right else "1, 15")
    return ([[("think", "A loop over 1..15 with the usual rules."),
              ("write", "fizzbuzz.py", code)],
             [("run", "python3 fizzbuzz.py | tail -n 2", "13\n14" if not right else
               "14\nFizzBuzz", 0),
              ("say", "fizzbuzz.py prints FizzBuzz for 1 to 15.")]],
            {"fizzbuzz.py": code})


# Who gets what wrong: each agent misses one task, but Claude Code.
PLANS: dict[str, dict[str, Plan]] = {
    "claude-code": {"fix-mean": fix_mean(True), "add-median": add_median(True),
                    "fizzbuzz": fizzbuzz(True)},
    "codex": {"fix-mean": fix_mean(True), "add-median": add_median(True),
              "fizzbuzz": fizzbuzz(False)},
    "gemini": {"fix-mean": fix_mean(True), "add-median": add_median(False),
               "fizzbuzz": fizzbuzz(True)},
    "opencode": {"fix-mean": fix_mean(False), "add-median": add_median(True),
                 "fizzbuzz": fizzbuzz(True)},
}
PROMPTS = {"fix-mean": "mean() in stats.py is wrong. Fix it so that test_stats.py passes.",
           "add-median": "Add median(xs) to stats.py; an even number of values gives the mean "
                         "of the middle two.",
           "fizzbuzz": "Create fizzbuzz.py that prints FizzBuzz for 1..15, one per line."}


def usage(turn: int, actions: list[tuple[Any, ...]]) -> dict[str, int]:
    """A turn's tokens: a growing cached context, a little fresh input, the output."""
    said = sum(len(str(a)) for a in actions)
    return {"fresh": 900 + 120 * turn, "cached": 11000 + 2400 * turn, "written": 600,
            "output": 60 + said // 3}


# Rates ($ per million tokens) as evalledger's built-in rate card has them, so the
# costs the CLIs report here are what they would have charged.
SONNET = {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30}
HAIKU = {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.10}


def price(rate: dict[str, float], fresh: int, output: int, read: int, written: int) -> float:
    return round((fresh * rate["input"] + output * rate["output"] + read * rate["cache_read"]
                  + written * rate["cache_write"]) / 1e6, 8)


def claude_code(task: str, plan: Plan) -> list[dict[str, Any]]:
    sid = f"6f1e2d3c-{task[:4]}-4a5b-8c7d-9e0f1a2b3c4d"
    model, small = "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"
    lines: list[dict[str, Any]] = [{
        "type": "system", "subtype": "init", "cwd": "/work", "session_id": sid,
        "tools": ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite"],
        "mcp_servers": [], "model": model, "permissionMode": "bypassPermissions",
        "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.0.37",
        "output_style": "default", "uuid": f"{sid[:8]}-0000"}]
    totals = {"fresh": 0, "output": 0, "cached": 0, "written": 0}
    calls = 0
    for turn, actions in enumerate(plan[0]):
        use = usage(turn, actions)
        for k in totals:
            totals[k] += use[k]
        mid = f"msg_01{task[:3].upper()}{turn:02d}Xq7Lm"
        for action in actions:
            kind = action[0]
            if kind in ("think", "say"):
                block = ({"type": "thinking", "thinking": action[1], "signature": "EuYB"}
                         if kind == "think" else {"type": "text", "text": action[1]})
                content = [block]
            else:
                calls += 1
                name, args = _tool("claude-code", action)
                content = [{"type": "tool_use", "id": f"toolu_{task[:3]}{calls:03d}",
                            "name": name, "input": args}]
            lines.append({"type": "assistant", "message": {
                "model": model, "id": mid, "type": "message", "role": "assistant",
                "content": content, "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": use["fresh"],
                          "cache_creation_input_tokens": use["written"],
                          "cache_read_input_tokens": use["cached"],
                          "output_tokens": use["output"], "service_tier": "standard"}},
                "parent_tool_use_id": None, "session_id": sid})
            if kind not in ("think", "say"):
                lines.append({"type": "user", "message": {"role": "user", "content": [{
                    "tool_use_id": f"toolu_{task[:3]}{calls:03d}", "type": "tool_result",
                    "content": _output(action), "is_error": _failed(action)}]},
                    "parent_tool_use_id": None, "session_id": sid})
    main = price(SONNET, totals["fresh"], totals["output"], totals["cached"], totals["written"])
    side = {"fresh": 420, "output": 31}
    titled = price(HAIKU, side["fresh"], side["output"], 0, 0)
    lines.append({
        "type": "result", "subtype": "success", "is_error": False,
        "duration_ms": 9000 + 2100 * len(plan[0]), "duration_api_ms": 8100,
        "num_turns": len(plan[0]) + calls, "result": _last_words(plan), "session_id": sid,
        "total_cost_usd": round(main + titled, 8),
        "usage": {"input_tokens": totals["fresh"], "cache_creation_input_tokens": totals[
            "written"], "cache_read_input_tokens": totals["cached"],
                  "output_tokens": totals["output"]},
        "modelUsage": {
            model: {"inputTokens": totals["fresh"], "outputTokens": totals["output"],
                    "cacheReadInputTokens": totals["cached"],
                    "cacheCreationInputTokens": totals["written"], "webSearchRequests": 0,
                    "costUSD": main, "contextWindow": 200000},
            small: {"inputTokens": side["fresh"], "outputTokens": side["output"],
                    "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
                    "webSearchRequests": 0, "costUSD": titled, "contextWindow": 200000}},
        "permission_denials": [], "uuid": f"{sid[:8]}-ffff"})
    return lines


def codex(task: str, plan: Plan) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"type": "thread.started", "thread_id": f"0199a213-81c0-7800-8aa1-{task[:4]}bbab2a03"}]
    item = 0
    for turn, actions in enumerate(plan[0]):
        lines.append({"type": "turn.started"})
        for action in actions:
            kind = action[0]
            iid = f"item_{item}"
            item += 1
            if kind == "think":
                lines.append({"type": "item.completed", "item": {
                    "id": iid, "type": "reasoning", "text": f"**{action[1]}**"}})
            elif kind == "say":
                lines.append({"type": "item.completed", "item": {
                    "id": iid, "type": "agent_message", "text": action[1]}})
            elif kind == "run":
                command = f"bash -lc {json.dumps(action[1])}"
                lines.append({"type": "item.started", "item": {
                    "id": iid, "type": "command_execution", "command": command,
                    "aggregated_output": "", "exit_code": None, "status": "in_progress"}})
                lines.append({"type": "item.completed", "item": {
                    "id": iid, "type": "command_execution", "command": command,
                    "aggregated_output": action[2] + "\n", "exit_code": action[3],
                    "status": "completed" if action[3] == 0 else "failed"}})
            else:
                lines.append({"type": "item.completed", "item": {
                    "id": iid, "type": "file_change", "status": "completed",
                    "changes": [{"path": f"/work/{action[1]}",
                                 "kind": "update" if kind == "edit" else "add"}]}})
        use = usage(turn, actions)
        lines.append({"type": "turn.completed", "usage": {
            "input_tokens": use["fresh"] + use["cached"], "cached_input_tokens": use["cached"],
            "output_tokens": use["output"], "reasoning_output_tokens": use["output"] // 3}})
    return lines


def gemini(task: str, plan: Plan) -> list[dict[str, Any]]:
    ts = "2026-11-30T10:00:00.000Z"
    lines: list[dict[str, Any]] = [
        {"type": "init", "timestamp": ts, "session_id": f"5d2f6a8e-{task[:4]}-4c8e-9d0c",
         "model": "gemini-2.5-pro"},
        {"type": "message", "timestamp": ts, "role": "user", "content": PROMPTS[task]}]
    calls = 0
    for actions in plan[0]:
        for action in actions:
            kind = action[0]
            if kind in ("think", "say"):
                words = action[1].split(" ")
                half = len(words) // 2
                for chunk in (" ".join(words[:half]) + " ", " ".join(words[half:])):
                    lines.append({"type": "message", "timestamp": ts, "role": "assistant",
                                  "content": chunk, "delta": True})
                continue
            calls += 1
            name, args = _tool("gemini", action)
            tool_id = f"{name}-17644968{calls:05d}-a{calls}f"
            lines.append({"type": "tool_use", "timestamp": ts, "tool_name": name,
                          "tool_id": tool_id, "parameters": args})
            output = (f"Command: {action[1]}\nDirectory: (root)\nOutput: {action[2]}\n"
                      f"Exit Code: {action[3]}" if kind == "run" else
                      f"Successfully modified file: /work/{action[1]} (1 replacements)."
                      if kind == "edit" else
                      f"Successfully created and wrote to new file: /work/{action[1]}.")
            lines.append({"type": "tool_result", "timestamp": ts, "tool_id": tool_id,
                          "status": "success", "output": output})
    pro = {"fresh": 0, "output": 0, "cached": 0}
    for turn, actions in enumerate(plan[0]):
        use = usage(turn, actions)
        pro["fresh"] += use["fresh"]
        pro["cached"] += use["cached"]
        pro["output"] += use["output"]
    thoughts = 40 * len(plan[0])
    models = {"gemini-2.5-pro": _gemini_counts(pro["fresh"], pro["cached"], pro["output"],
                                               thoughts),
              "gemini-2.5-flash-lite": _gemini_counts(610, 0, 12, 0)}
    stats = {k: sum(m[k] for m in models.values())
             for k in ("total_tokens", "input_tokens", "output_tokens", "cached", "input")}
    lines.append({"type": "result", "timestamp": ts, "status": "success", "stats": {
        **stats, "duration_ms": 8000 + 1900 * len(plan[0]), "tool_calls": calls,
        "models": models}})
    return lines


def _gemini_counts(fresh: int, cached: int, output: int, thoughts: int) -> dict[str, int]:
    return {"total_tokens": fresh + cached + output + thoughts, "input_tokens": fresh + cached,
            "output_tokens": output, "cached": cached, "input": fresh}


def opencode(task: str, plan: Plan) -> list[dict[str, Any]]:
    session = f"ses_5b7e2d1c8ffe{task[:4]}Q3kR1vT9"
    start = 1764496800000
    lines: list[dict[str, Any]] = []

    def line(kind: str, at: int, **part: Any) -> None:
        lines.append({"type": kind, "timestamp": start + at, "sessionID": session,
                      "part": {"sessionID": session, **part}})

    calls = 0
    for turn, actions in enumerate(plan[0]):
        mid = f"msg_a1b2c3{task[:3]}{turn}"
        at = 2000 * turn
        line("step_start", at, id=f"prt_{mid}_0", messageID=mid, type="step-start",
             snapshot="4b825dc642cb6eb9a060e54bf8d69288fbee4904")
        for n, action in enumerate(actions, 1):
            kind = action[0]
            when = {"start": start + at + 100 * n, "end": start + at + 100 * n + 80}
            if kind in ("think", "say"):
                line("reasoning" if kind == "think" else "text", at + 100 * n,
                     id=f"prt_{mid}_{n}", messageID=mid,
                     type="reasoning" if kind == "think" else "text", text=action[1],
                     time=when)
                continue
            calls += 1
            name, args = _tool("opencode", action)
            line("tool_use", at + 100 * n, id=f"prt_{mid}_{n}", messageID=mid, type="tool",
                 callID=f"toolu_01{task[:3]}{calls:02d}", tool=name, state={
                     "status": "completed", "input": args,
                     "output": _output(action), "title": str(action[1]),
                     "metadata": {"exit": action[3]} if kind == "run" else {}, "time": when})
        use = usage(turn, actions)
        reasoning = use["output"] // 4
        output = use["output"] - reasoning
        line("step_finish", at + 1900, id=f"prt_{mid}_end", messageID=mid, type="step-finish",
             reason="stop" if turn == len(plan[0]) - 1 else "tool-calls",
             snapshot="4b825dc642cb6eb9a060e54bf8d69288fbee4904",
             cost=price(SONNET, use["fresh"], output + reasoning, use["cached"],
                        use["written"]),
             tokens={"input": use["fresh"], "output": output, "reasoning": reasoning,
                     "cache": {"read": use["cached"], "write": use["written"]}})
    lines.append({"type": "done", "timestamp": start + 2000 * len(plan[0]),
                  "sessionID": session, "reason": "idle", "rejected": []})
    return lines


# Each CLI's tools for running a command, editing a file and writing one: its name and
# the names of its fields (the path, then the old and new text, or the content).
TOOLS = {
    "claude-code": (("Bash", "command"), ("Edit", "file_path", "old_string", "new_string"),
                    ("Write", "file_path", "content")),
    "gemini": (("run_shell_command", "command"),
               ("replace", "file_path", "old_string", "new_string"),
               ("write_file", "file_path", "content")),
    "opencode": (("bash", "command"), ("edit", "filePath", "oldString", "newString"),
                 ("write", "filePath", "content")),
}


def _tool(agent: str, action: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    run, edit, write = TOOLS[agent]
    kind = action[0]
    if kind == "run":
        return run[0], {run[1]: action[1], "description": "Run it"}
    if kind == "edit":
        return edit[0], {edit[1]: f"/work/{action[1]}", edit[2]: action[2], edit[3]: action[3]}
    return write[0], {write[1]: f"/work/{action[1]}", write[2]: action[2]}


def _output(action: tuple[Any, ...]) -> str:
    if action[0] == "run":
        return str(action[2])
    return f"The file /work/{action[1]} has been {'updated' if action[0] == 'edit' else 'written'}."


def _failed(action: tuple[Any, ...]) -> bool:
    return action[0] == "run" and action[3] != 0


def _last_words(plan: Plan) -> str:
    return next(a[1] for a in reversed(plan[0][-1]) if a[0] == "say")


WRITERS = {"claude-code": claude_code, "codex": codex, "gemini": gemini, "opencode": opencode}

if __name__ == "__main__":
    for agent, tasks in PLANS.items():
        folder = HERE / agent
        folder.mkdir(exist_ok=True)
        for task, plan in tasks.items():
            lines = WRITERS[agent](task, plan)
            (folder / f"{task}.jsonl").write_text(
                "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
            (folder / f"{task}.files.json").write_text(json.dumps(plan[1], indent=1) + "\n")
