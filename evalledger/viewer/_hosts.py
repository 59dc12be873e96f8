"""Which names the viewer answers to: the ``Host`` check that keeps other web pages out.

A listening port on loopback is not private to this machine's user: a page on
``evil.example`` can make its own name resolve to 127.0.0.1 (DNS rebinding), and the
browser then treats the viewer as that page's own origin and lets its script read
every run. What gives it away is the ``Host`` header, which still says
``evil.example``. So the viewer answers only a request whose Host names it:

- ``127.0.0.1``, ``localhost`` and ``[::1]`` when it listens on loopback or on every
  address (``0.0.0.0``, ``::``);
- the ``--host`` it listens on, as given (an address, IPv6 in brackets, or a name);
- the address the connection arrived on (the ASGI scope's ``server``): the IP someone
  on the LAN types for a viewer listening on ``0.0.0.0``;
- each ``--allow-host NAME`` (a name under which the machine is reached).

The port must be the one the connection arrived on (also from ``server``, so
``--port 0`` needs nothing passed after binding); a Host without a port means 80,
HTTP's default, which a browser leaves out. ``--allow-host NAME:PORT`` accepts a name
with another port (an SSH tunnel or a proxy that forwards from another port). Any
other request gets 421 Misdirected Request, one line of plain text and nothing else:
event streams and static files included. Off loopback the access token is still
required: the two checks answer different attacks.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# A host name or IPv4 address (letters, digits, dots, dashes, underscores), or an IPv6
# address in brackets; then maybe a port. One C call per request.
_HOST = re.compile(r"(\[[0-9a-f:.%]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?")
_HTTP_PORT = 80


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether listening on ``host`` means listening on every address."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def as_named(host: str) -> str:
    """A host as a ``Host`` header names it: lower case, an IPv6 address in brackets."""
    host = host.lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def split_host(value: str) -> tuple[str, int | None] | None:
    """``NAME``, ``NAME:PORT``, ``[IPV6]`` or ``[IPV6]:PORT`` as (name in lower case,
    port); None if it is none of those."""
    found = _HOST.fullmatch(value.lower())
    if found is None:
        return None
    name, port = found.groups()
    if port is None:
        return name, None
    number = int(port)
    return (name, number) if 0 < number <= 65535 else None


def allowed_name(value: str) -> tuple[str, int | None]:
    """An ``--allow-host`` value as (name, port or None: the port listened on).

    Raises:
        ValueError: not a host name or address, with an optional port.
    """
    parsed = split_host(as_named(value) if value.count(":") > 1 else value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a host name, or a host name and a port "
                         "(myhost.lan, myhost.lan:8080, [fe80::1])")
    return parsed


@dataclass(frozen=True)
class HostRule:
    """The names a viewer listening on one host answers to (see the module's story)."""

    # Invariant: every name is as ``as_named`` spells it.
    names: frozenset[str]
    # Names accepted with one given port, whatever port the connection arrived on.
    pinned: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def listening_on(cls, host: str, allow: Iterable[str] = ()) -> HostRule:
        """The rule for a viewer listening on ``host``, reached also as ``allow``.

        Raises:
            ValueError: an ``allow`` entry that is not a host name (``allowed_name``).
        """
        names = {as_named(host)}
        if is_loopback(host) or is_wildcard(host):
            names.update(LOOPBACK_NAMES)
        pinned = set()
        for entry in allow:
            name, port = allowed_name(entry)
            if port is None:
                names.add(name)
            else:
                pinned.add((name, port))
        return cls(frozenset(names), frozenset(pinned))

    def allows(self, host: str, server: tuple[str, int] | None) -> bool:
        """Whether a request with this ``Host`` value, arriving at ``server`` (the
        address and port of this end of the connection), is for this viewer."""
        parsed = split_host(host)
        if parsed is None:
            return False
        name, port = parsed
        if port is None:
            port = _HTTP_PORT
        if (name, port) in self.pinned:
            return True
        if server is None:  # not a TCP socket (a Unix one): there is no port to compare
            return name in self.names
        listening, arrived_on = server
        if port != arrived_on:
            return False
        return name in self.names or name == as_named(listening)

    def expected(self, server: tuple[str, int] | None) -> str:
        """The names this viewer answers to, as a person would type them."""
        port = f":{server[1]}" if server is not None and server[1] != _HTTP_PORT else ""
        shown = sorted(self.names | ({as_named(server[0])} if server else set()))
        return ", ".join([f"{name}{port}" for name in shown]
                         + [f"{name}:{p}" for name, p in sorted(self.pinned)])


class HostGate:
    """Answers 421 to any HTTP request whose ``Host`` does not name this viewer.

    Pure ASGI, in front of the app, so a refused request never reaches a route: a
    streaming response (the event stream) or a static file is refused like a page.
    The cost on an accepted request is one scan of the headers, one regular expression
    and a set lookup (a few microseconds). Only HTTP is checked: the app has no
    WebSocket route (a route added for one would need the same check).
    """

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
        server = scope.get("server")
        if host is not None and self.rule.allows(host, server):
            await self.app(scope, receive, send)
            return
        given = (f"Host {host[:100]!r}" if host is not None
                 else "a request with more than one Host" if hosts
                 else "a request without a Host")
        reason = (f"{given} does not name this viewer (it answers to "
                  f"{self.rule.expected(server)}): open the URL `evalledger view` printed, "
                  "or start it with --allow-host NAME\n").encode()
        await send({"type": "http.response.start", "status": 421,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(reason)).encode())]})
        await send({"type": "http.response.body", "body": reason})
