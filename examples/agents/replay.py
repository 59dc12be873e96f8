"""A stand-in for a coding agent CLI: replays what the real one printed, no network.

$AGENT names the agent (claude-code, codex, gemini, opencode); the task is the middle
part of $EVALLEDGER_TASK_KEY. It prints transcripts/<agent>/<task>.jsonl, line by line,
as that agent's CLI wrote it, then leaves in the workspace the files the transcript
says it wrote (transcripts/<agent>/<task>.files.json). `--version` prints the version
the agent's CLI would.
"""

import json
import os
import sys
from pathlib import Path

VERSIONS = {"claude-code": "2.0.37 (Claude Code)", "codex": "codex-cli 0.46.0",
            "gemini": "0.18.4", "opencode": "1.0.118"}

agent = os.environ["AGENT"]
if sys.argv[1:] == ["--version"]:
    print(VERSIONS[agent])
    sys.exit(0)

task = os.environ["EVALLEDGER_TASK_KEY"].split("/")[1]
here = Path(os.environ.get("TRANSCRIPTS") or Path(__file__).parent / "transcripts") / agent
sys.stdin.read()  # the prompt: the transcript already answers it
for line in (here / f"{task}.jsonl").read_text(encoding="utf-8").splitlines():
    print(line, flush=True)
for path, text in json.loads((here / f"{task}.files.json").read_text()).items():
    Path(path).write_text(text, encoding="utf-8")
