"""What the real-agent tests (test_real_agents.py, test_gateway_real_agents.py) and
bench/agents.py share: the pinned CLIs' models, the scripted turns the fake APIs answer
with, the tasks that run each CLI against them, each CLI behind the gateway run to an
ending (``Behind``), and readers of what the ledger recorded against the servers' truth."""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from evalledger.ledger import Ledger, TaskCompleted, TaskEmitted, TaskUsage, TokenCounts
from evalledger.pricing import DEFAULT_RATES, RateCard, normalize_model
from tests.cli.helpers import PATIENCE, evalledger, spawn, wait_until
from tests.fake_agent_api import FakeAgentApi, Served, Turn, Usage
from tests.real_agents import require

OPUS = "claude-opus-4-8"  # Claude Code 2.1.197's default model
HAIKU = "claude-haiku-4-5-20251001"  # what its subagent asks for as "haiku"
CODEX_MODEL = "gpt-6.2-sol"  # Codex 0.171.0's default model
# Keeps the CLI offline and quiet (no telemetry, no update check); IS_SANDBOX lets it
# skip its permission prompts as root.
CLAUDE_ENV = {"IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
              "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
              "ANTHROPIC_API_KEY": "sk-ant-test"}
CRITERIA = [{"type": "file_contains", "path": "answer.txt", "includes": ["42"]}]
# Two turns, as the run: a shell call, then the answer.
TOOL = Usage(input=4, output=87, cache_read=0, cache_write=14876)
FINAL = Usage(input=6, output=5, cache_read=14876, cache_write=312)


def script(*, hold: threading.Event | None = None, subagent: bool = False) -> list[Turn]:
    first = (Turn(tool="Agent", usage=TOOL, input={
        "description": "Write the answer", "prompt": "Write 42 to answer.txt.",
        "subagent_type": "general-purpose", "model": "haiku"}) if subagent
        else Turn(command="echo 42 > answer.txt", usage=TOOL))
    return [first, Turn(text="I wrote 42 to answer.txt.", usage=FINAL, hold=hold)]


SUBAGENT = [Turn(command="echo 42 > answer.txt", usage=Usage(143, 7)),
            Turn(text="Wrote it.", usage=Usage(150, 9))]


def claude_task(folder: Path, api: FakeAgentApi, *, version: str | None = None,
                flags: str = "", **fields: Any) -> dict[str, Any]:
    binary = require("claude", version)
    return {
        "command": f"{binary} -p --output-format stream-json --verbose "
                   f"--dangerously-skip-permissions {flags}",
        "prompt": "Write 42 to answer.txt.",
        "stream_format": "claude-code",
        "env": {**CLAUDE_ENV, "ANTHROPIC_BASE_URL": api.url, "HOME": str(folder / "home")},
        "success_criteria": CRITERIA, "timeout": 60, **fields}


def write(folder: Path, **tasks: dict[str, Any]) -> Path:
    (folder / "home").mkdir(parents=True, exist_ok=True)
    out = folder / "tasks"
    out.mkdir(exist_ok=True)
    for name, fields in tasks.items():
        (out / f"{name}.yaml").write_text(yaml.safe_dump(fields), encoding="utf-8")
    return out


def only_run(db: Path) -> str:
    with Ledger(db, read_only=True) as ledger:
        (run,) = ledger.run_ids()
    return run


def recorded(db: Path) -> tuple[dict[str, TokenCounts], list[TaskUsage], list[TaskCompleted],
                                list[dict[str, Any]]]:
    """The run's usage summed per model (normalised), its usage events, its completions
    and the JSON lines its commands printed."""
    with Ledger(db, read_only=True) as ledger:
        evs = list(ledger.events(only_run(db)))
    usages = [e for e in evs if isinstance(e, TaskUsage)]
    by_model: dict[str, TokenCounts] = defaultdict(lambda: TokenCounts())
    for u in usages:
        by_model[normalize_model(u.model or "")] += u.tokens
    return (dict(by_model), usages, [e for e in evs if isinstance(e, TaskCompleted)],
            [e.data for e in evs if isinstance(e, TaskEmitted)])


def truth(served: list[Served], *, finished: bool = True) -> dict[str, TokenCounts]:
    """What the server answered, summed per model: the calls it finished (or all)."""
    by_model: dict[str, TokenCounts] = defaultdict(lambda: TokenCounts())
    for call in served:
        if call.finished or not finished:
            by_model[normalize_model(call.model)] += counts(call.usage)
    return dict(by_model)


def counts(usage: Usage) -> TokenCounts:
    return TokenCounts(input_tokens=usage.input, output_tokens=usage.output,
                       cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write)


def result_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (result,) = [line for line in lines if line.get("type") == "result"]
    return result


def show(cwd: Path, db: Path) -> dict[str, Any]:
    out = evalledger(cwd, db, "show", only_run(db), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def emitted(db: Path) -> list[dict[str, Any]]:
    try:
        with Ledger(db, read_only=True) as ledger:
            return [e.data for r in ledger.run_ids() for e in ledger.events(r)
                    if isinstance(e, TaskEmitted)]
    except Exception:  # not created yet
        return []


def codex_task(folder: Path, api: FakeAgentApi, **fields: Any) -> dict[str, Any]:
    """Codex pointed at ``api`` by a config of its own (``CODEX_HOME``), model named."""
    task = _codex(folder, "fake", f"{api.url}/v1", "FAKE_API_KEY", **fields)
    task["env"]["FAKE_API_KEY"] = "sk-test"
    return task


def codex_through_gateway(folder: Path, **fields: Any) -> dict[str, Any]:
    """Codex behind the gateway: a provider of its own whose key is ``OPENAI_API_KEY``
    and whose base URL, known only once the attempt starts, is ``$OPENAI_BASE_URL``
    (given with ``-c``: Codex's built-in provider reads no base URL from the
    environment)."""
    task = _codex(folder, "gateway", "http://set-by-the-command", "OPENAI_API_KEY", **fields)
    binary, rest = task["command"].split(" ", 1)
    url = 'model_providers.gateway.base_url=\\"$OPENAI_BASE_URL\\"'
    task["command"] = f'{binary} -c "{url}" {rest}'
    return {**task, "gateway": ["openai"], "isolation": "none"}


def _codex(folder: Path, provider: str, base_url: str, key: str,
           **fields: Any) -> dict[str, Any]:
    """Codex with a model provider of its own in its config (``CODEX_HOME``), its
    model named."""
    binary = require("codex")
    home = folder / "codex"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'model_provider = "{provider}"\n[model_providers.{provider}]\nname = "{provider}"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "{key}"\n')
    return {
        "command": f"{binary} exec --json --skip-git-repo-check "
                   "--dangerously-bypass-approvals-and-sandbox -",
        "prompt": "Write 42 to answer.txt.", "stream_format": "codex",
        "model": CODEX_MODEL, "agent_version_command": f"{binary} --version",
        "env": {"CODEX_HOME": str(home), "HOME": str(folder / "home")},
        "success_criteria": CRITERIA, "timeout": 60, **fields}


GEMINI_MODEL = "gemini-2.5-pro"
# Gemini CLI 0.61.0 with its model left to "auto": its router asks this model which
# model to use (a side call), and the main one is this.
GEMINI_ROUTER, GEMINI_ROUTED = "gemini-3.5-flash-lite", "gemini-3.8-flash"
# Gemini CLI with an API key (never asked for a login), no telemetry, no folder trust
# prompt.
GEMINI_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"},
                                "folderTrust": {"enabled": False}},
                   "telemetry": {"enabled": False},
                   "privacy": {"usageStatisticsEnabled": False}}


def gemini_through_gateway(folder: Path, *, routed: bool = False,
                           **fields: Any) -> dict[str, Any]:
    """Gemini CLI behind the gateway (it reads ``GOOGLE_GEMINI_BASE_URL`` and
    ``GEMINI_API_KEY``), its model named (``routed``: left to its router)."""
    binary = require("gemini")
    settings = folder / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(GEMINI_SETTINGS))
    model = "" if routed else f"-m {GEMINI_MODEL} "
    return {"command": f"{binary} {model}--output-format stream-json --yolo "
                       "-p 'Write 42 to answer.txt.'",
            "stream_format": "gemini", "gateway": ["gemini"], "isolation": "none",
            "env": {"HOME": str(folder / "home")}, "success_criteria": CRITERIA,
            # A bound, not a wait: its first start takes long on a loaded machine.
            "timeout": 180, **fields}


OPENCODE_MODEL = "claude-sonnet-4-5"


def opencode_through_gateway(folder: Path, **fields: Any) -> dict[str, Any]:
    """OpenCode behind the gateway: its Anthropic provider's base URL and key read from
    the environment the gateway sets (its config, ``OPENCODE_CONFIG``)."""
    binary = require("opencode")
    config = folder / "opencode.json"
    config.write_text(json.dumps({
        "model": f"anthropic/{OPENCODE_MODEL}", "autoupdate": False, "share": "disabled",
        "provider": {"anthropic": {"options": {"baseURL": "{env:ANTHROPIC_BASE_URL}/v1",
                                               "apiKey": "{env:ANTHROPIC_API_KEY}"}}}}))
    (folder / "home").mkdir(parents=True, exist_ok=True)
    return {"command": f"{binary} run --format json 'Write 42 to answer.txt.'",
            "stream_format": "opencode", "gateway": ["anthropic"], "isolation": "none",
            "env": {"HOME": str(folder / "home"), "OPENCODE_CONFIG": str(config),
                    "OPENCODE_DISABLE_AUTOUPDATE": "1"},
            # A bound, not a wait: its first start takes long on a loaded machine.
            "success_criteria": CRITERIA, "timeout": 180, **fields}


def gemini_script(hold: threading.Event | None = None) -> list[Turn]:
    return [Turn(command="echo 42 > answer.txt", usage=Usage(5200, 40, 1000)),
            Turn(text="I wrote 42 to answer.txt.", usage=Usage(300, 12, 6200), hold=hold)]


def codex_script(hold: threading.Event | None = None) -> list[Turn]:
    return [Turn(command="echo 42 > answer.txt", usage=Usage(9342, 38, 9088)),
            Turn(text="I wrote 42 to answer.txt.", usage=Usage(0, 32), hold=hold)]


# How long a real CLI may take to come to a call it was scripted to make.
AGENT_PATIENCE = 4 * PATIENCE

# Behind the gateway (docs/gateway.md): the runner's key, which the CLI never gets.
RUNNER_KEY = "sk-ant-runner"


def gateway_env(api: FakeAgentApi) -> dict[str, str]:
    """The runner's environment for a run whose agent calls through the gateway to
    ``api``: its keys, the upstreams, and a drain long enough for a test to answer in."""
    return {"ANTHROPIC_API_KEY": RUNNER_KEY, "EVALLEDGER_GATEWAY_ANTHROPIC_URL": api.url,
            "OPENAI_API_KEY": RUNNER_KEY, "EVALLEDGER_GATEWAY_OPENAI_URL": api.url,
            "GEMINI_API_KEY": RUNNER_KEY, "EVALLEDGER_GATEWAY_GEMINI_URL": api.url,
            "EVALLEDGER_GATEWAY_DRAIN": "30"}


def through_gateway(task: dict[str, Any]) -> dict[str, Any]:
    """``task`` calling its model through the gateway (its own base URL and key are
    overridden by the gateway's)."""
    return {**task, "gateway": ["anthropic"], "isolation": "none"}


def agent_alive(home: Path) -> bool:
    """Whether a process of this test's agent (its HOME) is still running."""
    mark = f"HOME={home}".encode() + b"\0"
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes():
                return True
        except OSError:
            continue
    return False


def release_once_the_agent_is_gone(api: FakeAgentApi, hold: threading.Event,
                                    home: Path) -> threading.Thread:
    """Answer the held call in full once the agent is dead: the gateway reads it on."""
    def release() -> None:
        # A CLI's first start (OpenCode's: a compiled binary and its first-run set-up)
        # takes long on a loaded machine: its turn is waited for, however long.
        assert api.holding.wait(AGENT_PATIENCE), "the agent never asked for its held answer"
        # Killed by a Ctrl-C at once; by its timeout (``Behind.held_timeout``) later.
        wait_until(lambda: not agent_alive(home), "the agent killed", AGENT_PATIENCE)
        hold.set()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def run_interrupted(folder: Path, db: Path, tasks: Path, api: FakeAgentApi,
                    hold: threading.Event, env: dict[str, str], *args: str) -> None:
    """``evalledger run`` of ``tasks`` as a real process, Ctrl-C'd once the agent waits
    on its held answer, which is then given in full once the agent is dead (the
    gateway reads it on)."""
    releaser = release_once_the_agent_is_gone(api, hold, folder / "home")
    proc = spawn(folder, db, "run", str(tasks), *args, env=env)
    assert api.holding.wait(AGENT_PATIENCE), "the agent never asked for its held answer"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=PATIENCE)
    releaser.join(PATIENCE)


def run_to_its_end(folder: Path, db: Path, tasks: Path, api: FakeAgentApi,
                   hold: threading.Event | None, env: dict[str, str], *args: str,
                   ending: str = "end") -> None:
    """``evalledger run`` of ``tasks`` to ``ending``: its end, which must succeed;
    Ctrl-C'd on the held answer (``run_interrupted``); its timeout on the held answer,
    which is given in full once the agent is dead; a budget (``budget``: the attempt
    fails)."""
    if ending == "ctrl-c":
        assert hold is not None
        run_interrupted(folder, db, tasks, api, hold, env, *args)
        return
    releaser = None
    if ending == "timeout":
        assert hold is not None
        releaser = release_once_the_agent_is_gone(api, hold, folder / "home")
    out = evalledger(folder, db, "run", str(tasks), *args, env=env)
    assert out.returncode == (0 if ending == "end" else 1), out.stdout + out.stderr
    if releaser is not None:
        assert api.holding.is_set(), "its timeout came before it asked for its held answer"
        releaser.join(PATIENCE)


# How a CLI behind the gateway is ended: the ways of ``run_to_its_end``. ``budget``: its
# first answer passes the task's cost budget (the runner stops it at the next line it
# prints); ``budget-reached``: what it was answered before its second step is the task's
# token budget to the token (not passed: it goes on), and that step is refused at the
# gateway.
ENDINGS = ("end", "ctrl-c", "timeout", "budget", "budget-reached")
# The task's budget in the ``budget`` ending: less than each CLI's first answer costs.
BUDGET_USD = 0.005


@dataclasses.dataclass(frozen=True)
class Behind:
    """A real CLI behind the gateway, as the tests and bench/agents.py run it: its
    scripted turns (its second answer held, or not), its main model and the turns its
    side calls get, its task (a function of its folder and fields), the rates of a
    pricing file the run is given (YAML; none: the rate card's), and the timeout that
    ends it while its second answer is held: a bound on how long it takes to come to
    that call on a loaded machine, all of it waited out."""

    name: str
    model: str
    turns: Callable[[threading.Event | None], list[Turn]]
    side: tuple[Turn, ...]
    task: Callable[..., dict[str, Any]]
    held_timeout: float
    prices: str = ""

    def run(self, folder: Path, ending: str) -> tuple[FakeAgentApi, Path]:
        """Run it to ``ending`` (``ENDINGS``) in ``folder``: the fake API (what it
        served: the truth) and the ledger."""
        assert ending in ENDINGS, ending
        db = folder / "l.db"
        hold = threading.Event() if ending in ("ctrl-c", "timeout") else None
        fields: dict[str, Any] = {}
        if ending == "timeout":
            fields["timeout"] = self.held_timeout
        elif ending == "budget":
            fields["budget"] = {"max_cost_usd": BUDGET_USD}
        elif ending == "budget-reached":
            fields["budget"] = {"max_tokens": self.before_its_second_step()}
        args: list[str] = []
        if self.prices:
            (folder / "prices.yaml").write_text(self.prices)
            args = ["--pricing", str(folder / "prices.yaml")]
        turns = self.turns(hold)
        side_first = None
        if ending == "budget-reached" and self.side:
            # Its side call, asked as it starts, is to be in the budget before its
            # second step asks: its first answer waits for the side call's end.
            side_first = threading.Event()
            turns[0] = dataclasses.replace(turns[0], hold=side_first)
        with FakeAgentApi(turns, main_model=self.model, side=list(self.side)) as api:
            if side_first is not None:
                _release_after_a_side_call(api, side_first)
            tasks = write(folder, answer=self.task(folder, **fields))
            run_to_its_end(folder, db, tasks, api, hold, gateway_env(api), *args,
                           ending=ending)
        return api, db

    def before_its_second_step(self) -> int:
        """The tokens it is answered before its second step: its first, and its side
        call's (a title, a router's choice: asked once, at its start)."""
        return sum(counts(turn.usage).total for turn in (self.turns(None)[0], *self.side))

    def rates(self, folder: Path) -> RateCard:
        """The rates its run in ``folder`` priced its calls with."""
        return DEFAULT_RATES.with_file(folder / "prices.yaml") if self.prices else DEFAULT_RATES


def _release_after_a_side_call(api: FakeAgentApi, hold: threading.Event) -> None:
    """Set ``hold`` once ``api`` answered a side call in full (or gave up waiting)."""
    def release() -> None:
        try:
            wait_until(lambda: any(call.side and call.finished for call in api.served),
                       "a side call answered", AGENT_PATIENCE)
        finally:
            hold.set()

    threading.Thread(target=release, daemon=True).start()


# The timeouts: six of these CLIs started at once on two cores came to their held call
# in 6 s (Codex, a native binary), 16 s (Gemini CLI) and 27 s (OpenCode); about three
# times that, and within AGENT_PATIENCE, which the other endings wait for that call.
CODEX = Behind("Codex", CODEX_MODEL, codex_script, (), codex_through_gateway,
               held_timeout=20,
               prices=f"{CODEX_MODEL}: {{input: 2, output: 12, cache_read: 0.2}}\n")
GEMINI = Behind("Gemini CLI", GEMINI_MODEL, gemini_script, (), gemini_through_gateway,
                held_timeout=60)
# Left to its router: a side call asks a small model which model to use.
GEMINI_AUTO = Behind(
    "Gemini CLI", GEMINI_ROUTED, gemini_script, (Turn(text="route", usage=Usage(310, 18)),),
    functools.partial(gemini_through_gateway, routed=True), held_timeout=60)
# Its session's title: a side call on a small model.
OPENCODE = Behind("OpenCode", OPENCODE_MODEL, lambda hold: script(hold=hold),
                  (Turn(text="Write the answer", usage=Usage(80, 4)),),
                  opencode_through_gateway, held_timeout=90)
