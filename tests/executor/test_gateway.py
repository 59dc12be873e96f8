"""The model gateway (executor/_gateway.py) as a run uses it: a real agent process (a
small Python client, as an SDK calls) pointed at it by its environment, real fake
upstreams on loopback ports, and what the ledger recorded checked against what each
upstream answered."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger, TaskCompleted, TaskUsage, TokenCounts
from evalledger.pricing import DEFAULT_RATES
from evalledger.statuses import FailureClass, FinalStatus
from tests.cli.helpers import PATIENCE, evalledger, wait_until
from tests.fake_agent_api import FakeAgentApi, Turn, Usage
from tests.fake_api import FakeApi, LoopbackServer, Reply, anthropic_answer

from .gateway_sandbox import confined_python
from .real_agent_tasks import counts, only_run

SONNET = "claude-sonnet-4-5"
# An agent as an SDK is one: calls its API at the base URL and with the key its
# environment gives, streaming or not; says what it saw of its environment.
CLIENT = '''
import json, os, signal, sys, urllib.error, urllib.request
calls = json.loads(sys.argv[1])
if os.environ.get("HOLD_ON"):  # says what it was answered before a budget's SIGTERM ends it
    signal.signal(signal.SIGTERM, lambda *_: None)
seen = {k: os.environ.get(k, "") for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY",
        "GEMINI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL")}
open("seen.json", "w").write(json.dumps(seen))
open(os.environ["PID_FILE"], "w").write(str(os.getpid()))
bases = {"anthropic": seen["ANTHROPIC_BASE_URL"], "openai": seen["OPENAI_BASE_URL"],
         "gemini": seen["GOOGLE_GEMINI_BASE_URL"]}
keys = {"anthropic": ("x-api-key", seen["ANTHROPIC_API_KEY"]),
        "openai": ("authorization", "Bearer " + seen["OPENAI_API_KEY"]),
        "gemini": ("x-goog-api-key", seen["GEMINI_API_KEY"])}
for call in calls:
    name, value = keys[call.get("via", call["provider"])]
    base = bases[call.get("via", call["provider"])]
    if "via" in call:  # another provider's path on this one's token
        base = base.rsplit("/", 1)[0] + "/" + call["provider"]
    request = urllib.request.Request(base + call["path"], method=call.get("method", "POST"),
        data=json.dumps(call["body"]).encode(),
        headers={name: value, "content-type": "application/json", **call.get("headers", {})})
    try:
        with urllib.request.urlopen(request) as answer:
            print(json.dumps({"status": answer.status, "bytes": len(answer.read())}))
    except urllib.error.HTTPError as e:
        said = json.dumps({"status": e.code, "error": json.loads(e.read())})
        print(said)
        with open(os.environ["PID_FILE"] + ".answer", "w") as answer:
            answer.write(said)
        sys.exit(1)
'''


def anthropic(stream: bool = True) -> dict[str, Any]:
    return {"provider": "anthropic", "path": "/v1/messages", "body": {
        "model": SONNET, "stream": stream, "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}]}}


def run_agent(folder: Path, calls: list[dict[str, Any]], upstreams: dict[str, str], *,
              gateway: object = True, ca: Path | None = None,
              **fields: Any) -> tuple[int, Path]:
    """One task whose command is ``CLIENT`` making ``calls``, run through the gateway
    with the runner's keys ``sk-runner-*``, the upstreams given, and the CA bundle
    ``ca`` to trust for them."""
    folder.mkdir(exist_ok=True)
    (folder / "client.py").write_text(CLIENT, encoding="utf-8")
    task = {"command": [sys.executable, str(folder / "client.py"), json.dumps(calls)],
            "isolation": "none", "gateway": gateway, "timeout": 60,
            "success_criteria": [{"type": "exit_code"}], **fields,
            "env": {"ANTHROPIC_API_KEY": "sk-task-own", "PID_FILE": str(folder / "pid"),
                    **fields.get("env", {})}}
    (folder / "tasks").mkdir(exist_ok=True)
    (folder / "tasks" / "agent.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    env = {"ANTHROPIC_API_KEY": "sk-runner-a", "OPENAI_API_KEY": "sk-runner-o",
           "GEMINI_API_KEY": "sk-runner-g", "EVALLEDGER_GATEWAY_DRAIN": "0.5",
           **{f"EVALLEDGER_GATEWAY_{name.upper()}_URL": url for name, url in upstreams.items()},
           **({"EVALLEDGER_GATEWAY_CA": str(ca)} if ca else {})}
    db = folder / "l.db"
    done = evalledger(folder, db, "run", str(folder / "tasks"), "--kill-grace", "0.5", env=env)
    return done.returncode, db


def read(db: Path) -> tuple[list[TaskUsage], TaskCompleted]:
    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(only_run(db)))
    (completed,) = [e for e in events if isinstance(e, TaskCompleted)]
    return [e for e in events if isinstance(e, TaskUsage)], completed


def total(usages: list[TaskUsage]) -> TokenCounts:
    found = TokenCounts()
    for usage in usages:
        found += usage.tokens
    return found


def test_each_call_is_booked_as_the_upstream_answered_it_and_keys_stay_the_runners(
        tmp_path: Path) -> None:
    script = [Turn(text="a", usage=Usage(100, 20, 5000, 300)), Turn(text="b", usage=Usage(7, 9))]
    with FakeAgentApi(script, main_model=SONNET) as api:
        code, db = run_agent(tmp_path, [anthropic(), anthropic(stream=False)],
                             {"anthropic": api.url})
    assert code == 0
    usages, done = read(db)
    assert [u.tokens for u in usages] == [counts(s.usage) for s in api.served]
    assert [u.model for u in usages] == [SONNET, SONNET]
    # The fake answers each as a stream (stream: false or not): read as what came.
    assert [u.call["streamed"] for u in usages if u.call] == [True, True]
    assert all(u.call and u.call["via"] == "gateway" and u.call["status"] == 200
               and u.call["request_id"] for u in usages)
    assert [u.cost_usd for u in usages] == [DEFAULT_RATES.price(SONNET, u.tokens) for u in usages]
    assert done.tokens == total(usages) and done.cost_complete
    assert done.cost_usd == pytest.approx(sum(u.cost_usd or 0 for u in usages), abs=1e-12)
    # Upstream got the runner's key; the agent only its token, never a key of ours.
    assert {r["headers"]["x-api-key"] for r in api.requests} == {"sk-runner-a"}
    seen = _seen(tmp_path)
    assert seen["ANTHROPIC_API_KEY"].startswith("evl-")
    assert seen["ANTHROPIC_API_KEY"] == seen["OPENAI_API_KEY"] == seen["GEMINI_API_KEY"]
    assert seen["ANTHROPIC_BASE_URL"].endswith(f"/{seen['ANTHROPIC_API_KEY']}/anthropic")
    assert seen["OPENAI_BASE_URL"].endswith("/openai/v1")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_https_upstream_is_trusted_through_the_ca_given_and_no_other(
        tmp_path: Path) -> None:
    """As the real APIs are reached (HTTPS, verified): a local upstream whose certificate
    a test CA issued is reached once that CA is given (EVALLEDGER_GATEWAY_CA), and each
    call booked as it answered; without it, the certificate is refused and nothing
    reaches the upstream (the call is recorded, unreachable)."""
    import trustme

    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    script = [Turn(text="a", usage=Usage(100, 20, 5000, 300)), Turn(text="b", usage=Usage(7, 9))]
    with FakeAgentApi(script, main_model=SONNET).secure(ca) as api:
        assert api.url.startswith("https://localhost:")
        trusted, db = run_agent(tmp_path / "trusted", [anthropic(), anthropic(stream=False)],
                                {"anthropic": api.url}, ca=bundle)
        untrusted, refused_db = run_agent(tmp_path / "untrusted", [anthropic()],
                                          {"anthropic": api.url})
    assert trusted == 0 and untrusted == 1
    usages, done = read(db)
    assert [u.tokens for u in usages] == [counts(s.usage) for s in api.served]
    assert len(api.served) == 2 and done.tokens == total(usages)
    assert {r["headers"]["x-api-key"] for r in api.requests} == {"sk-runner-a"}
    (refused,), _ = read(refused_db)
    assert refused.call is not None and refused.call["status"] == "unreachable"


def _seen(folder: Path) -> dict[str, str]:
    (found,) = folder.glob("runs/*/artifacts/default/agent/00/seen.json")
    return json.loads(found.read_text())


def sse(*events: dict[str, Any]) -> Reply:
    return Reply(body="".join(f"data: {json.dumps(e)}\n\n" for e in events),
                 headers={"content-type": "text/event-stream"})


GEMINI_PATH = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("call", "reply", "model", "tokens"), [
    ({"provider": "anthropic", "path": "/v1/messages", "body": {"model": SONNET}},
     Reply(body={"type": "message", "id": "msg_9", "model": SONNET, "content": [], "usage": {
         "input_tokens": 11, "output_tokens": 22, "cache_read_input_tokens": 33,
         "cache_creation_input_tokens": 44}}),
     SONNET, TokenCounts(input_tokens=11, output_tokens=22, cache_read_tokens=33,
                         cache_write_tokens=44)),
    ({"provider": "openai", "path": "/chat/completions", "body": {
        "model": "gpt-4o", "stream": True}},
     sse({"id": "c1", "model": "gpt-4o", "choices": [{"delta": {"content": "hi"}}]},
         {"id": "c1", "model": "gpt-4o", "choices": [], "usage": {
             "prompt_tokens": 120, "completion_tokens": 30,
             "prompt_tokens_details": {"cached_tokens": 100}}}),
     "gpt-4o", TokenCounts(input_tokens=20, output_tokens=30, cache_read_tokens=100)),
    ({"provider": "openai", "path": "/responses", "body": {"model": "gpt-5"}},
     Reply(body={"id": "resp_1", "object": "response", "model": "gpt-5", "usage": {
         "input_tokens": 500, "input_tokens_details": {"cached_tokens": 200},
         "output_tokens": 60}}),
     "gpt-5", TokenCounts(input_tokens=300, output_tokens=60, cache_read_tokens=200)),
    # Gemini: each chunk's usage is the total so far; a tool's result read back is
    # input, thoughts are output.
    ({"provider": "gemini", "path": GEMINI_PATH, "body": {}},
     sse({"responseId": "g1", "modelVersion": "gemini-2.5-pro", "candidates": [{}],
          "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1}},
         {"responseId": "g1", "modelVersion": "gemini-2.5-pro",
          "candidates": [{"finishReason": "STOP"}], "usageMetadata": {
              "promptTokenCount": 1000, "cachedContentTokenCount": 400,
              "toolUsePromptTokenCount": 50, "candidatesTokenCount": 70,
              "thoughtsTokenCount": 30}}),
     "gemini-2.5-pro", TokenCounts(input_tokens=650, output_tokens=100,
                                   cache_read_tokens=400)),
    # Without alt=sse, Gemini streams its chunks as one JSON array.
    ({"provider": "gemini", "path": GEMINI_PATH.removesuffix("?alt=sse"), "body": {}},
     Reply(body=[{"responseId": "g2", "modelVersion": "gemini-2.5-pro", "candidates": [{}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1}},
                 {"responseId": "g2", "modelVersion": "gemini-2.5-pro",
                  "candidates": [{"finishReason": "STOP"}],
                  "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 80}}]),
     "gemini-2.5-pro", TokenCounts(input_tokens=900, output_tokens=80)),
], ids=["anthropic-json", "chat-stream", "responses-json", "gemini-stream", "gemini-array"])
def test_each_api_s_usage_is_read_as_it_reports_it(
        tmp_path: Path, call: dict[str, Any], reply: Reply, model: str,
        tokens: TokenCounts) -> None:
    with FakeApi() as api:
        api.script.append(reply)
        code, db = run_agent(tmp_path, [call], {call["provider"]: api.url})
        (seen,) = api.seen
    assert code == 0
    (usage,), done = read(db)
    assert (usage.model, usage.tokens, usage.estimate) == (model, tokens, False)
    assert done.tokens == tokens
    # The runner's key went upstream, in the provider's own header; the token did not.
    header = {"anthropic": "x-api-key", "openai": "authorization",
              "gemini": "x-goog-api-key"}[call["provider"]]
    assert seen.headers[header].endswith(f"sk-runner-{call['provider'][0]}")
    assert "evl-" not in json.dumps(seen.headers)
    if call["provider"] == "openai" and call["path"] == "/chat/completions":
        # A stream reports its usage only when asked: the gateway asks.
        assert seen.body["stream_options"] == {"include_usage": True}
    assert seen.path == "/v1" + call["path"] if call["provider"] == "openai" else call["path"]


def test_a_call_past_the_budget_is_refused_in_the_apis_own_shape(tmp_path: Path) -> None:
    script = [Turn(text="a", usage=Usage(1000, 1000)), Turn(text="never", usage=Usage(1, 1))]
    with FakeAgentApi(script, main_model=SONNET) as api:
        code, db = run_agent(tmp_path, [anthropic(), anthropic(), anthropic()],
                             {"anthropic": api.url}, budget={"max_cost_usd": 0.01},
                             env={"HOLD_ON": "1"})
        served = len(api.served)
    assert code == 1 and served == 1  # the second call never left the gateway
    usages, done = read(db)
    assert done.final_status == FinalStatus.COST_BUDGET_EXCEEDED
    assert done.error_message == "spent $0.0180, budget $0.0100"  # the call that passed it
    spent, refused = usages
    assert spent.cost_usd is not None and spent.cost_usd > 0.01
    assert (refused.tokens, refused.cost_usd, refused.call and refused.call["status"]) == (
        TokenCounts(), 0.0, 400)
    shown = json.loads(evalledger(tmp_path, db, "show", "latest", "--json").stdout)
    assert shown["model_calls"] == {"200": 1, "400": 1}
    said = json.loads((tmp_path / "pid.answer").read_text())
    assert said["status"] == 400
    assert said["error"]["type"] == "error"  # Anthropic's error shape: not retried
    assert said["error"]["error"]["type"] == "invalid_request_error"
    assert "the task's budget is spent" in said["error"]["error"]["message"]


def _printed(db: Path) -> list[dict[str, Any]]:
    """What the client printed of each answer (a JSON line each)."""
    from evalledger.ledger import TaskEmitted

    with Ledger(db, read_only=True) as ledger:
        return [e.data for e in ledger.events(only_run(db)) if isinstance(e, TaskEmitted)]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_api_failure_the_gateway_saw_is_infrastructures_and_retried(
        tmp_path: Path) -> None:
    overloaded = Reply(status=529, body={"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})
    with FakeApi() as api:
        api.script.extend([overloaded, overloaded])
        code, db = run_agent(tmp_path, [anthropic(stream=False)], {"anthropic": api.url},
                             retries=1)
    assert code == 1
    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(only_run(db)))
    completions = [e for e in events if isinstance(e, TaskCompleted)]
    assert [c.failure_class for c in completions] == [FailureClass.INFRA] * 2
    assert all("anthropic answered HTTP 529, as the gateway saw" in (c.error_message or "")
               for c in completions)
    calls = [e.call for e in events if isinstance(e, TaskUsage)]
    assert [c and c["status"] for c in calls] == [529, 529]
    # The summary counts each try, by how it was answered; show says so.
    shown = evalledger(tmp_path, db, "show", "latest", "--json")
    assert json.loads(shown.stdout)["model_calls"] == {"529": 2}
    said = evalledger(tmp_path, db, "show", "latest").stdout
    assert "model calls through the gateway: 2 (2 failed: 529 x2)" in said


class BreakingApi(LoopbackServer):
    """An Anthropic stream that starts (its input side reported), then its connection is
    lost: no further event, no end."""

    def __init__(self) -> None:
        start = {"type": "message_start", "message": {
            "id": "msg_1", "model": SONNET, "usage": {"input_tokens": 40, "output_tokens": 1}}}

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                event = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # lost: no last chunk

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)


def test_an_answer_whose_connection_is_lost_midway_is_a_floor_and_the_apis_failure(
        tmp_path: Path) -> None:
    """What the stream had reported is booked, marked a floor (cut, broken); the call
    counts as failed, and the attempt's failure is infrastructure's."""
    with BreakingApi() as api:
        code, db = run_agent(tmp_path, [anthropic()], {"anthropic": api.url})
    assert code == 1
    (usage,), done = read(db)
    assert usage.estimate and usage.tokens == TokenCounts(input_tokens=40, output_tokens=1)
    assert usage.call is not None and (usage.call["status"], usage.call.get("cut"),
                                       usage.call.get("broken")) == (200, True, True)
    assert not done.cost_complete and done.failure_class == FailureClass.INFRA
    assert "anthropic: broke off mid-answer" in (done.error_message or "")
    shown = json.loads(evalledger(tmp_path, db, "show", "latest", "--json").stdout)
    assert shown["model_calls"] == {"broken": 1}


def test_an_agent_that_only_says_its_api_failed_keeps_its_failure(tmp_path: Path) -> None:
    """It printed Claude Code's 529 result line; the gateway saw its call answered."""
    lie = json.dumps({"type": "result", "subtype": "success", "is_error": True,
                      "api_error_status": 529, "result": "API Error: 529 Overloaded"})
    with FakeAgentApi([Turn(text="a", usage=Usage(5, 5))], main_model=SONNET) as api:
        (tmp_path / "lie.txt").write_text(lie + "\n")
        code, db = run_agent(
            tmp_path, [anthropic()], {"anthropic": api.url}, stream_format="claude-code",
            success_criteria=[{"type": "file_exists", "path": "never.txt"}])
    assert code == 1
    _, done = read(db)
    assert done.failure_class == FailureClass.AGENT


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("silence", ["its-own", "its-api-hung"])
def test_a_stall_is_the_agents_unless_a_model_call_of_it_waited_on_its_api(
        tmp_path: Path, silence: str) -> None:
    """Seen, not said: an agent that goes quiet once its calls were answered (a sleep,
    a hung tool) stalled of its own doing: its failure, in the rates, never retried
    (going silent was a way to leave the pass rate). Quiet while the gateway waits on
    the API for its call: the API's, infrastructure's, as before."""
    hold = threading.Event()
    turns = [Turn(text="a", usage=Usage(10, 10), hold=hold if silence != "its-own" else None)]
    with FakeAgentApi(turns, main_model=SONNET) as api:
        calls = json.dumps([anthropic()])
        command = ["sh", "-c", '"$0" "$1" "$2" && exec sleep 60', sys.executable,
                   str(tmp_path / "client.py"), calls]
        # The silence is counted from the command's start: long enough that the call
        # has reached the API by then, whatever the machine's load.
        code, db = run_agent(tmp_path, [anthropic()], {"anthropic": api.url},
                             stall_timeout=5, retries=1,
                             **({"command": command} if silence == "its-own" else {}))
    with Ledger(db, read_only=True) as ledger:
        completions = [e for e in ledger.events(only_run(db)) if isinstance(e, TaskCompleted)]
    if silence == "its-own":
        assert code == 1
        (done,) = completions  # an agent's failure is not tried again
        assert (done.final_status, done.failure_class) == (FinalStatus.STALLED,
                                                           FailureClass.AGENT)
        assert "no model call of it was waiting on its API, as the gateway saw: its own " \
               "silence" in (done.error_message or "")
        summary = json.loads(evalledger(tmp_path, db, "show", "latest", "--json").stdout)
        assert (summary["tasks_infra"], summary["pass_rate"]) == (0, 0.0)
    else:  # tried again, and answered then
        assert code == 0
        assert [(c.final_status, c.failure_class) for c in completions] == [
            (FinalStatus.STALLED, FailureClass.INFRA), (FinalStatus.SUCCESS, None)]
        assert "its own silence" not in (completions[0].error_message or "")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_read_held_by_the_api_makes_no_silence_the_apis(tmp_path: Path) -> None:
    """A read (a model listing) spends nothing and is never booked: an agent that keeps
    one waiting, or loops them, while it says nothing is silent of its own doing, not
    held up by a hung API."""
    with FakeApi() as api:
        api.script.extend([anthropic_answer("ok"), Reply(body={"data": []}, delay=60)])
        models = {"provider": "anthropic", "path": "/v1/models", "method": "GET", "body": {}}
        code, db = run_agent(tmp_path, [anthropic(stream=False), models],
                             {"anthropic": api.url}, stall_timeout=5, retries=1)
    assert code == 1
    _, done = read(db)  # one attempt: an agent's failure is not tried again
    assert (done.final_status, done.failure_class) == (FinalStatus.STALLED, FailureClass.AGENT)


def _pid_gone(folder: Path) -> bool:
    try:
        os.kill(int((folder / "pid").read_text()), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):  # not written yet
        return False
    return False


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("released", [True, False], ids=["answered-after", "never-answered"])
def test_a_call_cut_by_the_agents_end_is_read_to_its_usage_or_booked_as_a_floor(
        tmp_path: Path, released: bool) -> None:
    """The agent's timeout kills it while its second answer is held upstream. The
    gateway reads on: answered within its drain, the call is booked exact; never, what
    its start reported, as a floor."""
    hold = threading.Event()
    script = [Turn(text="a", usage=Usage(10, 10)), Turn(text="b", usage=Usage(300, 77),
                                                        hold=hold)]
    with FakeAgentApi(script, main_model=SONNET) as api:
        def release() -> None:
            assert api.holding.wait(PATIENCE)
            wait_until(lambda: _pid_gone(tmp_path), "the agent killed")
            hold.set()

        releaser = threading.Thread(target=release, daemon=True)
        if released:
            releaser.start()
        code, db = run_agent(tmp_path, [anthropic(), anthropic()], {"anthropic": api.url},
                             timeout=2)
        if released:
            releaser.join(PATIENCE)
        truth = [counts(s.usage) for s in api.served]
    assert code == 1
    usages, done = read(db)
    assert done.final_status == FinalStatus.TIMEOUT
    first, cut = usages
    assert first.tokens == truth[0] and not first.estimate
    assert cut.call is not None and cut.call.get("cut", False) is not released
    if released:
        assert (cut.tokens, cut.estimate) == (truth[1], False)
        assert done.cost_complete
    else:  # its start: the input side, and the one output token it reports
        assert cut.tokens == TokenCounts(input_tokens=300, output_tokens=1)
        assert cut.estimate and not done.cost_complete


def test_a_token_opens_only_its_attempts_providers_and_only_while_it_runs(
        tmp_path: Path) -> None:
    with FakeApi() as api:
        api.script.append(Reply(body={"ok": True}))
        code, db = run_agent(tmp_path, [{"provider": "openai", "via": "anthropic",
                                         "path": "/v1/responses", "body": {}}],
                             {"openai": api.url},
                             gateway=["anthropic"])
        assert api.seen == []
    assert code == 1
    (said,) = _printed(db)
    assert said["status"] == 404 and "no provider 'openai'" in said["error"]["error"]["message"]
    # A token once its attempt ended: refused.
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.URLError):  # the run's gateway is gone with its run
        urllib.request.urlopen(_seen(tmp_path)["ANTHROPIC_BASE_URL"] + "/v1/messages",
                               data=b"{}", timeout=5)


# Run inside the sandbox by the runner's own interpreter: what the agent can reach.
PROBES = '''
import json, os, socket, sys, urllib.error, urllib.request
def reach(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(address)
        return "connected"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
found = {"host_port": reach(socket.AF_INET, ("127.0.0.1", int(sys.argv[1]))),
         "outside": reach(socket.AF_INET, ("10.255.255.1", 80)),
         "upstream": reach(socket.AF_INET, ("127.0.0.1", int(sys.argv[2])))}
try:
    socket.getaddrinfo("example.com", 443)
    found["dns"] = "resolved"
except OSError as e:
    found["dns"] = type(e).__name__
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    method="POST", data=json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"})
with urllib.request.urlopen(request, timeout=10) as answer:
    found["api"] = answer.status
found["key"] = os.environ["ANTHROPIC_API_KEY"][:4]
print(json.dumps(found))
'''


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.slow)])
def test_with_network_gateway_the_agent_reaches_its_api_and_nothing_else(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Under bwrap (the runner's interpreter bound in) and docker (the test image's
    Python): the same probes from inside."""
    python, confined = confined_python(backend, request)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "probes.py").write_text(PROBES, encoding="utf-8")
    with socket.socket() as host_service, FakeAgentApi(
            [Turn(text="a", usage=Usage(12, 3))], main_model=SONNET) as api:
        host_service.bind(("127.0.0.1", 0))
        host_service.listen()
        port = host_service.getsockname()[1]
        upstream_port = api.url.rsplit(":", 1)[1]
        task = {"command": [python, "-I", "-S", "/work/probes.py", str(port), upstream_port],
                "workdir": str(workdir), "network": "gateway", **confined,
                "gateway": ["anthropic"], "timeout": 60,
                "success_criteria": [{"type": "exit_code"}]}
        (tmp_path / "tasks").mkdir()
        (tmp_path / "tasks" / "probe.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
        db = tmp_path / "l.db"
        done = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), env={
            "ANTHROPIC_API_KEY": "sk-runner-a", "EVALLEDGER_GATEWAY_ANTHROPIC_URL": api.url})
        served = [counts(s.usage) for s in api.served]
    assert done.returncode == 0, done.stdout + done.stderr
    (found,) = _printed(db)
    # Its API, through the gateway; nothing else: no host port (the upstream's own
    # included), no address outside, no name resolved.
    assert found["api"] == 200 and found["key"] == "evl-"
    assert found["host_port"] != "connected" and found["upstream"] != "connected"
    assert found["outside"] != "connected" and found["dns"] != "resolved"
    usages, completed = read(db)
    assert [u.tokens for u in usages] == served and completed.tokens == served[0]
    with Ledger(db, read_only=True) as ledger:
        (isolation,) = [e for e in ledger.events(only_run(db)) if e.type == "task.isolation"]
    assert isolation.network == "gateway" and isolation.probes["network"] == "refused"


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_an_api_the_gateway_cannot_meter_is_refused_not_passed_on(tmp_path: Path) -> None:
    """An agent must not spend past its meter and budget through an API whose usage the
    gateway does not read (embeddings here): refused, recorded, never sent upstream."""
    with FakeApi() as api:
        api.script.append(Reply(body={"data": [], "usage": {"prompt_tokens": 9}}))
        code, db = run_agent(tmp_path, [{"provider": "openai", "path": "/embeddings",
                                         "body": {"model": "text-embedding-3-small"}}],
                             {"openai": api.url})
        assert api.seen == []
    assert code == 1
    (said,) = _printed(db)
    assert said["status"] == 404 and "no API the gateway meters" in said["error"]["error"][
        "message"]
    (usage,), _ = read(db)
    assert usage.call is not None and (usage.call["api"], usage.call["status"]) == (
        "embeddings", 404)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("call", "why"), [
    ({"provider": "openai", "path": "/responses", "body": {
        "model": "gpt-5", "background": True, "input": "hi"}}, "background response"),
    ({"provider": "gemini", "path": "/v1beta/models/gemini-2.5-pro:generateContent?alt=proto",
      "body": {}}, "alt=proto"),
    ({"provider": "gemini", "path": "/v1beta/models/gemini-2.5-pro:generateContent?%24alt=proto",
      "body": {}}, "alt=proto"),
], ids=["responses-background", "gemini-proto", "gemini-dollar-alt"])
def test_a_call_whose_answer_would_hold_no_usage_the_gateway_reads_is_refused(
        tmp_path: Path, call: dict[str, Any], why: str) -> None:
    """A background response answers ``queued`` with ``usage: null`` (its result fetched
    later by a read), Gemini's ``alt=proto`` in protobuf: each was booked as spending
    nothing, and no budget held. Refused before they spend."""
    with FakeApi() as api:
        api.script.append(Reply(body={"id": "resp_1", "status": "queued", "usage": None}))
        code, db = run_agent(tmp_path, [call], {call["provider"]: api.url})
        assert api.seen == []
    assert code == 1
    (said,) = _printed(db)
    assert said["status"] == 400 and why in json.dumps(said["error"])


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_read_goes_upstream_as_a_read(tmp_path: Path) -> None:
    """A read passes unmetered, so nothing in it may make it a post: its body is not
    passed on, nor a header some front ends take a method from."""
    with FakeApi() as api:
        api.script.append(Reply(body={"data": []}))
        code, db = run_agent(tmp_path, [{
            "provider": "gemini", "method": "GET", "headers": {"X-HTTP-Method-Override": "POST"},
            "path": "/v1beta/models/veo-3.0-generate-001:predictLongRunning",
            "body": {"instances": [{"prompt": "a film"}]}}], {"gemini": api.url})
        (seen,) = api.seen
    assert code == 0
    assert (seen.method, seen.body) == ("GET", {})
    assert not {"x-http-method-override", "x-http-method", "x-method-override"} & set(
        seen.headers)
    assert read(db)[0] == []


def test_a_request_is_read_for_its_few_fields_without_making_objects_of_the_rest() -> None:
    """A body of millions of nested arrays was parsed whole on the loop every attempt's
    calls share (a 60 MiB one: 11 s, 1.5 GB), and one nested 200,000 deep raised past
    the reader (a 500). Now its top-level members are read as their text."""
    import msgspec

    from evalledger.executor._gateway import _member, _members, _with_usage_asked

    wide = b'{"messages":[' + b",".join([b"[]"] * 2_000_000) + b'],"model":"m","stream":true}'
    members = _members(wide)
    assert (_member(members, "model"), _member(members, "stream")) == ("m", True)
    assert isinstance(members["messages"], msgspec.Raw)  # its text: no list made
    assert _member(members, "messages") is None  # too long to be read for a field
    deep = b'{"model":"m","x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert _members(deep) == {}
    assert _members(b"[1]") == {} and _members(b"not json") == {}
    asked = _with_usage_asked(_members(b'{"model":"m","stream_options":{"x":1},"n":[1, 2]}'))
    assert asked == b'{"model":"m","stream_options":{"x": 1, "include_usage": true},"n":[1, 2]}'
