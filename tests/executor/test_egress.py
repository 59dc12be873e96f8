"""The egress proxy (executor/_egress.py): under ``network: gateway``, a task's
``allow_domains`` are the hosts besides its model API that its command can reach, each
connection recorded as a ``task.egress``. A real sandbox, a real host service, the
command's own probes from inside."""

from __future__ import annotations

import base64
import os
import socket
import sys
import threading
from pathlib import Path

import pytest
import yaml

from evalledger.executor._egress import allows
from evalledger.ledger import Ledger, TaskEgress
from tests.cli.helpers import evalledger
from tests.fake_agent_api import FakeAgentApi, Turn, Usage
from tests.fake_api import FakeApi, Reply

from .gateway_sandbox import confined_python
from .real_agent_tasks import emitted, only_run

SONNET = "claude-sonnet-4-5"

DOMAINS = ("pypi.org", "*.pythonhosted.org", "localhost:8080")


@pytest.mark.parametrize(("host", "port", "let"), [
    ("pypi.org", 443, True), ("PyPI.org.", 443, True), ("pypi.org", 80, False),
    ("evil-pypi.org", 443, False), ("pypi.org.evil.com", 443, False),
    ("files.pythonhosted.org", 443, True), ("a.b.pythonhosted.org", 443, True),
    ("pythonhosted.org", 443, False), ("evilpythonhosted.org", 443, False),
    ("localhost", 8080, True), ("localhost", 443, False), ("127.0.0.1", 8080, False),
])
def test_a_connection_is_let_through_only_to_a_host_and_port_the_task_names(
        host: str, port: int, let: bool) -> None:
    assert allows(DOMAINS, host, port) is let


# Run inside the sandbox by the runner's own interpreter: what it can reach besides
# its API, through the proxy its environment names, and around it.
PROBES = '''
import base64, json, os, socket, ssl, sys, urllib.error, urllib.parse, urllib.request
allowed, denied, https = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
def connect(target, auth=True):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    head = f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n"
    if auth:
        token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
        head += f"Proxy-Authorization: Basic {token}\\r\\n"
    s.sendall((head + "\\r\\n").encode())
    answer = b""
    while b"\\r\\n\\r\\n" not in answer:
        answer += s.recv(4096)
    return s, int(answer.split(b" ")[1])
found = {}
tunnel, found["allowed"] = connect(f"localhost:{allowed}")
tunnel.sendall(b"ping")
found["echo"] = tunnel.recv(4).decode()
tunnel.close()
# A standard client (urllib, as pip's) through the proxy its environment names (NO_PROXY
# aside: it spares localhost, where this host service is), TLS end to end, the test CA's.
spared = {name: os.environ.pop(name) for name in ("NO_PROXY", "no_proxy")}
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"https": os.environ["HTTPS_PROXY"]}),
    urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile="/work/ca.pem")))
request = urllib.request.Request(f"https://localhost:{https}/simple/", method="POST",
                                 data=b"{}")
with opener.open(request, timeout=10) as answer:
    found["https"] = answer.status
try:  # plain HTTP through the proxy: no CONNECT, refused
    urllib.request.urlopen("http://example.org/", timeout=10)
except urllib.error.HTTPError as e:
    found["plain_http"] = e.code
os.environ.update(spared)
found["other_port"] = connect(f"localhost:{denied}")[1]
found["other_host"] = connect("example.org:443")[1]
found["no_token"] = connect(f"localhost:{allowed}", auth=False)[1]
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", allowed))
    found["direct"] = "connected"
except OSError as e:
    found["direct"] = type(e).__name__
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    method="POST", data=json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"})
with urllib.request.urlopen(request, timeout=10) as answer:  # NO_PROXY: not through it
    found["api"] = answer.status
print(json.dumps(found))
'''


def _echo(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.slow)])
def test_allow_domains_opens_those_hosts_and_records_every_connection(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Through the proxy: the allowed host's port answers (bytes both ways, counted);
    another port of it, another host and a request without the attempt's token are
    refused; the host's port is still unreachable around the proxy."""
    python, confined = confined_python(backend, request)
    import trustme

    ca = trustme.CA()
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "probes.py").write_text(PROBES, encoding="utf-8")
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    with socket.socket() as service, socket.socket() as other, FakeAgentApi(
            [Turn(text="a", usage=Usage(12, 3))], main_model=SONNET) as api, \
            FakeApi().secure(ca) as registry:
        registry.script.append(Reply(body={"projects": []}))
        https = int(registry.url.rsplit(":", 1)[1])
        for listening in (service, other):
            listening.bind(("127.0.0.1", 0))
            listening.listen()
        threading.Thread(target=_echo, args=(service,), daemon=True).start()
        port, other_port = service.getsockname()[1], other.getsockname()[1]
        task = {"command": [python, "-I", "-S", "/work/probes.py", str(port),
                            str(other_port), str(https)],
                "workdir": str(workdir), "network": "gateway", **confined,
                "gateway": ["anthropic"],
                "allow_domains": [f"localhost:{port}", f"localhost:{https}"],
                "timeout": 60, "success_criteria": [{"type": "exit_code"}]}
        (tmp_path / "tasks").mkdir()
        (tmp_path / "tasks" / "probe.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
        db = tmp_path / "l.db"
        done = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), env={
            "ANTHROPIC_API_KEY": "sk-runner-a", "EVALLEDGER_GATEWAY_ANTHROPIC_URL": api.url})
    assert done.returncode == 0, done.stdout + done.stderr
    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(only_run(db)))
    (line,) = emitted(db)
    assert registry.seen and registry.seen[0].path == "/simple/"
    assert line == {"allowed": 200, "echo": "ping", "https": 200, "plain_http": 403,
                    "other_port": 403, "other_host": 403,
                    "no_token": 407, "direct": line["direct"], "api": 200}
    assert line["direct"] != "connected"
    egress = [e for e in events if isinstance(e, TaskEgress)]
    # An allowed tunnel is recorded when it closes, a refusal as it is made: a tunnel's
    # close may be seen after the next probe's refusal, so they are compared as a set.
    [through_tls] = [e for e in egress if e.port == https]
    assert (through_tls.host, through_tls.allowed) == ("localhost", True)
    assert through_tls.sent_bytes > 200 and through_tls.received_bytes > 500  # TLS, both ways
    assert sorted((e.host, e.port, e.allowed, e.reason or "", e.sent_bytes, e.received_bytes)
                  for e in egress if e is not through_tls) == sorted([
        ("localhost", port, True, "", 4, 4),
        ("example.org", 80, False, "not CONNECT: GET", 0, 0),
        ("localhost", other_port, False, "not in allow_domains", 0, 0),
        ("example.org", 443, False, "not in allow_domains", 0, 0)])
    completed = next(e for e in events if e.type == "task.completed")
    assert all(e.seq is not None and completed.seq is not None and e.seq < completed.seq
               for e in egress)


def test_allow_domains_needs_network_gateway(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(yaml.safe_dump(
        {"command": "true", "isolation": "bwrap", "gateway": True,
         "allow_domains": ["pypi.org"]}), encoding="utf-8")
    (tmp_path / "tasks" / "u.yaml").write_text(yaml.safe_dump(
        {"command": "true", "isolation": "bwrap", "gateway": True, "network": "gateway",
         "allow_domains": ["https://pypi.org"]}), encoding="utf-8")
    done = evalledger(tmp_path, tmp_path / "l.db", "run", str(tmp_path / "tasks"))
    said = done.stdout + done.stderr
    assert "allow_domains: only with network: gateway" in said
    assert "'https://pypi.org' is no host name" in said


HOLDER = '''
import base64, os, socket, sys, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
s.sendall(f"CONNECT localhost:{sys.argv[1]} HTTP/1.1\\r\\n"
          f"Proxy-Authorization: Basic {token}\\r\\n\\r\\n".encode())
while b"\\r\\n\\r\\n" not in s.recv(4096):
    pass
s.sendall(b"held")
assert s.recv(4) == b"held"
print("holding", flush=True)
time.sleep(600)  # the tunnel open until the task's timeout ends it
'''


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_connection_open_at_the_attempts_end_is_recorded_before_it(
        tmp_path: Path, bwrap: object) -> None:
    """A command killed by its timeout with a tunnel open: the connection is ended and
    recorded, with what it carried, before the attempt's ``task.completed``."""
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "holder.py").write_text(HOLDER, encoding="utf-8")
    with socket.socket() as service, FakeAgentApi([], main_model=SONNET) as api:
        service.bind(("127.0.0.1", 0))
        service.listen()
        threading.Thread(target=_echo, args=(service,), daemon=True).start()
        port = service.getsockname()[1]
        task = {"command": [python, "-I", "-S", "/work/holder.py", str(port)],
                "workdir": str(workdir), "network": "gateway", "isolation": "bwrap",
                "gateway": ["anthropic"], "allow_domains": [f"localhost:{port}"],
                "timeout": 3}
        (tmp_path / "tasks").mkdir()
        (tmp_path / "tasks" / "hold.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
        db = tmp_path / "l.db"
        done = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), env={
            "ANTHROPIC_API_KEY": "sk-runner-a", "EVALLEDGER_GATEWAY_ANTHROPIC_URL": api.url})
    assert done.returncode == 1, done.stdout + done.stderr
    with Ledger(db, read_only=True) as ledger:
        events = list(ledger.events(only_run(db)))
    (egress,) = [e for e in events if isinstance(e, TaskEgress)]
    (completed,) = [e for e in events if e.type == "task.completed"]
    assert (egress.allowed, egress.sent_bytes, egress.received_bytes) == (True, 4, 4)
    assert egress.seq is not None and completed.seq is not None and egress.seq < completed.seq
    assert completed.final_status == "TIMEOUT"


class _Recorded:
    def __init__(self) -> None:
        self.connections: list[tuple[str, int, bool, str | None]] = []

    async def egress(self, host: str, port: int, allowed: bool, reason: str | None,
                     sent_bytes: int, received_bytes: int, seconds: float) -> None:
        self.connections.append((host, port, allowed, reason))


def test_what_a_command_sends_the_proxy_ends_its_connection_at_worst(tmp_path: Path) -> None:
    """A CONNECT to port ``²`` (latin-1's 0xb2: a digit to isdigit(), not to int()),
    sent with no token, and a host IDNA cannot spell: each crashed the proxy, and with it
    the batch that serves it. Now a refusal each, and the proxy serves on."""
    import trio

    from evalledger.executor._egress import open_egress

    recorded = _Recorded()

    async def ask(path: Path, head: bytes) -> bytes:
        stream = await trio.open_unix_socket(str(path))
        async with stream:
            await stream.send_all(head)
            answer = b""
            while b"\r\n\r\n" not in answer and (piece := await stream.receive_some(4096)):
                answer += piece
            return answer.split(b"\r\n", 1)[0]

    async def main() -> list[bytes]:
        path = tmp_path / "egress.sock"
        with trio.fail_after(30):
            async with open_egress(path) as egress:
                attempt = egress.attempt(("*.pythonhosted.org",), recorded)
                auth = b"Proxy-Authorization: Basic " + base64.b64encode(
                    f"evalledger:{attempt.token}".encode()) + b"\r\n"
                return [
                    await ask(path, b"CONNECT pypi.org:\xb2 HTTP/1.1\r\n\r\n"),
                    await ask(path, b"CONNECT " + b"a" * 64 + b".pythonhosted.org:443 "
                                    b"HTTP/1.1\r\n" + auth + b"\r\n"),
                    await ask(path, b"CONNECT pypi.org:443 HTTP/1.1\r\n" + auth + b"\r\n"),
                ]

    answers = trio.run(main)
    assert answers == [b"HTTP/1.1 407 Proxy Authentication Required",
                       b"HTTP/1.1 502 Bad Gateway", b"HTTP/1.1 403 Forbidden"]
    assert [(allowed, (reason or "").split(":")[0]) for _, _, allowed, reason
            in recorded.connections] == [(True, "cannot connect"),
                                         (False, "not in allow_domains")]
