"""The viewer answers only its own name (``evalledger.viewer._hosts``).

A web page can rebind its own name to 127.0.0.1 and read the viewer as its own origin;
the request then says ``Host: evil.example``. Every route of the app (read from the
Starlette app itself, so a route added later is probed without editing this file),
through a real ``evalledger view`` process and a real socket, refuses such a request
with 421 and one line: no run, no event stream, no static file. The names the viewer
is opened by still work, on loopback and off it (where the token gate stays).
"""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evalledger.cli import cli
from evalledger.viewer import create_app
from evalledger.viewer._hosts import HostRule

from ..waiting import PATIENCE
from .serving import start, stop
from .suites import Suite

TASK = "default/ok/00"


@dataclass
class Reply:
    status: int
    content_type: str
    body: str  # the whole body; an event stream's first line


def get(address: str, port: int, path: str, host: str | None) -> Reply:
    """GET ``path`` from ``address:port`` with this exact ``Host`` header (None: none)."""
    connection = http.client.HTTPConnection(address, port, timeout=PATIENCE)
    try:
        connection.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        kind = response.getheader("content-type", "")
        if response.status == 200 and kind.startswith("text/event-stream"):
            return Reply(response.status, kind, response.readline().decode())
        return Reply(response.status, kind, response.read().decode(errors="replace"))
    finally:
        connection.close()


def paths(suite: Suite) -> list[str]:
    """One URL per route of the app, every static file included."""
    values = {"run_id": suite.first, "run_a": suite.first, "run_b": suite.second,
              "task_key": TASK}
    app: Any = create_app(suite.db)  # never started: only its routes are read
    while not isinstance(app, Starlette):
        app = app.app  # through the middleware
    found = []
    for route in app.routes:
        if isinstance(route, Mount):
            assert isinstance(route.app, StaticFiles), route
            folder = Path(str(route.app.directory))
            found += [f"{route.path}/{file.name}" for file in sorted(folder.iterdir())
                      if file.is_file()]
            continue
        assert isinstance(route, Route), route
        path = route.path
        for name in route.param_convertors:
            assert name in values, f"a route with a new parameter {name!r}: give it a value"
            path = re.sub(r"\{" + name + r"(:\w+)?\}", values[name], path)
        found.append(path)
    assert "/api/stream" in found and "/static/viewer.js" in found  # the prober sees them
    return found


@pytest.fixture(scope="module")
def served(suite: Suite) -> Iterator[int]:
    process, url = start("--ledger", str(suite.db), "view", "--port", "0")
    try:
        yield int(url.rsplit(":", 1)[1].strip("/"))
    finally:
        assert stop(process) == 0


def assert_refused(reply: Reply, host: str | None, suite: Suite) -> None:
    assert reply.status == 421, (host, reply)
    assert reply.content_type.startswith("text/plain")
    [line] = reply.body.splitlines()
    assert line.startswith(f"Host {host!r} does not name this viewer" if host is not None
                           else "a request without a Host")
    for secret in (*suite.runs, TASK, "event:", '"seq"', "function", "{"):
        assert secret not in line


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("bad", [
    "evil.example:{port}",  # DNS rebinding: the attacker's name, the viewer's port
    "evil.example",
    "localhost.evil.example:{port}",
    "127.0.0.1.nip.io:{port}",
    "127.0.0.2:{port}",
    "127.0.0.1:{other}",  # the right name, another port
    "127.0.0.1",  # no port: port 80, which the viewer is not on
    "localhost:{port}@evil.example",
    "",
])
def test_a_foreign_host_gets_no_data_from_any_route(
    suite: Suite, served: int, bad: str
) -> None:
    host = bad.format(port=served, other=served % 65535 + 1)
    for path in paths(suite):
        assert_refused(get("127.0.0.1", served, path, host), host, suite)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_only_the_loopback_names_are_served_on_every_route(suite: Suite, served: int) -> None:
    for path in paths(suite):
        for host in (f"127.0.0.1:{served}", f"localhost:{served}", f"[::1]:{served}",
                     f"LocalHost:{served}"):
            reply = get("127.0.0.1", served, path, host)
            assert reply.status == 200, (host, path, reply)
        assert get("127.0.0.1", served, path, f"evil.example:{served}").status == 421
    stream = get("127.0.0.1", served, "/api/stream", f"localhost:{served}")
    assert stream.body.startswith("event: hello")
    assert suite.first in get("127.0.0.1", served, "/api/runs", f"[::1]:{served}").body


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_a_viewer_on_ipv6_loopback_answers_its_names_only(suite: Suite) -> None:
    process, url = start("--ledger", str(suite.db), "view", "--host", "::1", "--port", "0")
    try:
        assert re.fullmatch(r"http://\[::1\]:\d+/", url), url
        port = int(url.rsplit(":", 1)[1].strip("/"))
        for host in (f"[::1]:{port}", f"localhost:{port}", f"127.0.0.1:{port}"):
            assert get("::1", port, "/api/runs", host).status == 200, host
        assert_refused(get("::1", port, "/api/runs", f"evil.example:{port}"),
                       f"evil.example:{port}", suite)
    finally:
        assert stop(process) == 0


def _lan_address() -> str | None:
    """This machine's address on its network (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.255", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_off_loopback_the_host_rule_and_the_token_both_hold(suite: Suite) -> None:
    process, url = start("--ledger", str(suite.db), "view", "--host", "0.0.0.0",
                          "--port", "0", "--allow-host", "viewer.test",
                          "--allow-host", "tunnel.test:9999")
    try:
        found = re.search(r":(\d+)/\?token=([\w-]+)$", url)
        assert found, url
        port, token = int(found[1]), found[2]
        path = f"/api/runs?token={token}"
        # The token does not open the door to another name.
        for host in (f"evil.example:{port}", f"tunnel.test:{port}", "viewer.test:9999"):
            assert_refused(get("127.0.0.1", port, path, host), host, suite)
        # The names it is reached by: loopback, the printed URL's, the allowed ones.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"0.0.0.0:{port}",
                     f"viewer.test:{port}", f"VIEWER.test:{port}", "tunnel.test:9999"):
            reply = get("127.0.0.1", port, path, host)
            assert reply.status == 200 and suite.first in reply.body, (host, reply)
            assert get("127.0.0.1", port, "/api/runs", host).status == 403  # no token
        lan = _lan_address()
        if lan is not None:  # what someone on the LAN types: the machine's address
            assert get(lan, port, path, f"{lan}:{port}").status == 200
            assert_refused(get(lan, port, path, f"evil.example:{port}"),
                           f"evil.example:{port}", suite)
    finally:
        assert stop(process) == 0


@pytest.mark.parametrize("value", ["a b", "viewer.test:http", "viewer.test:0",
                                   "viewer.test:70000", "[::1", "x/y"])
def test_a_bad_allow_host_is_one_line(suite: Suite, value: str) -> None:
    done = CliRunner().invoke(cli, ["--ledger", str(suite.db), "view", "--port", "0",
                                    "--allow-host", value])
    assert (done.exit_code == 2 and done.exception is None) or isinstance(
        done.exception, SystemExit)
    assert (f"Error: Invalid value for '--allow-host': {value!r} is not a host name"
            in done.output)


LOCAL = ("127.0.0.1", 8765)
LAN = ("192.168.1.5", 8765)


@pytest.mark.parametrize(("listening", "allow", "host", "server", "answers"), [
    ("127.0.0.1", (), "127.0.0.1:8765", LOCAL, True),
    ("127.0.0.1", (), "localhost:8765", LOCAL, True),
    ("127.0.0.1", (), "[::1]:8765", LOCAL, True),
    ("127.0.0.1", (), "evil.example:8765", LOCAL, False),
    ("127.0.0.1", (), "localhost:8766", LOCAL, False),
    ("127.0.0.1", (), "localhost", LOCAL, False),
    # A browser leaves out port 80: a Host without a port means 80.
    ("127.0.0.1", (), "localhost", ("127.0.0.1", 80), True),
    ("127.0.0.1", (), "localhost:80", ("127.0.0.1", 80), True),
    ("127.0.0.1", (), "evil.example", ("127.0.0.1", 80), False),
    # Not a Host: refused, whatever it starts with.
    ("127.0.0.1", (), "localhost:", LOCAL, False),
    ("127.0.0.1", (), "localhost:08765x", LOCAL, False),
    ("127.0.0.1", (), "localhost:8765:8765", LOCAL, False),
    ("127.0.0.1", (), "[::1", LOCAL, False),
    ("127.0.0.1", (), "[::1]8765", LOCAL, False),
    ("127.0.0.1", (), "localhost.:8765", LOCAL, False),
    # Off loopback: the name --host gives, the address the connection came to.
    ("myhost.lan", (), "myhost.lan:8765", LAN, True),
    ("myhost.lan", (), "192.168.1.5:8765", LAN, True),
    ("myhost.lan", (), "localhost:8765", LAN, False),
    ("192.168.1.5", (), "localhost:8765", LAN, False),
    ("0.0.0.0", (), "192.168.1.5:8765", LAN, True),
    ("0.0.0.0", (), "localhost:8765", LOCAL, True),
    ("0.0.0.0", (), "192.168.1.6:8765", LAN, False),
    ("0.0.0.0", (), "mybox:8765", LAN, False),
    ("0.0.0.0", ("mybox",), "mybox:8765", LAN, True),
    ("0.0.0.0", ("mybox:9000",), "mybox:9000", LAN, True),
    ("0.0.0.0", ("mybox:9000",), "mybox:8765", LAN, False),
    ("::", (), "[fd00::2]:8765", ("fd00::2", 8765), True),
    ("::", ("fd00::3",), "[fd00::3]:8765", ("fd00::2", 8765), True),
    # A Unix socket has no port: the name alone decides.
    ("127.0.0.1", (), "localhost:1234", None, True),
    ("127.0.0.1", (), "evil.example:1234", None, False),
])
def test_which_hosts_the_viewer_answers_to(
    listening: str, allow: tuple[str, ...], host: str, server: tuple[str, int] | None,
    answers: bool,
) -> None:
    assert HostRule.listening_on(listening, allow).allows(host, server) is answers
