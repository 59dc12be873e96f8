"""The egress proxy: under ``network: gateway``, a task's ``allow_domains`` are the only
hosts besides its model APIs that its command can reach (docs/gateway.md, "Other hosts").

An HTTP proxy that speaks ``CONNECT`` only, as HTTPS clients use one (pip, npm, git,
curl: ``HTTPS_PROXY``): the sandbox's forwarder passes each connection to this proxy's
unix socket; a ``CONNECT host:port`` whose host and port the attempt's ``allow_domains``
name is connected and passed through byte for byte (TLS end to end: the proxy sees no
content), any other is answered 403. Each attempt has a token of its own, its proxy
URL's password, so each connection is the attempt's: it is recorded as a
``task.egress`` (denied ones as they are refused, the others when they close, with the
bytes each way), and the attempt's close ends the connections it left open.

A request without the token is answered 407 and not recorded: nothing in the sandbox
but the attempt's command can send one, and it holds its token.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import trio

from ._gateway_http import connection_ends

# The port the sandbox's forwarder listens on for the proxy (the sandbox's loopback is
# its own: no host's port is taken). The gateway's port, if it is this one, moves it.
PORT = 3128
# The most of a request's head read, and for how long: a client that sends none is cut.
HEAD_LIMIT = 16 * 1024
HEAD_SECONDS = 10.0
CONNECT_SECONDS = 30.0
_CHUNK = 65536


class Recorder(Protocol):
    """Where an attempt's connections are recorded (the runner's ``_Streams``)."""

    async def egress(self, host: str, port: int, allowed: bool, reason: str | None,
                     sent_bytes: int, received_bytes: int, seconds: float) -> None:
        """A connection was denied, or let through and closed."""


def allows(domains: tuple[str, ...], host: str, port: int) -> bool:
    """Whether an ``allow_domains`` list lets a connection to ``host:port`` through.

    An entry is a host (``pypi.org``: that host, port 443), ``*.`` and a domain (any
    host under it, not the domain itself) and either with ``:PORT`` (that port
    instead of 443). Hosts compare without case and without a final dot."""
    host = host.lower().rstrip(".")
    for entry in domains:
        name, _, given = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if port != (int(given) if given else 443):
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]):
                return True
        elif host == name:
            return True
    return False


def _has_port(entry: str) -> bool:
    head, colon, tail = entry.rpartition(":")
    return (bool(colon) and tail.isascii() and tail.isdigit()
            and not head.endswith(":"))  # not an IPv6 one


@dataclass
class EgressAttempt:
    """One attempt's token at the proxy, its ``allow_domains`` and its connections."""

    token: str
    domains: tuple[str, ...]
    recorder: Recorder
    scopes: set[trio.CancelScope] = field(default_factory=set)
    idle: trio.Event = field(default_factory=trio.Event)
    open: int = 0
    closed: bool = False

    def env(self, port: int) -> dict[str, str]:
        """The command's proxy variables, in both spellings clients read; the gateway's
        own address (the model APIs' base URLs) not through the proxy."""
        url = f"http://evalledger:{self.token}@127.0.0.1:{port}"
        env = {name: url for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                                      "http_proxy", "ALL_PROXY", "all_proxy")}
        env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        return env


class Egress:
    """The batch's egress proxy: ``open_egress`` starts it on a unix socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._attempts: dict[str, EgressAttempt] = {}

    def attempt(self, domains: tuple[str, ...], recorder: Recorder) -> EgressAttempt:
        opened = EgressAttempt("evl-" + secrets.token_urlsafe(24), domains, recorder)
        opened.idle.set()
        self._attempts[opened.token] = opened
        return opened

    async def close(self, attempt: EgressAttempt) -> None:
        """The attempt is over: its token no longer opens anything, and the connections
        it left open are ended (each recorded before this returns)."""
        attempt.closed = True
        self._attempts.pop(attempt.token, None)
        for scope in attempt.scopes:
            scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await attempt.idle.wait()

    async def serve(self, stream: trio.abc.Stream) -> None:
        """One connection from a sandbox: a request head, then a tunnel or a refusal.
        Whatever it sends ends this connection at worst: never the proxy, nor the batch
        whose nursery serves it."""
        async with stream:
            with connection_ends("egress proxy"):
                await self._serve(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        head, rest = await _read_head(stream)
        if head is None:
            return
        request = _parse(head)
        attempt = self._attempts.get(request.token or "")
        if attempt is None or attempt.closed:
            await _answer(stream, 407, "a token of an attempt is needed",
                          b'Proxy-Authenticate: Basic realm="evalledger"\r\n')
            return
        await self._for(attempt, request, stream, rest)

    async def _for(self, attempt: EgressAttempt, request: _Request,
                   stream: trio.abc.Stream, rest: bytes) -> None:
        if request.method != "CONNECT" or request.port is None:
            reason = (f"not CONNECT: {request.method}" if request.method != "CONNECT"
                      else "bad request")
            await _answer(stream, 403 if request.method != "CONNECT" else 400, reason)
            await attempt.recorder.egress(request.host, request.port or 0, False, reason,
                                          0, 0, 0.0)
            return
        if not allows(attempt.domains, request.host, request.port):
            reason = "not in allow_domains"
            await _answer(stream, 403, f"{request.host}:{request.port} is {reason}")
            await attempt.recorder.egress(request.host, request.port, False, reason, 0, 0,
                                          0.0)
            return
        attempt.open += 1
        attempt.idle = trio.Event()
        try:
            await _tunnel(attempt, request, stream, rest)
        finally:
            attempt.open -= 1
            if attempt.open == 0:
                attempt.idle.set()


@dataclass
class _Request:
    method: str
    host: str
    port: int | None
    token: str | None


def _parse(head: bytes) -> _Request:
    """A request head's method, ``CONNECT`` target and the token of its
    ``Proxy-Authorization`` (Basic: the token is the password)."""
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    target = rest.partition(" ")[0]
    host, port = _target(target) if method == "CONNECT" else _origin(target)
    token = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "proxy-authorization":
            scheme, _, credentials = value.strip().partition(" ")
            if scheme.lower() == "basic":
                with contextlib.suppress(ValueError):
                    token = base64.b64decode(credentials, validate=True).decode(
                        "utf-8").partition(":")[2]
    return _Request(method[:20] or "?", host, port, token)


def _target(target: str) -> tuple[str, int | None]:
    """``host:port`` (``[::1]:443``) of a CONNECT, the host lower case."""
    host, colon, port = target.rpartition(":")
    # isdigit() alone takes "²" (latin-1's 0xb2), which int() does not.
    if not colon or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return target[:200] or "?", None
    return host.strip("[]").lower()[:200] or "?", int(port)


def _origin(target: str) -> tuple[str, int | None]:
    """The host and port a plain-HTTP proxy request (``GET http://host/path``) names."""
    with contextlib.suppress(ValueError):
        url = urlsplit(target)
        if url.hostname:
            return url.hostname[:200], url.port or (443 if url.scheme == "https" else 80)
    return target[:200] or "?", None


async def _read_head(stream: trio.abc.Stream) -> tuple[bytes | None, bytes]:
    """The request's head and what came after it (a client may send its TLS hello at
    once), or None: it sent none within ``HEAD_SECONDS`` or ``HEAD_LIMIT``."""
    data = b""
    with trio.move_on_after(HEAD_SECONDS):
        while b"\r\n\r\n" not in data and len(data) < HEAD_LIMIT:
            chunk = await stream.receive_some(_CHUNK)
            if not chunk:
                return None, b""
            data += chunk
        head, found, rest = data.partition(b"\r\n\r\n")
        if found:
            return head, rest
    return None, b""


async def _answer(stream: trio.abc.Stream, status: int, reason: str,
                  headers: bytes = b"") -> None:
    body = f"evalledger egress proxy: {reason}\n".encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
              502: "Bad Gateway"}[status]
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(
            b"HTTP/1.1 %d %s\r\n%scontent-type: text/plain\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, phrase.encode(), headers, len(body),
                                              body))


async def _tunnel(attempt: EgressAttempt, request: _Request, client: trio.abc.Stream,
                  rest: bytes) -> None:
    """Connect to the host and pass bytes both ways until either side ends (or the
    attempt closes); recorded then, shielded: the count is the attempt's."""
    assert request.port is not None
    began = trio.current_time()
    carried = [0, 0]  # sent by the command, received from the host
    reason: str | None = None
    with trio.CancelScope() as scope:
        attempt.scopes.add(scope)
        try:
            try:
                with trio.fail_after(CONNECT_SECONDS):
                    remote = await trio.open_tcp_stream(request.host, request.port)
            except (OSError, trio.TooSlowError, UnicodeError) as e:
                # UnicodeError: a host IDNA cannot spell (a label over 63 characters).
                reason = f"cannot connect: {type(e).__name__}: {e}"[:300]
                await _answer(client, 502, reason)
            else:
                async with remote:
                    await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    if rest:
                        await remote.send_all(rest)
                        carried[0] += len(rest)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_pump, client, remote, carried, 0, nursery)
                        nursery.start_soon(_pump, remote, client, carried, 1, nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            attempt.scopes.discard(scope)
            with trio.CancelScope(shield=True):
                await attempt.recorder.egress(
                    request.host, request.port, True, reason, carried[0], carried[1],
                    round(trio.current_time() - began, 6))


async def _pump(source: trio.abc.Stream, sink: trio.abc.Stream, carried: list[int],
                way: int, nursery: trio.Nursery) -> None:
    """One way of a tunnel; its end (either side closing) ends the other way too."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while chunk := await source.receive_some(_CHUNK):
            await sink.send_all(chunk)
            carried[way] += len(chunk)
    nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def open_egress(socket_path: Path) -> AsyncIterator[Egress]:
    """The batch's egress proxy, listening on ``socket_path`` until the block ends."""
    egress = Egress(socket_path)
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(str(socket_path))
    sock.listen(64)
    listener = trio.SocketListener(sock)
    shielded = trio.CancelScope(shield=True)

    async def serving(task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
        # Shielded from the batch's cancellation (Ctrl-C): each attempt's close ends its
        # connections, and they are recorded; the block's end stops the rest.
        with shielded:
            await trio.serve_listeners(egress.serve, [listener], task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(serving)
        try:
            yield egress
        finally:
            shielded.cancel()
            with contextlib.suppress(OSError):
                socket_path.unlink()
