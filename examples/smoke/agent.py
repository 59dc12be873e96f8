"""A scripted stand-in for a coding agent: no network, no API key.

It reads its prompt (stdin and EVALLEDGER_PROMPT), "thinks" by printing a few
JSON events and native usage lines, then does what the task's AGENT_PLAN says:
writes a correct solution, a wrong one, or stalls until the timeout stops it.
"""

import json
import os
import sys
import time

plan = os.environ.get("AGENT_PLAN", "solve")
prompt = sys.stdin.read() or os.environ.get("EVALLEDGER_PROMPT", "")
model = os.environ.get("AGENT_MODEL", "claude-sonnet-4-5")


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


say(type="thinking", text=f"read a prompt of {len(prompt.split())} words")
print(f"agent: plan={plan}", flush=True)
say(type="usage", model=model, input_tokens=1200 + len(prompt), output_tokens=350,
    cache_read_tokens=800)

solutions = {
    "add": "import sys\nprint(int(sys.argv[1]) + int(sys.argv[2]))\n",
    "reverse": "import sys\nprint(sys.argv[1][::-1])\n",
    # A plausible mistake: off by one at the top of the range.
    "fizzbuzz-wrong": (
        "for i in range(1, 15):\n"
        "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else "
        "'Buzz' if i % 5 == 0 else i)\n"
    ),
}

if plan == "stall":
    print("agent: this one is hard, thinking for a long time...", flush=True)
    time.sleep(3600)
elif plan in solutions:
    target = os.environ.get("AGENT_FILE", "solution.py")
    with open(target, "w") as f:
        f.write(solutions[plan])
    say(type="tool_use", tool="write_file", path=target)
    say(type="usage", model=model, input_tokens=900, output_tokens=420)
    print(f"agent: wrote {target}", flush=True)
    print("done", flush=True)
else:
    print(f"agent: unknown plan {plan!r}", file=sys.stderr)
    sys.exit(3)
