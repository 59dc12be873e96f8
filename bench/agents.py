"""Issue #29's table, re-made on this code: the pinned real Claude Code, Codex, Gemini and
OpenCode CLIs (tests/real_agents.py) run through ``evalledger run`` against local fake model APIs
(tests/fake_agent_api.py), what the ledger recorded beside the truth: the usage of the
calls the API finished, and the CLI's own ``total_cost_usd`` where it reported one.

A case reads ``exact`` when the tokens recorded equal the finished calls' and the cost
the CLI's (to 1e-9); ``floor`` when the attempt was cut off: what its stream showed is
booked, marked an estimate, no count above what the API answered, and the run's cost
says it is a floor (``cost_complete`` false); ``WRONG`` otherwise.
tests/executor/test_real_agents.py asserts the same cases.

The cases "through the gateway" run the CLI behind evalledger's model gateway
(docs/gateway.md): what is booked is what the API answered, in every ending.

Run: python bench/agents.py (after ``python -m tests.real_agents install``). Not part of
the tests; takes about 30 s.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalledger._text import money  # noqa: E402
from evalledger.ledger import TokenCounts  # noqa: E402
from tests.cli.helpers import PATIENCE, evalledger, spawn, wait_until  # noqa: E402
from tests.executor.real_agent_tasks import (  # noqa: E402
    CODEX_MODEL,
    GEMINI_MODEL,
    GEMINI_ROUTED,
    OPENCODE_MODEL,
    OPUS,
    SUBAGENT,
    TOOL,
    claude_task,
    codex_script,
    codex_task,
    codex_through_gateway,
    emitted,
    gateway_env,
    gemini_script,
    gemini_through_gateway,
    only_run,
    opencode_through_gateway,
    recorded,
    release_once_the_agent_is_gone,
    result_line,
    run_to_its_end,
    script,
    through_gateway,
    truth,
    write,
)
from tests.fake_agent_api import FakeAgentApi, Turn, Usage  # noqa: E402
from tests.real_agents import PINNED  # noqa: E402

Case = Callable[[Path], tuple[FakeAgentApi, Path]]


def _claude(flags: str = "", *, version: str | None = None, main: str = OPUS,
            subagent: bool = False, hold: bool = False, ending: str = "end",
            native: bool = False, gateway: bool = False, **fields: Any) -> Case:
    def run(folder: Path) -> tuple[FakeAgentApi, Path]:
        db = folder / "l.db"
        held = threading.Event() if hold else None
        with FakeAgentApi(script(hold=held, subagent=subagent), main_model=main,
                          side=SUBAGENT) as api:
            task = claude_task(folder, api, version=version, flags=flags, **fields)
            if native:
                del task["stream_format"]
            env: dict[str, str] = {}
            if gateway:  # the held answer comes once the CLI is dead: read on, whole
                task, env = through_gateway(task), gateway_env(api)
                if held is not None:
                    release_once_the_agent_is_gone(api, held, folder / "home")
            tasks = write(folder, answer=task)
            if ending in ("end", "timeout", "budget"):
                evalledger(folder, db, "run", str(tasks), env=env)
                return api, db
            proc = spawn(folder, db, "run", str(tasks), env=env)
            api.holding.wait(PATIENCE)
            if gateway:
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=PATIENCE)
                return api, db
            shown = "msg_0002" if flags else "msg_0001"
            wait_until(lambda: any(shown in json.dumps(x) for x in emitted(db)), shown)
            if ending == "ctrl-c":
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=PATIENCE)
                return api, db
            proc.kill()
            proc.communicate(timeout=PATIENCE)
            api.script = script()
            evalledger(folder, db, "resume", only_run(db))
            return api, db
    return run


def _codex(*, interrupt: bool = False, gateway: bool = False) -> Case:
    def run(folder: Path) -> tuple[FakeAgentApi, Path]:
        db = folder / "l.db"
        pricing = folder / "prices.yaml"
        pricing.write_text(f"{CODEX_MODEL}: {{input: 2, output: 12, cache_read: 0.2}}\n")
        hold = threading.Event() if interrupt else None
        with FakeAgentApi(codex_script(hold), main_model=CODEX_MODEL) as api:
            task, env = codex_task(folder, api), {}
            if gateway:
                task, env = codex_through_gateway(folder, api), gateway_env(api)
                if hold is not None:
                    release_once_the_agent_is_gone(api, hold, folder / "home")
            tasks = write(folder, answer=task)
            if not interrupt:
                evalledger(folder, db, "run", str(tasks), "--pricing", str(pricing), env=env)
                return api, db
            proc = spawn(folder, db, "run", str(tasks), "--pricing", str(pricing), env=env)
            api.holding.wait(PATIENCE)
            wait_until(lambda: any(x.get("type") == "item.completed" for x in emitted(db)),
                       "the shell call")
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=PATIENCE)
        return api, db
    return run


def _gemini(*, interrupt: bool = False) -> Case:
    """Gemini CLI through the gateway: left to its router (a side call), or its model
    named and its second answer held, then Ctrl-C."""
    def run(folder: Path) -> tuple[FakeAgentApi, Path]:
        db = folder / "l.db"
        hold = threading.Event() if interrupt else None
        main = GEMINI_MODEL if interrupt else GEMINI_ROUTED
        with FakeAgentApi(gemini_script(hold), main_model=main,
                          side=[Turn(text="route", usage=Usage(310, 18))]) as api:
            tasks = write(folder, answer=gemini_through_gateway(folder, routed=not interrupt))
            run_to_its_end(folder, db, tasks, api, hold, gateway_env(api))
        return api, db
    return run


def _opencode(*, interrupt: bool = False) -> Case:
    """OpenCode through the gateway: its title call on a small model, then its steps;
    or its second answer held, then Ctrl-C."""
    def run(folder: Path) -> tuple[FakeAgentApi, Path]:
        db = folder / "l.db"
        hold = threading.Event() if interrupt else None
        with FakeAgentApi(script(hold=hold), main_model=OPENCODE_MODEL,
                          side=[Turn(text="Write the answer", usage=Usage(80, 4))]) as api:
            tasks = write(folder, answer=opencode_through_gateway(folder))
            run_to_its_end(folder, db, tasks, api, hold, gateway_env(api))
        return api, db
    return run


PARTIAL = "--include-partial-messages"
CASES: list[tuple[str, Case]] = [
    (f"Claude Code {PINNED['claude'][1][0]}, normal (default model {OPUS})", _claude()),
    ("a subagent on a second model (haiku)", _claude(subagent=True)),
    ("Ctrl-C while the second answer is pending", _claude(hold=True, ending="ctrl-c")),
    (f"the same, {PARTIAL}", _claude(PARTIAL, hold=True, ending="ctrl-c")),
    (f"timeout mid-run, {PARTIAL}", _claude(PARTIAL, hold=True, ending="timeout",
                                            timeout=8)),
    (f"token budget 14,900 (the first message: {TOOL.input + TOOL.output + TOOL.cache_write:,}"
     f" used, 14,881 at its start), {PARTIAL}",
     _claude(PARTIAL, hold=True, ending="budget", budget={"max_tokens": 14_900})),
    ("the runner killed (SIGKILL) mid-run, then resume", _claude(hold=True, ending="kill")),
    ("Claude Code JSON with no stream_format (native)", _claude(native=True)),
    (f"Claude Code {PINNED['claude'][1][1]} (default model claude-opus-5-5)",
     _claude(version=PINNED["claude"][1][1], main="claude-opus-5-5")),
    (f"Codex {PINNED['codex'][1][0]} ({CODEX_MODEL}, priced from a pricing file)", _codex()),
    ("Codex, Ctrl-C while its second answer is pending", _codex(interrupt=True)),
    ("through the gateway: Claude Code, normal", _claude(gateway=True)),
    ("through the gateway: a subagent on haiku", _claude(subagent=True, gateway=True)),
    ("through the gateway: Ctrl-C while the second answer is pending (no partial "
     "messages)", _claude(hold=True, ending="ctrl-c", gateway=True)),
    ("through the gateway: timeout mid-run", _claude(hold=True, ending="timeout",
                                                      timeout=8, gateway=True)),
    ("through the gateway: cost budget $0.01, passed by the first answer",
     _claude(ending="budget", budget={"max_cost_usd": 0.01}, gateway=True)),
    ("through the gateway: Codex, normal", _codex(gateway=True)),
    ("through the gateway: Codex, Ctrl-C while its second answer is pending",
     _codex(interrupt=True, gateway=True)),
    (f"through the gateway: Gemini CLI {PINNED['gemini'][1][0]}, its router's side call "
     "and the model it chose", _gemini()),
    ("through the gateway: Gemini CLI, Ctrl-C while its second answer is pending",
     _gemini(interrupt=True)),
    (f"through the gateway: OpenCode {PINNED['opencode'][1][0]}, its title call and its "
     "steps", _opencode()),
    ("through the gateway: OpenCode, Ctrl-C while its second answer is pending",
     _opencode(interrupt=True)),
]


def _tokens(t: TokenCounts) -> str:
    return (f"{t.input_tokens:,} / {t.output_tokens:,} / {t.cache_read_tokens:,} / "
            f"{t.cache_write_tokens:,}")


def main() -> None:
    # The CLIs live in the test cache, outside any workspace: run unconfined, as the
    # tests do (tests/conftest.py).
    os.environ.setdefault("EVALLEDGER_ISOLATION", "none")
    print("| case | recorded: in / out / cache read / cache write, cost | truth: finished "
          "calls, the CLI's cost | reads |")
    print("|---|---|---|---|")
    began = time.monotonic()
    for name, case in CASES:
        with tempfile.TemporaryDirectory(prefix="evalledger-agents-") as tmp:
            api, db = case(Path(tmp))
            by_model, _, _, lines = recorded(db)
            out = evalledger(Path(tmp), db, "show", only_run(db), "--json")
            summary = json.loads(out.stdout)
        total = sum(by_model.values(), TokenCounts())
        true = sum(truth(api.served).values(), TokenCounts())
        results = [x for x in lines if x.get("type") == "result"]
        # The CLI's own cost, where its result line has one (Claude Code's).
        cli_cost = (result_line(results).get("total_cost_usd") if len(results) == 1
                    else None)
        cost, complete = summary["total_cost_usd"], summary["cost_complete"]
        said = money(cost, complete)
        exact = by_model == truth(api.served) and complete and (
            cli_cost is None or math.isclose(cost, cli_cost, abs_tol=1e-9))
        # A floor: marked so, and no count above what the API answered (a call cut off
        # counted as far as it went).
        ceiling = sum(truth(api.served, finished=False).values(), TokenCounts())
        under = all(getattr(total, f) <= getattr(ceiling, f) for f in TokenCounts.model_fields)
        reads = "exact" if exact else "floor" if under and not complete else "WRONG"
        models = ", ".join(sorted(by_model)) or "(none named)"
        print(f"| {name} | {_tokens(total)}, {said} [{models}] | {_tokens(true)}"
              f"{'' if cli_cost is None else f', ${cli_cost:.6f}'} | {reads} |")
    print(f"\n{len(CASES)} cases in {time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    main()
