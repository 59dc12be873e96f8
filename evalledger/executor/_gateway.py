"""The model gateway: a batch's local HTTP server that an attempt's agent calls its model
API through, so that what the attempt spent is what the API answered, not what the agent
printed (docs/gateway.md).

A task with ``gateway:`` gets, per attempt, a token of its own in its base URLs
(``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/TOKEN/anthropic``, ``OPENAI_BASE_URL``,
``GOOGLE_GEMINI_BASE_URL``) and as its API keys; the runner's own keys never reach it.
Each request on a token is sent upstream with the runner's key, its answer passed back
as it arrives (server-sent events included), and read on the way for the usage the API
reported (``_gateway_api``). Each call is recorded as a ``task.usage`` whose ``call``
says what it was (provider, API, status, latency, streamed, cut, request id), priced
from the rate card; the attempt's totals and budgets count these, never its stdout.

An agent killed mid-answer (a timeout, Ctrl-C, a budget) leaves its call to finish: the
gateway reads the rest of the answer (without passing it on) for its final usage, until
the attempt is closed and then ``DRAIN`` seconds more; a call still unfinished then is
recorded with what it had reported, as a floor (``estimate``).

A call that would start once the task's budget (or the run's) is spent is refused with
the API's own error shape (HTTP 400: a client does not retry it), and ends the attempt
as its budget does: spend passes a budget by at most the calls already under way.

Runs on the batch's trio loop: its HTTP/1.1, both sides, is ``_gateway_http``'s (trio
and h11; imported when a batch has a task with ``gateway``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, unquote

import msgspec
import trio

from evalledger.ledger import TaskUsage, utc_now

from ._gateway_api import (
    PROVIDERS,
    Provider,
    Reading,
    allowed,
    api_of,
    gemini_model,
    is_read,
    reads_usage,
    unreadable,
)
from ._gateway_http import (
    GRACE,
    Answer,
    Piece,
    Reply,
    Request,
    Server,
    UpstreamError,
    Upstreams,
    UpstreamTimeout,
    listen,
    tls_context,
)
from ._usage import Usage

log = logging.getLogger(__name__)

# Seconds a call an attempt left unfinished may still take to report its usage, once
# the attempt is closed.
DRAIN = 10.0
# Hop-by-hop headers: each connection's own, never passed on. (An answer's length is:
# its body is passed on byte for byte.)
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te",
                  "trailer", "upgrade"})
_HOP_BYTES = frozenset(name.encode() for name in _HOP)
# Headers some front ends read as the request's method: a read that one of them made a
# post would spend unmetered.
_METHOD_OVERRIDES = frozenset({"x-http-method-override", "x-http-method",
                               "x-method-override"})
# Statuses an API answers when it, not the request, failed (said so in ``call.status``).
API_FAILURES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# How a run points the gateway elsewhere than the real APIs, per provider, and at a CA
# bundle to trust for them (a local TLS upstream, a corporate proxy).
UPSTREAM_VARIABLE = "EVALLEDGER_GATEWAY_{}_URL"
CA_VARIABLE = "EVALLEDGER_GATEWAY_CA"
# Seconds instead of ``DRAIN`` (a test's short wait, a slow API's long one).
DRAIN_VARIABLE = "EVALLEDGER_GATEWAY_DRAIN"
# What a path sent upstream keeps unescaped (RFC 3986's path characters).
_PATH_SAFE = "/:@!$&'()*+,;="


@dataclass
class Call:
    """One request as the gateway passed it on, and what it learnt of it."""

    provider: str
    api: str
    path: str
    streamed: bool
    started: float
    status: int | str | None = None
    latency_seconds: float | None = None
    cut: bool = False
    # The upstream's answer broke off (its connection lost) after it began: what it had
    # reported is a floor, and the API failed.
    broken: bool = False
    reading: Reading | None = None
    model: str | None = None
    # Its usage, once counted (``Metered.count``): when its final usage came.
    counted: Usage | None = None

    def api_seen(self) -> int | str | None:
        """What the attempt is told of the API (``Metered.api_seen``): how it failed (its
        status, ``timeout``, ``unreachable``, ``broke off mid-answer``), ``""``: it
        answered; None: neither (a refusal, a client's error)."""
        if self.broken:
            return "broke off mid-answer"
        if isinstance(self.status, str) or self.status in API_FAILURES:
            return self.status or "unreachable"
        return "" if self.status is not None and self.status < 400 else None

    def facts(self, seconds: float) -> dict[str, object]:
        """What ``task.usage.call`` records of it."""
        facts: dict[str, object] = {
            "via": "gateway", "provider": self.provider, "api": self.api, "path": self.path,
            "status": self.status, "streamed": self.streamed, "seconds": round(seconds, 6)}
        if self.latency_seconds is not None:
            facts["latency_seconds"] = round(self.latency_seconds, 6)
        if self.cut:
            facts["cut"] = True
        if self.broken:
            facts["broken"] = True
        if self.reading is not None and self.reading.request_id:
            facts["request_id"] = self.reading.request_id
        return dict(sorted(facts.items()))  # canonical: as every payload's keys are


class Metered(Protocol):
    """What an attempt's side of the gateway reports to (the runner's ``_Streams``)."""

    def count(self, usage: Usage) -> None:
        """A call's usage is known: counted now, before its answer's end reaches the
        agent (its next call is held to the budget with it)."""

    async def record(self, usage: Usage, call: dict[str, object]) -> None:
        """A call ended: record it (counted already)."""

    def refusal(self) -> str | None:
        """Why a new call may not start (a budget is spent), or None."""

    def refused(self, reason: str) -> None:
        """A call was refused for ``reason``."""

    def api_seen(self, status: int | str, provider: str) -> None:
        """A call's answer: a failure of the API (its status, ``timeout``,
        ``unreachable``), or ``""``: it answered."""


@dataclass
class GatewayAttempt:
    """One attempt's token, the providers it may call, and its calls under way."""

    token: str
    providers: frozenset[str]
    meter: Metered
    rates: Callable[[str | None, Any], float | None]
    in_flight: int = 0
    # Of its metered calls under way, how many wait on their model API: sent upstream,
    # the answer's head or its next bytes not come yet. A stall meanwhile is the API's.
    on_api: int = 0
    # The calls under way: each one's cancel scope, given the drain's deadline at close.
    scopes: set[trio.CancelScope] = field(default_factory=set)
    closing: trio.Event = field(default_factory=trio.Event)
    idle: trio.Event = field(default_factory=trio.Event)
    drain_by: float = math.inf

    @contextlib.contextmanager
    def waiting_on_api(self, metered: bool) -> Iterator[None]:
        """Counted in ``on_api`` while the block waits, if the call is ``metered``: a
        free call or a read is never booked (no sign of life), so an agent looping them
        while silent must not look like an API that hangs."""
        self.on_api += metered
        try:
            yield
        finally:
            self.on_api -= metered

    def env(self, base_url: str) -> dict[str, str]:
        """The agent's variables: each provider's base URL (the gateway's, with the
        token) and the token as its key."""
        env: dict[str, str] = {}
        for name in sorted(self.providers):
            provider = PROVIDERS[name]
            url = f"{base_url}/{self.token}/{name}{provider.base_url_suffix}"
            env.update(dict.fromkeys(provider.base_url_variables, url))
            env.update(dict.fromkeys(provider.agent_key_variables, self.token))
        return env


class Gateway:
    """The batch's gateway: ``open_gateway`` starts it; ``attempt`` gives an attempt a
    token, ``close`` waits out its calls."""

    def __init__(self, client: Upstreams, upstreams: Mapping[str, str],
                 keys: Mapping[str, str], drain: float = DRAIN) -> None:
        self.client = client
        self.drain = drain
        self.upstreams = dict(upstreams)
        self.keys = dict(keys)
        self.base_url = ""
        self.socket_path: Path | None = None
        self._attempts: dict[str, GatewayAttempt] = {}

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    def attempt(self, providers: frozenset[str], meter: Metered,
                rates: Callable[[str | None, Any], float | None]) -> GatewayAttempt:
        token = "evl-" + secrets.token_urlsafe(24)
        opened = GatewayAttempt(token, providers, meter, rates)
        opened.idle.set()
        self._attempts[token] = opened
        return opened

    async def close(self, attempt: GatewayAttempt, *, now: bool = False) -> None:
        """The attempt is over: no new call on its token; its calls under way get
        ``drain`` seconds (none when ``now``) to report their usage, then are cut (each
        recorded)."""
        attempt.drain_by = trio.current_time() + (0.0 if now else self.drain)
        attempt.closing.set()
        for scope in attempt.scopes:
            scope.deadline = attempt.drain_by
        with trio.move_on_at(attempt.drain_by + 1.0):  # each call stops itself at drain_by
            await attempt.idle.wait()
        self._attempts.pop(attempt.token, None)

    # -- serving -------------------------------------------------------------------

    async def handle(self, request: Request, reply: Reply) -> None:
        """One request of an agent: refused (an unknown or expired token, a provider its
        task did not name), or called upstream on its attempt's behalf."""
        target, _, query = request.target.partition("?")
        _, token, name, *rest = [*unquote(target).split("/", 3), ""][:4]
        attempt = self._attempts.get(token)
        provider = PROVIDERS.get(name)
        if attempt is None or attempt.closing.is_set():
            await _answer(reply, 401, {"error": {"message": "evalledger gateway: unknown or "
                                                 "expired token"}})
            return
        if provider is None or name not in attempt.providers:
            await _answer(reply, 404, {"error": {"message": f"evalledger gateway: no "
                                                 f"provider {name!r} for this task (gateway: "
                                                 f"{sorted(attempt.providers)})"}})
            return
        attempt.in_flight += 1
        attempt.idle = trio.Event()
        try:
            await self._call(attempt, provider, "/" + rest[0], query, request, reply)
        finally:
            attempt.in_flight -= 1
            if attempt.in_flight == 0:
                attempt.idle.set()

    async def _call(self, attempt: GatewayAttempt, provider: Provider, path: str,
                    query: str, request: Request, reply: Reply) -> None:
        body = request.body
        if body is None:
            await _answer(reply, 413, provider.error(413, "request too large"))
            return
        asked = _members(body)
        api = api_of(provider.name, path)
        streamed = (_member(asked, "stream") is True or "alt=sse" in query
                    or path.endswith(":streamGenerateContent"))
        call = Call(provider.name, api, path, streamed, trio.current_time())
        call.model = model = (named if isinstance(named := _member(asked, "model"), str)
                              else gemini_model(path))
        if (refusal := _refusal(attempt, provider, api, request.method, asked,
                                query)) is not None:
            call.status, reason = refusal
            await _answer(reply, call.status, provider.error(call.status,
                                                             f"evalledger gateway: {reason}"))
            await self._book(attempt, call)
            return
        if provider.name == "openai" and api == "chat" and streamed:
            body = _with_usage_asked(asked) or body
        if is_read(request.method):
            body = b""
        call.reading = Reading(provider.name, api, model)
        # The path as the agent meant it, its reserved characters escaped again.
        upstream = self.upstreams[provider.name].rstrip("/") + quote(path, safe=_PATH_SAFE)
        query = _query(query, provider.key_params)
        headers = _forwarded(request.headers, provider)
        key = self.keys.get(provider.name)
        if key:
            headers.update(provider.auth(key))
        try:
            await self._relay(attempt, call, request.method,
                              upstream + ("?" + query if query else ""), headers, body, reply)
        except UpstreamTimeout:
            call.status = "timeout"
            await _answer_quietly(reply, 504, provider.error(504, "upstream timed out"))
        except UpstreamError as e:
            log.debug("gateway: %s unreachable", upstream, exc_info=True)
            if call.latency_seconds is not None:  # it answered, then broke off mid-answer
                call.broken = call.cut = True
            else:
                call.status = "unreachable"
            await _answer_quietly(reply, 502, provider.error(
                502, f"evalledger gateway: cannot reach {provider.name}: {e}"))
        if (seen := call.api_seen()) is not None:
            attempt.meter.api_seen(seen, provider.name)
        with trio.CancelScope(shield=True):
            await self._book(attempt, call)

    async def _relay(self, attempt: GatewayAttempt, call: Call, method: str, url: str,
                     headers: dict[str, str], body: bytes, reply: Reply) -> None:
        """Send the request upstream and its answer back as it comes; once the agent is
        gone, read the rest for its usage until the attempt's drain time."""
        assert call.reading is not None
        reading = call.reading
        metered = reads_usage(call.provider, call.api) and not is_read(method)
        with trio.CancelScope() as limit:
            attempt.scopes.add(limit)  # its deadline: the attempt's drain, once it closes
            if attempt.closing.is_set():
                limit.deadline = attempt.drain_by
            try:
                async with contextlib.AsyncExitStack() as stack:
                    with attempt.waiting_on_api(metered):
                        answer = await stack.enter_async_context(self.client.request(
                            method, url, [(k.encode("latin-1"), v.encode("latin-1"))
                                          for k, v in headers.items()], body))
                    call.status = answer.status
                    call.latency_seconds = trio.current_time() - call.started
                    reading.request_id = (answer.header(b"request-id")
                                          or answer.header(b"x-request-id"))
                    reading.sse = call.streamed = (answer.header(b"content-type") or ""
                                                   ).startswith("text/event-stream")
                    # Once the agent is gone (killed mid-answer), read on for the usage.
                    passing = await reply.start(answer.status, _passed_back(answer.headers),
                                                answer.framing, answer.reason)
                    answered = answer.status < 400
                    # A JSON answer's last piece waits for its usage to be counted; a
                    # stream's usage comes in an event before its end (counted as read).
                    held: Piece | None = None
                    while (piece := await _read(attempt, answer, metered)) is not None:
                        if answered:
                            for start, end in piece.spans:
                                reading.feed(piece.raw, start, end)
                            self._count_once(attempt, call)
                        passed: Piece | None = piece
                        if not reading.sse:  # (held past the next receive: a copy)
                            passed, held = held, piece.copy()
                        if passed is not None and passing:
                            passing = await reply.send(passed)
                    if answered:
                        reading.finish()
                        self._count_once(attempt, call)
                    if passing:
                        await reply.end(held)
            finally:
                attempt.scopes.discard(limit)
        if limit.cancelled_caught:
            call.cut = True

    def _usage(self, attempt: GatewayAttempt, call: Call) -> Usage:
        """What the call's answer reported (a floor when it was cut before its final
        usage), priced."""
        from evalledger.ledger import NO_TOKENS

        reading = call.reading
        model = reading.model if reading is not None and reading.model else call.model
        tokens = reading.tokens if reading is not None else NO_TOKENS
        floor = (reads_usage(call.provider, call.api) and reading is not None
                 and not reading.complete and call.status == 200)
        return Usage(model, tokens, attempt.rates(model, tokens), estimate=floor)

    def _count_once(self, attempt: GatewayAttempt, call: Call) -> None:
        if call.counted is None and call.reading is not None and call.reading.complete \
                and reads_usage(call.provider, call.api):
            call.counted = self._usage(attempt, call)
            attempt.meter.count(call.counted)

    async def _book(self, attempt: GatewayAttempt, call: Call) -> None:
        """Record the call: what its answer reported, or, from an API that reports no
        usage (``count_tokens``, a model listing), only a failure."""
        if not reads_usage(call.provider, call.api) and isinstance(call.status, int) \
                and call.status < 400:
            return
        usage = call.counted
        if usage is None:
            usage = self._usage(attempt, call)
            attempt.meter.count(usage)
        call.cut = call.cut or usage.estimate
        await attempt.meter.record(usage, call.facts(trio.current_time() - call.started))


async def _read(attempt: GatewayAttempt, answer: Answer, metered: bool) -> Piece | None:
    with attempt.waiting_on_api(metered):
        return await answer.read()


def _refusal(attempt: GatewayAttempt, provider: Provider, api: str, method: str,
             asked: dict[str, msgspec.Raw], query: str) -> tuple[int, str] | None:
    """Why a call may not be sent upstream, with the status it is answered: an API the
    gateway cannot meter (404), an answer it could read no usage in, or a budget spent
    (400: no client retries it)."""
    if not allowed(provider.name, api, method):
        return 404, f"{api!r} is no API the gateway meters"
    if not is_read(method) and (reason := unreadable(
            provider.name, api, background=_member(asked, "background"),
            # Google's system parameters are read as $alt too.
            alts=[v for k, v in parse_qsl(query, keep_blank_values=True)
                  if k in ("alt", "$alt")])):
        return 400, reason
    if reads_usage(provider.name, api) and (reason := attempt.meter.refusal()):
        attempt.meter.refused(reason)
        return 400, reason
    return None


def usage_event(usage: Usage, call: dict[str, object], run_id: str,
                task_key: str) -> TaskUsage:
    """A gateway call as the ``task.usage`` that records it."""
    event = usage.event(run_id, task_key, utc_now())
    return event.model_copy(update={"call": call})


@contextlib.asynccontextmanager
async def open_gateway(env: Mapping[str, str],
                       socket_path: Path | None = None) -> AsyncIterator[Gateway]:
    """The batch's gateway, listening on a loopback port (and on ``socket_path``, a unix
    socket that sandboxes of ``network: gateway`` reach it through) until the block
    ends. ``env``: the runner's environment (the keys, and ``EVALLEDGER_GATEWAY_*``)."""
    upstreams = {name: env.get(UPSTREAM_VARIABLE.format(name.upper())) or p.upstream
                 for name, p in PROVIDERS.items()}
    keys = {name: next((env[v] for v in p.key_variables if env.get(v)), "")
            for name, p in PROVIDERS.items()}
    client = Upstreams(tls_context(env.get(CA_VARIABLE)))
    gateway = Gateway(client, upstreams, keys, _seconds(env.get(DRAIN_VARIABLE), DRAIN))
    server = Server(gateway.handle)
    listeners = await listen("127.0.0.1", str(socket_path) if socket_path else None)
    port = listeners[0].socket.getsockname()[1]
    shielded = trio.CancelScope(shield=True)

    async def serving(task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
        # Shielded from the batch's cancellation (Ctrl-C): the calls under way are read
        # on for their usage while the attempts close; stopped by ``server.stop``.
        with shielded:
            await server.serve(listeners, task_status=task_status)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serving)
            gateway.base_url = f"http://127.0.0.1:{port}"
            gateway.socket_path = socket_path
            try:
                yield gateway
            finally:
                server.stop()
                shielded.deadline = trio.current_time() + GRACE + 1.0
    finally:
        client.close()


def _seconds(value: str | None, default: float) -> float:
    try:
        seconds = float(value) if value else default
    except ValueError:
        return default
    return seconds if 0 <= seconds < math.inf else default


def gateway_keys_removed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any provider's key: what an agent behind the gateway must not get."""
    keys = {v for p in PROVIDERS.values() for v in (*p.key_variables, *p.agent_key_variables)}
    return {k: v for k, v in env.items() if k not in keys}


_decode_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
# A member of a request read for what the gateway needs of it (``model``, ``stream``)
# is at most this long; a longer one is not read into objects.
_MEMBER_LIMIT = 4096


def _members(body: bytes) -> dict[str, msgspec.Raw]:
    """A request body's top-level members, each as its JSON text; {} when it is not a
    JSON object. Nothing below the top level is made into objects (a body of millions
    of nested arrays is one scan, not millions of lists, on the loop every attempt's
    calls share), and no depth of nesting raises."""
    if not body:
        return {}
    try:
        return _decode_members(body)
    except (msgspec.DecodeError, RecursionError):
        return {}


def _member(members: dict[str, msgspec.Raw], name: str) -> Any:
    """A member's value (None: absent, too long to read, or not JSON)."""
    raw = members.get(name)
    if raw is None or len(raw) > _MEMBER_LIMIT:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _with_usage_asked(members: dict[str, msgspec.Raw]) -> bytes | None:
    """A streamed Chat Completions request asking for the usage chunk (without it the
    stream reports none), when it did not ask itself: its other members as they came."""
    options = _member(members, "stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    asked = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return msgspec.json.encode({**members, "stream_options": msgspec.Raw(json.dumps(
        asked).encode())})


def _forwarded(headers: list[tuple[bytes, bytes]], provider: Provider) -> dict[str, str]:
    """The request's headers as sent upstream: without its key, its host, hop-by-hop
    headers, an encoding the gateway could not read usage through, or an ``expect``
    (the gateway has the whole body already)."""
    dropped = {*_HOP, "host", "content-length", "accept-encoding", "expect",
               *_METHOD_OVERRIDES, *provider.key_headers}
    kept = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
    return {k: v for k, v in kept.items() if k not in dropped} | {
        "accept-encoding": "identity"}


def _query(query: str, key_params: tuple[str, ...]) -> str:
    from urllib.parse import parse_qsl, urlencode

    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in key_params]
    return urlencode(pairs)


def _passed_back(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An answer's headers as the agent gets them: without hop-by-hop ones (its body's
    framing is the agent's connection's: its length kept, else chunked)."""
    chunked = any(k == b"transfer-encoding" for k, _ in headers)
    return [(k, v) for k, v in headers
            if k not in _HOP_BYTES and not (chunked and k == b"content-length")]


async def _answer(reply: Reply, status: int, data: dict[str, Any]) -> None:
    await reply.answer(status, json.dumps(data).encode(), b"application/json")


async def _answer_quietly(reply: Reply, status: int, data: dict[str, Any]) -> None:
    """An error answer, unless the answer had started (the agent's connection is then
    closed mid-answer: its client sees it broken off)."""
    if not reply.started:
        await _answer(reply, status, data)
