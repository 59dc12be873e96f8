"""The gateway's HTTP/1.1 on trio: a small server for the agents' side and a small client,
its connections kept alive, for the upstreams' side (docs/gateway.md).

Why its own, not hypercorn and httpx (which it was): measured with ``bench/gateway.py``,
their layers (ASGI messages, hypercorn's tasks and queues, httpcore, anyio) cost about
0.4 ms per 64 KB of a stream passed through and 1.6 ms per call: a stream went through
the gateway at a quarter of a socket's speed. With h11 reading the bodies too, each of
a stream's chunks still cost an h11 event and a send (half a socket's speed).

So h11 reads and writes the heads (and a request's body: not the hot path), and an
answer's body passes through as it came: one receive into the connection's buffer (up
to ``RECEIVE``: whatever came meanwhile), one linear pass to find where the body ends
and its own bytes between the upstream's chunk lines (``_Chunked``), the caller's one
search of those for usage, and one send of the same bytes. The agent gets the body
framed as the upstream framed it (its length, or its chunks); a body the upstream ended
by closing (HTTP/1.0) is chunked for it, and an HTTP/1.0 agent gets the body's bytes
until the close.

Around that: one request at a time per connection (no pipelining), a request's body
read whole (at most ``MAX_REQUEST``), ``Expect: 100-continue`` answered; an agent gone
is said as ``False``, not raised; a slow agent slows the upstream's reading (nothing
is buffered past a piece); upstream connections reused while kept alive, TLS verified
(SNI: the URL's host; a CA bundle), each wait bounded (``Timeouts``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import select
import socket as _socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Literal, TypeVar
from urllib.parse import urlsplit

import h11
import trio

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The most of a request's body the gateway reads (it holds it to send it upstream).
MAX_REQUEST = 64 * 1024 * 1024
# The most it holds of all requests' bodies at once, read or being read: past it a
# request is answered 503 (a client retries that), and the gateway's memory stays
# bounded however many connections an agent opens.
MAX_HELD = 256 * 1024 * 1024
# Seconds a request's body may take to arrive, from its head (a client that sends a
# byte now and then holds a connection and its bytes no longer).
BODY_SECONDS = 120.0
# The most read from an upstream at once, into its connection's buffer (reused: a
# fresh megabyte each receive cost more in page faults than the rest of the relay): a
# stream's bytes pass on in pieces this large when they come faster than they are
# passed on (one receive and one send each).
RECEIVE = 1024 * 1024
# The most read at once from an agent (a request: each receive allocates this much).
SMALL_RECEIVE = 64 * 1024
# An agent's connection idle this long between requests is closed.
KEEP_ALIVE = 900.0
# An upstream connection idle this long is not reused (httpx's default: a server may
# have closed it meanwhile).
UPSTREAM_KEEP_ALIVE = 5.0
# Seconds the requests under way get to end once the server stops.
GRACE = 5.0
# The longest line of a chunked body read (a chunk's size, a trailer): h11's bound on
# a head.
MAX_LINE = 16 * 1024

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")

# How an answer's body is framed: none (HEAD, 204, 304), its length, chunked, or
# ended by the connection's close.
Framing = Literal["none", "length", "chunked", "close"]


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off or garbled its answer."""


class UpstreamTimeout(UpstreamError):
    """The upstream took longer than a ``Timeouts`` bound to connect, take the request
    or send the next bytes of its answer."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds each wait on an upstream may take (those the gateway gave httpx)."""

    connect: float = 30.0  # TCP and TLS
    write: float = 60.0  # each send of the request
    read: float = 900.0  # each wait for more of the answer


# -- bodies as they pass ----------------------------------------------------------------


@dataclass
class Piece:
    """What one receive brought of an answer's body: ``raw[:size]``, its bytes as they
    came (the upstream's framing in them), and ``spans``, where the body's own bytes
    lie in them. ``raw`` may be the connection's buffer, which the next receive
    overwrites: a piece kept longer is a ``copy``."""

    raw: bytes | bytearray
    size: int
    spans: list[tuple[int, int]]

    def view(self) -> memoryview:
        return memoryview(self.raw)[:self.size]

    def data(self) -> bytes:
        """The body's own bytes in it."""
        return b"".join(memoryview(self.raw)[start:end] for start, end in self.spans)

    def copy(self) -> Piece:
        return Piece(bytes(self.view()), self.size, self.spans)


class _Length:
    """A body of a known length (``math.inf``: until the connection closes)."""

    def __init__(self, length: float) -> None:
        self.left = length

    @property
    def done(self) -> bool:
        return self.left == 0

    def take(self, raw: bytes | bytearray, size: int) -> tuple[int, list[tuple[int, int]]]:
        """How many of the ``size`` bytes that came in ``raw`` are the body's (the rest
        follows its end), and where its own bytes lie in them."""
        taken = int(min(size, self.left))
        self.left -= taken
        return taken, [(0, taken)]

    def closed(self) -> None:
        """The connection closed: the end of a body that runs until then."""
        if self.left != math.inf:
            raise UpstreamError(f"upstream closed with {self.left} bytes of its answer "
                                "to come")
        self.left = 0


class _Chunked:
    """A chunked body, its chunks' bytes found as it passes, however the receives cut
    it: a size line, the chunk's bytes and an empty line, again; after the last (size
    0), trailer lines to an empty one."""

    def __init__(self) -> None:
        self.done = False
        self._line = bytearray()  # the part of a line that came so far
        self._left = 0  # bytes of the current chunk still to come
        # What the next line is: a chunk's size, the end of a chunk's bytes, a trailer.
        self._expect: Literal["size", "end", "trailer"] = "size"

    def take(self, raw: bytes | bytearray, size: int) -> tuple[int, list[tuple[int, int]]]:
        """As ``_Length.take``: the chunks' bytes found between their lines."""
        view, at = memoryview(raw), 0
        spans: list[tuple[int, int]] = []
        while at < size and not self.done:
            if self._left:  # a chunk's bytes
                end = min(size, at + self._left)
                spans.append((at, end))
                self._left -= end - at
                at = end
                continue
            newline = raw.find(b"\n", at, size)
            if newline < 0:  # the line goes on in the next receive
                self._line += view[at:size]
                if len(self._line) > MAX_LINE:
                    raise UpstreamError("upstream sent a chunked body's line too long")
                return size, spans
            self._line += view[at:newline]
            at = newline + 1
            self._read_line(bytes(self._line).rstrip(b"\r"))
            self._line.clear()
        return at, spans

    def closed(self) -> None:
        raise UpstreamError("upstream closed in the middle of its chunked answer")

    def _read_line(self, line: bytes) -> None:
        if self._expect == "trailer":
            self.done = not line
        elif self._expect == "end":
            if line:
                raise UpstreamError("upstream sent a chunk longer than its size")
            self._expect = "size"
        else:
            size = line.split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size):
                raise UpstreamError(f"upstream sent a bad chunk size: {size[:20]!r}")
            self._left = int(size, 16)
            self._expect = "end" if self._left else "trailer"


# -- the agents' side -------------------------------------------------------------------


@dataclass
class Request:
    """One request, its body read whole (``None``: larger than ``MAX_REQUEST``)."""

    method: str
    target: str  # the path and query as sent
    headers: list[tuple[bytes, bytes]]  # names in lower case
    body: bytes | None
    http_11: bool  # HTTP/1.1 (chunked answers), not 1.0
    keep_alive: bool  # the agent did not ask to close after it


class Reply:
    """The answer to a request, written as it comes: ``start`` (status, headers), each
    ``send`` a piece of its body, ``end``. Once the agent is gone each says ``False``
    and writes nothing.

    Its body goes as the upstream framed it (the same bytes: its length, or its chunks);
    a body that the upstream ended by closing is chunked here, or, to an HTTP/1.0
    agent, sent until this connection's close."""

    def __init__(self, stream: trio.abc.Stream, request: Request) -> None:
        self._stream = stream
        self._request = request
        # How pieces are written: as they came, their bytes chunked, their bytes as they
        # are (to the close), nothing.
        self._mode: Literal["raw", "chunked", "close", "none"] = "none"
        self.keep_alive = request.keep_alive
        self.started = False
        self.ended = False
        self.gone = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]],
                    framing: Framing, reason: bytes = b"") -> bool:
        """The answer's head; ``framing``: its body's, as the upstream sent it."""
        self.started = True
        head = list(headers)
        if framing == "none" or self._request.method == "HEAD":
            self._mode = "none"
        elif framing == "length" or (framing == "chunked" and self._request.http_11):
            self._mode = "raw"
        else:
            self._mode = "chunked" if self._request.http_11 else "close"
        if framing in ("chunked", "close") and self._mode in ("raw", "chunked"):
            head.append((b"transfer-encoding", b"chunked"))
        if self._mode == "close":
            self.keep_alive = False
        if not self.keep_alive:
            head.append((b"connection", b"close"))
        phrase = reason or _phrase(status)
        return await self._write(b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, phrase, b"".join(
            b"%s: %s\r\n" % (name, value) for name, value in head)))

    async def send(self, piece: Piece) -> bool:
        if self._mode == "raw":
            return await self._write(piece.view())
        data = piece.data()
        if self._mode == "chunked" and data:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        return await self._write(data if self._mode != "none" else b"")

    async def end(self, piece: Piece | None = None) -> bool:
        if piece is not None and not await self.send(piece):
            return False
        self.ended = await self._write(b"0\r\n\r\n" if self._mode == "chunked" else b"")
        return self.ended

    async def answer(self, status: int, body: bytes, content_type: bytes) -> bool:
        """A whole answer of the gateway's own."""
        return await self.start(status, [(b"content-type", content_type),
                                         (b"content-length", b"%d" % len(body))],
                                "length") and await self.end(Piece(body, len(body),
                                                                   [(0, len(body))]))

    async def _write(self, data: bytes | memoryview) -> bool:
        if self.gone:
            return False
        try:
            if data:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
        return not self.gone


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


Handler = Callable[[Request, Reply], Awaitable[None]]


class Server:
    """Serves ``handler`` on listeners until ``stop``: then it takes no new connection
    or request, closes idle connections, and lets those under way end (the caller
    bounds that)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._accepting = trio.CancelScope()
        # Invariant: the scope of each connection waiting for its next request.
        self._idle: set[trio.CancelScope] = set()
        self._stopping = False
        # Invariant: the bytes of request bodies read or being read, not yet answered.
        self._held = 0

    async def serve(self, listeners: list[trio.SocketListener],
                    task_status: trio.TaskStatus[list[trio.SocketListener]]
                    = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as connections:
            with self._accepting:
                await trio.serve_listeners(self._connection, listeners,
                                           handler_nursery=connections,
                                           task_status=task_status)

    def stop(self) -> None:
        self._stopping = True
        self._accepting.cancel()
        for idle in self._idle:
            idle.cancel()

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            with connection_ends("gateway"):
                await self._exchanges(stream)

    async def _exchanges(self, stream: trio.SocketStream) -> None:
        """Each request on the connection in turn, while it is kept alive."""
        unread = b""  # what came after the last request (a client's next, pipelined)
        while not self._stopping:
            # h11 reads the request; the answer is written here, as it passes.
            parser = h11.Connection(h11.SERVER)
            if unread:  # (h11 reads b"" as the connection's close)
                parser.receive_data(unread)
            held = [0]  # what this request's body holds of ``_held``
            try:
                try:
                    request = await self._request(parser, stream, held)
                except h11.RemoteProtocolError as e:  # a garbled request: said, then closed
                    await _refuse(stream, e.error_status_hint)
                    return
                if request is None:
                    return
                if request.body is _BUSY:
                    await _refuse(stream, 503)
                    return
                reply = Reply(stream, request)
                try:
                    await self._handler(request, reply)
                except Exception:
                    if not reply.started:
                        await _refuse(stream, 500)
                    raise
            finally:
                self._held -= held[0]
            # Kept alive only after a whole exchange (a body refused unread, an answer
            # broken off or ended by the close, end it).
            if not (reply.ended and reply.keep_alive and parser.their_state is h11.DONE):
                return
            unread, closed = parser.trailing_data
            if closed:
                return

    async def _request(self, parser: h11.Connection, stream: trio.SocketStream,
                       held: list[int]) -> Request | None:
        """The next request on the connection, or None: it closed, stayed idle
        ``KEEP_ALIVE`` seconds, the server stopped while it waited, or its body took
        longer than ``BODY_SECONDS``. Its body is ``_BUSY`` when the gateway holds
        ``MAX_HELD`` already; what it holds is counted in ``held``."""
        with trio.move_on_after(KEEP_ALIVE) as idle:
            self._idle.add(idle)
            try:
                head = await _next_event(parser, stream)
            finally:
                self._idle.discard(idle)
        if not isinstance(head, h11.Request):
            return None
        body = bytearray()
        with trio.move_on_after(BODY_SECONDS):
            while True:
                if parser.they_are_waiting_for_100_continue:
                    await stream.send_all(parser.send(h11.InformationalResponse(
                        status_code=100, headers=[])) or b"")
                event: object = None  # (stalled KEEP_ALIVE seconds)
                with trio.move_on_after(KEEP_ALIVE):
                    event = await _next_event(parser, stream)
                if isinstance(event, h11.Data):
                    if self._held + len(event.data) > MAX_HELD:
                        return _request(head, _BUSY)
                    body += event.data
                    held[0] += len(event.data)
                    self._held += len(event.data)
                    if len(body) > MAX_REQUEST:
                        return _request(head, None)
                elif isinstance(event, h11.EndOfMessage):
                    return _request(head, bytes(body))
                else:  # the agent went away mid-request, or stalled: no call
                    return None
        return None  # its body came too slowly: no call


# A request's body when the gateway already holds ``MAX_HELD`` (answered 503).
_BUSY = b"(busy)"


@contextlib.contextmanager
def connection_ends(server: str) -> Iterator[None]:
    """Around what one connection to ``server`` does: its peer gone ends it quietly; any
    other failure (a bug, or what a peer sent that nothing foresaw) is logged and ends
    this connection only, never the server, nor the batch whose nursery serves it."""
    try:
        yield
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the peer went away
    except Exception:
        log.exception("%s: a connection failed", server)


def _request(head: h11.Request, body: bytes | None) -> Request:
    closing = any(name == b"connection" and b"close" in value.lower()
                  for name, value in head.headers)
    http_11 = head.http_version == b"1.1"
    return Request(head.method.decode("ascii").upper(), head.target.decode("ascii"),
                   list(head.headers), body, http_11, http_11 and not closing)


async def _next_event(parser: h11.Connection, stream: trio.abc.ReceiveStream) -> object:
    """h11's next event, receiving as it needs."""
    while (event := parser.next_event()) is h11.NEED_DATA:
        parser.receive_data(bytes(await stream.receive_some(SMALL_RECEIVE)))
    return event


async def _refuse(stream: trio.abc.Stream, status: int) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.send_all(b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close"
                              b"\r\n\r\n" % (status, _phrase(status)))


async def listen(host: str, socket_path: str | None) -> list[trio.SocketListener]:
    """A listener on a free port of ``host``, and one on a unix socket at
    ``socket_path`` (a stale socket file there replaced)."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    if socket_path is not None:
        import os
        import stat

        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.stat(socket_path).st_mode):
                os.remove(socket_path)
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(socket_path)
        sock.listen(128)
        listeners.append(trio.SocketListener(sock))
    return listeners


# -- the upstreams' side ----------------------------------------------------------------


class _TLS:
    """TLS over a connected socket: the standard library's non-blocking ``SSLSocket``,
    waited on with trio. Not ``trio.SSLStream``: it decrypts one record (16 KiB at
    most) a receive, each through its state machine in Python, and a stream through it
    ran at a quarter of a client's straight to the same HTTPS upstream
    (``bench/gateway.py``); here one receive takes every record that came, in C."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.socket = sock

    @classmethod
    async def over(cls, tcp: trio.SocketStream, context: ssl.SSLContext, host: str) -> _TLS:
        """``tcp``'s socket taken over (its stream is left with none), the handshake
        made and the upstream's certificate verified for ``host``."""
        raw = _socket.socket(fileno=tcp.socket.detach())
        raw.setblocking(False)
        try:
            tls = cls(context.wrap_socket(raw, server_hostname=host,
                                          do_handshake_on_connect=False))
        except BaseException:
            raw.close()
            raise
        try:
            await tls._retried(tls.socket.do_handshake)
        except BaseException:
            tls.close()
            raise
        return tls

    async def send_all(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint()  # as trio's streams: a cancel point, if all fits
        view = memoryview(data)
        while view:
            view = view[await self._retried(self.socket.send, view):]

    async def receive_into(self, buffer: bytearray) -> int:
        """Into ``buffer``, every byte decrypted so far (at least one: waits for it; 0:
        the upstream closed)."""
        await trio.lowlevel.checkpoint()
        view, got = memoryview(buffer), 0
        while got < len(view):
            try:
                size = self.socket.recv_into(view[got:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as wants:
                if got:
                    break
                await _wait_for(self.socket, wants)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break  # closed (without TLS's goodbye too: HTTP's framing says if cut)
            if not size:
                break
            got += size
        return got

    def close(self) -> None:
        trio.lowlevel.notify_closing(self.socket)
        self.socket.close()

    async def _retried(self, call: Callable[..., _T], *args: object) -> _T:
        """``call`` until TLS has what it needs of the socket (waited for)."""
        while True:
            try:
                return call(*args)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as wants:
                await _wait_for(self.socket, wants)


async def _wait_for(sock: ssl.SSLSocket, wants: ssl.SSLError) -> None:
    if isinstance(wants, ssl.SSLWantReadError):
        await trio.lowlevel.wait_readable(sock)
    else:
        await trio.lowlevel.wait_writable(sock)


@dataclass
class _Connection:
    """One connection to an upstream, one exchange at a time."""

    stream: trio.SocketStream | _TLS
    timeouts: Timeouts
    idle_since: float = math.inf
    # What it receives into (``RECEIVE`` bytes, once it is needed).
    _buffer: bytearray = field(default_factory=bytearray)

    async def send(self, data: bytes) -> None:
        with _broken(), trio.move_on_after(self.timeouts.write) as waited:
            await self.stream.send_all(data)
        if waited.cancelled_caught:
            raise UpstreamTimeout("upstream took too long to take the request")

    async def receive(self) -> tuple[bytes | bytearray, int]:
        """The next bytes that came, and how many (0: it closed): the start of the
        connection's buffer, overwritten by the next receive."""
        with _broken(), trio.move_on_after(self.timeouts.read) as waited:
            if not self._buffer:
                self._buffer = bytearray(RECEIVE)
            if isinstance(self.stream, _TLS):
                return self._buffer, await self.stream.receive_into(self._buffer)
            return self._buffer, await self.stream.socket.recv_into(self._buffer)
        assert waited.cancelled_caught
        raise UpstreamTimeout("upstream took too long to answer")

    def close(self) -> None:
        """Closed at once (a TLS connection without its goodbye: HTTP needs none)."""
        if isinstance(self.stream, _TLS):
            self.stream.close()
        else:
            self.stream.socket.close()

    def stale(self, now: float) -> bool:
        """Idle too long, or readable while idle: the upstream closed it (or sent what
        no request asked for)."""
        if now - self.idle_since > UPSTREAM_KEEP_ALIVE:
            return True
        poll = select.poll()
        poll.register(self.stream.socket.fileno(), select.POLLIN)
        return bool(poll.poll(0))


class Answer:
    """An upstream's answer: its status and headers, then its body, a ``Piece`` each
    ``read``."""

    def __init__(self, head: h11.Response, framing: Framing, first: bytes,
                 connection: _Connection) -> None:
        self.status = head.status_code
        self.reason = bytes(head.reason)
        self.headers = list(head.headers)
        self.framing = framing
        self._body = (_Length(0) if framing == "none" else _Chunked() if framing == "chunked"
                      else _Length(_content_length(head) if framing == "length" else math.inf))
        self._unread = first  # what came with the head
        self._connection = connection
        # Whether the connection may carry the next exchange: once this answer ended.
        self._reusable = framing != "close" and head.http_version == b"1.1" and not any(
            name == b"connection" and b"close" in value.lower() for name, value in head.headers)

    def header(self, name: bytes) -> str | None:
        return next((v.decode("latin-1") for k, v in self.headers if k == name), None)

    async def read(self) -> Piece | None:
        """The next piece of the body as it came, or None: it ended."""
        while not self._body.done:
            raw: bytes | bytearray
            if self._unread:
                raw, size, self._unread = self._unread, len(self._unread), b""
            else:
                raw, size = await self._connection.receive()
            if not size:
                self._body.closed()
                self._reusable = False
                return None
            taken, spans = self._body.take(raw, size)
            if taken < size:  # more than its answer: the connection is not to be trusted
                self._reusable = False
            if taken:
                return Piece(raw, taken, spans)
        return None

    @property
    def reusable(self) -> bool:
        return self._body.done and self._reusable


def _framing(method: str, head: h11.Response) -> Framing:
    """How an answer's body is framed (RFC 9112 6.3; h11 checked its headers)."""
    if method == "HEAD" or head.status_code in (204, 304):
        return "none"
    if any(name == b"transfer-encoding" for name, _ in head.headers):
        return "chunked"
    if any(name == b"content-length" for name, _ in head.headers):
        return "length"
    return "close"


def _content_length(head: h11.Response) -> int:
    return next(int(value) for name, value in head.headers if name == b"content-length")


class Upstreams:
    """The gateway's connections to its upstreams: HTTP/1.1, reused while kept alive
    (per scheme, host and port), TLS verified with ``tls`` (SNI: the URL's host)."""

    def __init__(self, tls: ssl.SSLContext, timeouts: Timeouts = Timeouts()) -> None:
        self.tls = tls
        self.timeouts = timeouts
        # Invariant: only connections whose last answer ended whole, most recent last.
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    @contextlib.asynccontextmanager
    async def request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                      body: bytes) -> AsyncIterator[Answer]:
        """Send a request; its answer once its head came. Raises ``UpstreamError``
        (``UpstreamTimeout``)."""
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        if scheme not in _DEFAULT_PORTS or not host:
            raise UpstreamError(f"not an http or https URL: {url}")
        origin = (scheme, host, parts.port or _DEFAULT_PORTS[scheme])
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        netloc = f"[{host}]" if ":" in host else host  # an IPv6 address in brackets
        if parts.port not in (None, _DEFAULT_PORTS.get(scheme)):
            netloc += f":{parts.port}"
        head = [(b"host", netloc.encode("ascii")), *headers]
        if body or method not in ("GET", "HEAD", "OPTIONS"):
            head.append((b"content-length", b"%d" % len(body)))
        connection = self._reused(origin) or await self._open(origin)
        answer: Answer | None = None
        try:
            answer = await self._exchange(connection, method, target, head, body)
            yield answer
        finally:
            if answer is not None and answer.reusable:
                connection.idle_since = trio.current_time()
                self._idle.setdefault(origin, []).append(connection)
            else:
                connection.close()

    async def _exchange(self, connection: _Connection, method: str, target: str,
                        head: list[tuple[bytes, bytes]], body: bytes) -> Answer:
        """h11 writes the request's head and reads its answer's; the bodies pass
        as they are."""
        parser = h11.Connection(h11.CLIENT)
        with _broken():
            message = parser.send(h11.Request(method=method, target=target,
                                              headers=head)) or b""
            if body:
                parser.send_with_data_passthrough(h11.Data(data=body))
            parser.send(h11.EndOfMessage())
        try:  # one write for a small request (its head and body in one segment)
            await connection.send(message + body if len(body) < RECEIVE else message)
            if len(body) >= RECEIVE:
                await connection.send(body)
        except UpstreamTimeout:
            raise
        except UpstreamError:
            pass  # an upstream may refuse a request before it was all sent, and say why
        while True:
            with _broken():
                event = parser.next_event()
            if event is h11.NEED_DATA:
                raw, size = await connection.receive()
                parser.receive_data(bytes(memoryview(raw)[:size]))
            elif isinstance(event, h11.Response):
                first, _ = parser.trailing_data
                return Answer(event, _framing(method, event), first, connection)
            elif not isinstance(event, h11.InformationalResponse):  # closed: no answer
                raise UpstreamError("upstream closed the connection before answering")

    def close(self) -> None:
        """Close the idle connections."""
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()

    def _reused(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin, [])
        now = trio.current_time()
        while idle:
            connection = idle.pop()
            if not connection.stale(now):
                return connection
            connection.close()
        return None

    async def _open(self, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        with _broken(), trio.move_on_after(self.timeouts.connect):
            tcp = await trio.open_tcp_stream(host, port)
            if scheme != "https":
                return _Connection(tcp, self.timeouts)
            return _Connection(await _TLS.over(tcp, self.tls, host), self.timeouts)
        raise UpstreamTimeout(f"connecting to {host}:{port} took too long")


@contextlib.contextmanager
def _broken() -> Iterator[None]:
    """A connection's failures (refused, reset, TLS, a garbled answer) as
    ``UpstreamError``."""
    try:
        yield
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
            h11.ProtocolError) as e:
        raise UpstreamError(f"{type(e).__name__}: {e}") from e


def tls_context(ca: str | None) -> ssl.SSLContext:
    """What upstreams' certificates are verified against: ``ca`` (a bundle's path), else
    certifi's bundle (as httpx's, which the gateway used before); HTTP/1.1 only."""
    import certifi

    context = ssl.create_default_context(cafile=ca or certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context
