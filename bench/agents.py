"""Issue #29's table, re-made on this code: the pinned real Claude Code, Codex, Gemini and
OpenCode CLIs (tests/real_agents.py) run through ``evalledger run`` against local fake model APIs
(tests/fake_agent_api.py), what the ledger recorded beside the truth: the usage of the
calls the API finished, and the CLI's own ``total_cost_usd`` where it reported one.

A case reads ``exact`` when the tokens recorded equal the finished calls', and the cost
the CLI's and what the finished calls come to on the rate card (each to 1e-9);
``floor`` when the attempt was cut off: what its stream showed is booked, marked an
estimate, no count above what the API answered, and the run's cost says it is a floor
(``cost_complete`` false); ``WRONG`` otherwise. ``ended``: the attempt's final status
(``interrupted``: Ctrl-C'd), and the calls the gateway refused.
tests/executor/test_real_agents.py asserts the same cases.

The cases "through the gateway" run the CLI behind evalledger's model gateway
(docs/gateway.md): what is booked is what the API answered, in every ending
(tests/executor/test_gateway_real_agents.py asserts the same cases).

Run: python bench/agents.py [WORD...] (after ``python -m tests.real_agents install``):
the cases whose name holds every word given (``python bench/agents.py gateway``: those
through the gateway). Not part of the tests; takes about 5 minutes, most of it the
timeouts waited out.
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
from evalledger.pricing import DEFAULT_RATES  # noqa: E402
from tests.cli.helpers import PATIENCE, evalledger, spawn, wait_until  # noqa: E402
from tests.executor.real_agent_tasks import (  # noqa: E402
    BUDGET_USD,
    CODEX,
    CODEX_MODEL,
    GEMINI,
    GEMINI_AUTO,
    OPENCODE,
    OPUS,
    SUBAGENT,
    TOOL,
    Behind,
    claude_task,
    codex_script,
    codex_task,
    emitted,
    gateway_env,
    only_run,
    recorded,
    result_line,
    run_to_its_end,
    script,
    through_gateway,
    truth,
    write,
)
from tests.fake_agent_api import FakeAgentApi  # noqa: E402
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
            if gateway:  # the held answer comes once the CLI is dead: read on, whole
                tasks = write(folder, answer=through_gateway(task))
                run_to_its_end(folder, db, tasks, api, held, gateway_env(api), ending=ending)
                return api, db
            tasks = write(folder, answer=task)
            if ending in ("end", "timeout", "budget"):
                evalledger(folder, db, "run", str(tasks))
                return api, db
            proc = spawn(folder, db, "run", str(tasks))
            api.holding.wait(PATIENCE)
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


def _codex(*, interrupt: bool = False) -> Case:
    def run(folder: Path) -> tuple[FakeAgentApi, Path]:
        db = folder / "l.db"
        pricing = folder / "prices.yaml"
        pricing.write_text(CODEX.prices)
        hold = threading.Event() if interrupt else None
        with FakeAgentApi(codex_script(hold), main_model=CODEX_MODEL) as api:
            tasks = write(folder, answer=codex_task(folder, api))
            if not interrupt:
                evalledger(folder, db, "run", str(tasks), "--pricing", str(pricing))
                return api, db
            proc = spawn(folder, db, "run", str(tasks), "--pricing", str(pricing))
            api.holding.wait(PATIENCE)
            wait_until(lambda: any(x.get("type") == "item.completed" for x in emitted(db)),
                       "the shell call")
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=PATIENCE)
        return api, db
    return run


def _behind(agent: Behind, ending: str) -> Case:
    """A CLI through the gateway (``Behind``) to ``ending``, as the tests run it."""
    return lambda folder: agent.run(folder, ending)


def _behind_rows(agent: Behind) -> list[tuple[str, Case]]:
    """A CLI through the gateway: cut off, timed out, stopped by a budget."""
    name = f"through the gateway: {agent.name}"
    return [
        (f"{name}, Ctrl-C while its second answer is pending", _behind(agent, "ctrl-c")),
        (f"{name}, timeout ({agent.held_timeout:g} s) while its second answer is pending",
         _behind(agent, "timeout")),
        (f"{name}, cost budget ${BUDGET_USD}, passed by its first answer",
         _behind(agent, "budget")),
        (f"{name}, token budget {agent.before_its_second_step():,}: what it was answered "
         "before its second step (that step refused at the gateway)",
         _behind(agent, "budget-reached")),
    ]


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
    ("through the gateway: Codex, normal", _behind(CODEX, "end")),
    *_behind_rows(CODEX),
    (f"through the gateway: Gemini CLI {PINNED['gemini'][1][0]}, its router's side call "
     "and the model it chose", _behind(GEMINI_AUTO, "end")),
    *_behind_rows(GEMINI),
    (f"through the gateway: OpenCode {PINNED['opencode'][1][0]}, its title call and its "
     "steps", _behind(OPENCODE, "end")),
    *_behind_rows(OPENCODE),
]


def _tokens(t: TokenCounts) -> str:
    return (f"{t.input_tokens:,} / {t.output_tokens:,} / {t.cache_read_tokens:,} / "
            f"{t.cache_write_tokens:,}")


def main() -> None:
    # The CLIs live in the test cache, outside any workspace: run unconfined, as the
    # tests do (tests/conftest.py).
    os.environ.setdefault("EVALLEDGER_ISOLATION", "none")
    # Words on the command line: only the cases whose name holds every one of them.
    words = [word.lower() for word in sys.argv[1:]]
    cases = [(name, case) for name, case in CASES
             if all(word in name.lower() for word in words)]
    print("| case | recorded: in / out / cache read / cache write, cost | truth: finished "
          "calls, priced; the CLI's cost | ended | reads |")
    print("|---|---|---|---|---|")
    began = time.monotonic()
    for name, case in cases:
        with tempfile.TemporaryDirectory(prefix="evalledger-agents-") as tmp:
            api, db = case(Path(tmp))
            by_model, usages, completed, lines = recorded(db)
            out = evalledger(Path(tmp), db, "show", only_run(db), "--json")
            summary = json.loads(out.stdout)
            # The truth priced as the run prices (the rate card, and a case's pricing file).
            prices = Path(tmp) / "prices.yaml"
            rates = DEFAULT_RATES.with_file(prices) if prices.exists() else DEFAULT_RATES
        total = sum(by_model.values(), TokenCounts())
        true = sum(truth(api.served).values(), TokenCounts())
        results = [x for x in lines if x.get("type") == "result"]
        # The CLI's own cost, where its result line has one (Claude Code's).
        cli_cost = (result_line(results).get("total_cost_usd") if len(results) == 1
                    else None)
        cost, complete = summary["total_cost_usd"], summary["cost_complete"]
        said = money(cost, complete)
        priced = [rates.price(model, tokens) for model, tokens in truth(api.served).items()]
        true_cost = None if None in priced else sum(p or 0.0 for p in priced)
        exact = by_model == truth(api.served) and complete and all(
            expected is None or math.isclose(cost, expected, abs_tol=1e-9)
            for expected in (cli_cost, true_cost))
        # A floor: marked so, and no count above what the API answered (a call cut off
        # counted as far as it went).
        ceiling = sum(truth(api.served, finished=False).values(), TokenCounts())
        under = all(getattr(total, f) <= getattr(ceiling, f) for f in TokenCounts.model_fields)
        reads = "exact" if exact else "floor" if under and not complete else "WRONG"
        models = ", ".join(sorted(by_model)) or "(none named)"
        # How its last attempt ended (none: interrupted), and the calls the gateway
        # refused (a budget spent).
        ended = completed[-1].final_status.value if completed else "interrupted"
        refused = sum(1 for u in usages if u.call and u.call.get("status") == 400)
        if refused:
            ended += f", {refused} call{'s' * (refused > 1)} refused"
        print(f"| {name} | {_tokens(total)}, {said} [{models}] | {_tokens(true)}, "
              f"{'no price' if true_cost is None else f'${true_cost:.6f}'}"
              f"{'' if cli_cost is None else f'; ${cli_cost:.6f}'} | {ended} | {reads} |")
    print(f"\n{len(cases)} cases in {time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    main()
