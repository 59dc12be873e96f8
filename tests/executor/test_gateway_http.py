"""The gateway's own HTTP/1.1 (executor/_gateway_http.py) as an agent and an upstream
see it: a scripted upstream that writes exactly the bytes it is given (its framing,
cut where the script cuts it, closed where it closes), an agent of raw sockets
(HTTP/1.0, ``Expect: 100-continue``, a chunked body, a disconnect mid-answer), and
between them the gateway as a batch opens it (``open_gateway``)."""

from __future__ import annotations

import datetime
import itertools
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from evalledger.executor import _gateway_http
from evalledger.executor._gateway import open_gateway
from evalledger.executor._gateway_http import Timeouts, _Chunked
from evalledger.executor._usage import Usage
from tests.waiting import PATIENCE

SONNET = "claude-sonnet-4-5"
CLOSE = "close"  # a script's step: the upstream closes the connection


# -- a chunked body, however it is cut -----------------------------------------------


def chunked(pieces: list[bytes], extension: bytes, trailers: bytes) -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces if p) + \
        b"0\r\n" + trailers + b"\r\n"


@given(pieces=st.lists(st.binary(max_size=300), max_size=8),
       cuts=st.lists(st.integers(0, 3000), max_size=12),
       extension=st.sampled_from([b"", b";name=value"]),
       trailers=st.sampled_from([b"", b"x-trailer: 1\r\n"]))
def test_a_chunked_body_reads_the_same_however_it_is_cut(
        pieces: list[bytes], cuts: list[int], extension: bytes, trailers: bytes) -> None:
    body = chunked(pieces, extension, trailers)
    after = b"HTTP/1.1 200 OK\r\n"  # whatever follows the body is not the body's
    wire = body + after
    reader, data, taken = _Chunked(), bytearray(), 0
    at = 0
    for cut in [*sorted(min(c, len(wire)) for c in cuts), len(wire)]:
        if cut > at and not reader.done:
            received = wire[at:cut]
            used, spans = reader.take(received, len(received))
            data += b"".join(received[start:end] for start, end in spans)
            taken += used
        at = max(at, cut)
    assert reader.done and bytes(data) == b"".join(pieces) and taken == len(body)


# -- an upstream that writes what it is told -------------------------------------------


@dataclass
class Upstream:
    """A loopback HTTP upstream answering each request with its script's next answer:
    raw bytes written as the script cuts them (a float: a pause of that many seconds;
    ``CLOSE``: the connection closed there). It records each request's head and body,
    the connections it took and the name each TLS client asked for (SNI)."""

    script: list[list[bytes | float | str]]
    tls: ssl.SSLContext | None = None
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    connections: int = 0
    names: list[str | None] = field(default_factory=list)
    url: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        scheme = "https://localhost" if self.tls else "http://127.0.0.1"
        self.url = f"{scheme}:{self._listener.getsockname()[1]}"
        if self.tls is not None:
            self.tls.sni_callback = lambda sock, name, context: self.names.append(name)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(sock,), daemon=True).start()

    def _answer(self, sock: socket.socket) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            buffered = b""
            while self.script:
                while b"\r\n\r\n" not in buffered:
                    if not (more := sock.recv(65536)):
                        return
                    buffered += more
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), b"0"))
                while len(buffered) < length:
                    buffered += sock.recv(65536)
                self.requests.append((head, buffered[:length]))
                buffered = buffered[length:]
                for step in self.script.pop(0):
                    if step == CLOSE:
                        return
                    if isinstance(step, float):
                        time.sleep(step)
                    else:
                        assert isinstance(step, bytes)
                        sock.sendall(step)
        except (OSError, ssl.SSLError):
            return
        finally:
            sock.close()

    def close(self) -> None:
        self._listener.close()


def answer(status: int, body: bytes, *headers: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\n%scontent-length: %d\r\n\r\n%s" % (
        status, b"".join(h + b"\r\n" for h in headers), len(body), body)


def message(input_tokens: int, output_tokens: int) -> bytes:
    return json.dumps({"type": "message", "id": "msg_1", "model": SONNET, "usage": {
        "input_tokens": input_tokens, "output_tokens": output_tokens}}).encode()


def events(output_tokens: int) -> bytes:
    start = {"type": "message_start", "message": {"id": "msg_2", "model": SONNET,
                                                  "usage": {"input_tokens": 9,
                                                            "output_tokens": 1}}}
    delta = {"type": "content_block_delta", "delta": {"text": "word " * 50}}
    end = {"type": "message_delta", "usage": {"output_tokens": output_tokens}}
    return b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in (start, delta, end))


SSE = b"content-type: text/event-stream"


# -- the gateway between them ----------------------------------------------------------


@dataclass
class Meter:
    """What the gateway reported of an attempt (``_gateway.Metered``)."""

    counted: list[Usage] = field(default_factory=list)
    calls: list[dict[str, object]] = field(default_factory=list)
    seen: list[int | str] = field(default_factory=list)

    def count(self, usage: Usage) -> None:
        self.counted.append(usage)

    async def record(self, usage: Usage, call: dict[str, object]) -> None:
        self.calls.append(call)

    def refusal(self) -> str | None:
        return None

    def refused(self, reason: str) -> None:
        raise AssertionError(reason)

    def api_seen(self, status: int | str, provider: str) -> None:
        self.seen.append(status)


def through_gateway(upstream: Upstream, agent: Any, *, env: dict[str, str] | None = None,
                    socket_path: Path | None = None, timeouts: Timeouts | None = None,
                    ) -> tuple[Any, Meter]:
    """Run ``agent(base, socket_path)`` (blocking, in a thread) against a gateway whose
    anthropic upstream is ``upstream``; what it returned, and what was metered once its
    attempt closed."""
    meter = Meter()

    async def main() -> Any:
        async with open_gateway({"EVALLEDGER_GATEWAY_ANTHROPIC_URL": upstream.url,
                                 "ANTHROPIC_API_KEY": "sk-runner",
                                 "EVALLEDGER_GATEWAY_DRAIN": "5", **(env or {})},
                                socket_path) as gateway:
            if timeouts is not None:
                gateway.client.timeouts = timeouts
            attempt = gateway.attempt(frozenset({"anthropic"}), meter, lambda m, t: 0.0)
            base = f"{gateway.base_url}/{attempt.token}/anthropic"
            with trio.fail_after(PATIENCE):
                done = await trio.to_thread.run_sync(agent, base, socket_path)
                await gateway.close(attempt)
            return done

    try:
        return trio.run(main), meter
    finally:
        upstream.close()


@dataclass
class Agent:
    """An agent's one connection, speaking raw HTTP/1.1 (or 1.0), each answer read with
    h11 (its bytes as they came kept)."""

    sock: socket.socket
    wire: bytearray = field(default_factory=bytearray)

    @classmethod
    def to(cls, base: str, unix: Path | None = None) -> Agent:
        if unix is not None:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(unix))
        else:
            sock = socket.create_connection(("127.0.0.1", int(base.split(":")[2].split("/")[0])))
        sock.settimeout(PATIENCE)
        return cls(sock)

    def send(self, base: str, body: bytes, *headers: bytes, version: bytes = b"1.1") -> None:
        path = base.split("/", 3)[3]
        self.sock.sendall(b"POST /%s/v1/messages HTTP/%s\r\nhost: x\r\n%scontent-length: %d"
                          b"\r\n\r\n%s" % (path.encode(), version,
                                           b"".join(h + b"\r\n" for h in headers),
                                           len(body), body))

    def read(self) -> tuple[h11.Response, bytes, bytes]:
        """An answer: its head, its body, and its bytes as they came."""
        parser = h11.Connection(h11.CLIENT)
        parser.send(h11.Request(method="POST", target="/", headers=[("host", "x")]))
        self.wire.clear()
        head, body = None, bytearray()
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                data = self.sock.recv(65536)
                self.wire += data
                parser.receive_data(data)
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                assert head is not None
                return head, bytes(body), bytes(self.wire)


def header(head: h11.Response, name: bytes) -> bytes | None:
    return next((v for k, v in head.headers if k == name), None)


def test_answers_keep_their_framing_and_both_connections_stay_alive(tmp_path: Path) -> None:
    """One agent connection, three calls: a JSON answer of a known length, a stream
    chunked and cut mid-line, and an answer ended by the upstream's close (chunked
    for the agent). The stream's bytes reach the agent as the upstream sent them."""
    stream = events(42)
    chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (100, stream[:100], len(stream) - 100,
                                                       stream[100:])
    stream_head = b"HTTP/1.1 200 OK\r\n%s\r\ntransfer-encoding: chunked\r\n\r\n" % SSE
    upstream = Upstream([
        [answer(200, message(3, 5), b"request-id: req_1")],
        [stream_head, chunks[:7], 0.05, chunks[7:150], 0.05, chunks[150:]],
        [b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n", message(7, 1),
         CLOSE],
    ])

    def agent(base: str, unix: Path | None) -> list[tuple[h11.Response, bytes, bytes]]:
        talk = Agent.to(base, unix)
        answers = []
        for body in (b'{"model": "m"}', b'{"model": "m", "stream": true}', b"{}"):
            talk.send(base, body, b"x-api-key: evl-agent")
            answers.append(talk.read())
        return answers

    (plain, streamed, closed), meter = through_gateway(upstream, agent,
                                                       socket_path=tmp_path / "gw.sock")
    assert plain[1] == message(3, 5) and header(plain[0], b"content-length") == b"%d" % len(
        plain[1])
    assert streamed[1] == stream and streamed[2].endswith(chunks)  # passed on verbatim
    assert closed[1] == message(7, 1) and header(closed[0], b"transfer-encoding") == b"chunked"
    assert upstream.connections == 1  # kept alive until it closed
    assert [(u.tokens.input_tokens, u.tokens.output_tokens) for u in meter.counted] == [
        (3, 5), (9, 42), (7, 1)]
    assert [c["status"] for c in meter.calls] == [200, 200, 200]
    # The runner's key went upstream, never the agent's.
    assert all(b"x-api-key: sk-runner" in head and b"evl-" not in head
               for head, _ in upstream.requests)


def test_an_http_10_agent_gets_the_body_until_the_close() -> None:
    upstream = Upstream([[b"HTTP/1.1 200 OK\r\n%s\r\ntransfer-encoding: chunked\r\n\r\n"
                          % SSE, b"%x\r\n%s\r\n0\r\n\r\n" % (len(events(3)), events(3))]])

    def agent(base: str, unix: Path | None) -> tuple[h11.Response, bytes, bytes]:
        talk = Agent.to(base)
        talk.send(base, b"{}", version=b"1.0")
        return talk.read()

    (head, body, _), meter = through_gateway(upstream, agent)
    assert body == events(3) and header(head, b"transfer-encoding") is None
    assert header(head, b"connection") == b"close"
    assert meter.counted[0].tokens.output_tokens == 3


def test_a_chunked_request_body_after_100_continue() -> None:
    upstream = Upstream([[answer(200, message(1, 1))]])

    def agent(base: str, unix: Path | None) -> tuple[h11.Response, bytes, bytes]:
        talk = Agent.to(base)
        path = base.split("/", 3)[3]
        talk.sock.sendall(b"POST /%s/v1/messages HTTP/1.1\r\nhost: x\r\nexpect: 100-continue"
                          b"\r\ntransfer-encoding: chunked\r\n\r\n" % path.encode())
        assert talk.sock.recv(100).startswith(b"HTTP/1.1 100 ")
        talk.sock.sendall(b"5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
        return talk.read()

    (head, body, _), _ = through_gateway(upstream, agent)
    assert head.status_code == 200 and body == message(1, 1)
    ((sent, sent_body),) = upstream.requests
    assert sent_body == b'{"a":1}' and b"content-length: 7" in sent
    assert b"expect" not in sent.lower() and b"transfer-encoding" not in sent.lower()


def test_a_request_past_max_request_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gateway_http, "MAX_REQUEST", 1000)
    upstream = Upstream([[answer(200, message(1, 1))]])

    def agent(base: str, unix: Path | None) -> tuple[h11.Response, bytes, bytes]:
        talk = Agent.to(base)
        talk.send(base, b"x" * 1001)
        return talk.read()

    (head, body, _), _ = through_gateway(upstream, agent)
    assert head.status_code == 413 and json.loads(body)["error"]["type"] == "api_error"
    assert upstream.requests == []


def test_past_what_the_gateway_holds_of_every_body_a_request_is_asked_again_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies held at once are bounded whatever the connections (sixteen of 63 MiB took
    the gateway to a gigabyte): past it a 503, which a client retries; and what one
    request held is given back, so the next is served."""
    monkeypatch.setattr(_gateway_http, "MAX_HELD", 1000)
    upstream = Upstream([[answer(200, message(1, 1))]])

    def agent(base: str, unix: Path | None) -> list[int]:
        talk = Agent.to(base)
        talk.send(base, b"x" * 1001)
        first = talk.read()[0].status_code
        again = Agent.to(base)
        again.send(base, json.dumps({"model": "m"}).encode())
        return [first, again.read()[0].status_code]

    statuses, _ = through_gateway(upstream, agent)
    assert statuses == [503, 200]


def test_a_body_that_comes_too_slowly_ends_its_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gateway_http, "BODY_SECONDS", 0.3)
    upstream = Upstream([[answer(200, message(1, 1))]])

    def agent(base: str, unix: Path | None) -> bytes:
        talk = Agent.to(base)
        path = base.split("/", 3)[3]
        talk.sock.sendall(b"POST /%s/v1/messages HTTP/1.1\r\nhost: x\r\n"
                          b"content-length: 10\r\n\r\n{" % path.encode())
        return talk.sock.recv(100)  # b"": closed, with no answer

    closed, _ = through_gateway(upstream, agent)
    assert closed == b"" and upstream.requests == []


@pytest.mark.parametrize(("script", "status", "seen"), [
    ([[0.5, answer(200, message(1, 1))]], 504, "timeout"),
    ([[CLOSE]], 502, "unreachable"),
], ids=["stalled", "closed-before-answering"])
def test_an_upstream_failure_is_answered_in_the_apis_shape_and_said(
        script: list[list[bytes | float | str]], status: int, seen: str) -> None:
    upstream = Upstream(script)

    def agent(base: str, unix: Path | None) -> tuple[h11.Response, bytes, bytes]:
        talk = Agent.to(base)
        talk.send(base, b"{}")
        return talk.read()

    (head, body, _), meter = through_gateway(upstream, agent, timeouts=Timeouts(read=0.2))
    assert head.status_code == status and json.loads(body)["type"] == "error"
    assert meter.seen == [seen] and [c["status"] for c in meter.calls] == [seen]


def test_an_unreachable_upstream_is_said() -> None:
    upstream = Upstream([])
    upstream.close()  # nothing listens there

    def agent(base: str, unix: Path | None) -> int:
        talk = Agent.to(base)
        talk.send(base, b"{}")
        return talk.read()[0].status_code

    status, meter = through_gateway(upstream, agent)
    assert status == 502 and meter.seen == ["unreachable"]


def test_an_upstream_that_breaks_off_its_stream_breaks_off_the_agents() -> None:
    start = events(3).split(b"\n\n")[0] + b"\n\n"
    upstream = Upstream([[b"HTTP/1.1 200 OK\r\n%s\r\ncontent-length: 5000\r\n\r\n" % SSE,
                          start, CLOSE]])

    def agent(base: str, unix: Path | None) -> bytes:
        talk = Agent.to(base)
        talk.send(base, b"{}")
        with pytest.raises(h11.RemoteProtocolError):  # its answer ends short
            talk.read()
        return bytes(talk.wire)

    wire, meter = through_gateway(upstream, agent)
    assert wire.endswith(start)
    # The API failed mid-answer: its call says it began (200) and broke off.
    assert meter.seen == ["broke off mid-answer"]
    (call,) = meter.calls
    assert (call["status"], call["cut"], call["broken"]) == (200, True, True)
    # Booked with what its start reported, the input side and one output token: a floor.
    (usage,) = meter.counted
    assert (usage.tokens.input_tokens, usage.tokens.output_tokens, usage.estimate) == (
        9, 1, True)


def test_an_agent_gone_mid_stream_leaves_its_call_read_to_its_usage() -> None:
    """The agent reads the start and goes; the gateway reads on for the final usage
    (not passed on: nobody is there), and the call is booked whole, not cut."""
    stream = events(77)
    upstream = Upstream([[b"HTTP/1.1 200 OK\r\n%s\r\ncontent-length: %d\r\n\r\n"
                          % (SSE, len(stream)), stream[:60], 0.5, stream[60:]]])

    def agent(base: str, unix: Path | None) -> None:
        talk = Agent.to(base)
        talk.send(base, b"{}")
        assert talk.sock.recv(65536).startswith(b"HTTP/1.1 200")
        talk.sock.close()

    _, meter = through_gateway(upstream, agent)
    ((call),) = meter.calls
    assert meter.counted[-1].tokens.output_tokens == 77 and not meter.counted[-1].estimate
    assert "cut" not in call


# -- TLS upstream ----------------------------------------------------------------------


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for localhost it signed: the CA's PEM, the leaf's, its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
             signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            builder = builder.add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                signer.public_key()), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    paths = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    paths[0].write_bytes(cert("test CA", ca_key, "test CA", ca_key, True).public_bytes(
        serialization.Encoding.PEM))
    paths[1].write_bytes(cert("localhost", leaf_key, "test CA", ca_key, False).public_bytes(
        serialization.Encoding.PEM))
    paths[2].write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return paths


def _tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    ca, leaf, key = certificates(folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf, key)
    return context, ca


@pytest.mark.parametrize("trusted", [True, False], ids=["ca-bundle", "untrusted"])
def test_an_https_upstream_is_verified_named_and_kept_alive(tmp_path: Path,
                                                            trusted: bool) -> None:
    context, ca = _tls(tmp_path)
    upstream = Upstream([[answer(200, message(2, 2))], [answer(200, message(4, 4))]],
                        tls=context)

    def agent(base: str, unix: Path | None) -> list[int]:
        talk = Agent.to(base)
        statuses = []
        for _ in range(2):
            talk.send(base, b"{}")
            statuses.append(talk.read()[0].status_code)
        return statuses

    statuses, meter = through_gateway(
        upstream, agent, env={"EVALLEDGER_GATEWAY_CA": str(ca)} if trusted else {})
    if trusted:  # one TLS connection for both calls, asked for by the URL's name
        assert statuses == [200, 200] and upstream.connections == 1
        assert upstream.names == ["localhost"]
        assert [u.tokens.output_tokens for u in meter.counted] == [2, 4]
    else:  # certifi's bundle does not know the test CA
        assert statuses == [502, 502] and meter.seen == ["unreachable", "unreachable"]



def test_a_stream_from_an_https_upstream_passes_whole_however_its_records_come(
        tmp_path: Path) -> None:
    """A receive takes every TLS record decrypted so far (``_TLS``): 3 MB of events,
    written in pieces that cut records and chunk lines anywhere and with pauses between,
    reach the agent byte for byte with their usage read; then an answer the upstream
    ends by closing, with no TLS goodbye, ends there (its length said it was whole)."""
    context, ca = _tls(tmp_path)
    # The usage events of ``events`` around a bulk of text deltas.
    start, _, end = events(7000).partition(b'data: {"type": "content_block_delta"')
    delta = b"data: %s\n\n" % json.dumps({"type": "content_block_delta", "delta": {
        "text": "x" * 3000}}).encode()
    body = start + delta * 1000 + b'data: {"type": "content_block_delta"' + end
    framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 50_000]), body[i:i + 50_000])
                      for i in range(0, len(body), 50_000)) + b"0\r\n\r\n"
    cuts = [0, 1, 7, 16_384, 16_391, 100_000, 1_000_003, 2_500_000, len(framed)]
    pieces: list[bytes | float | str] = [b"HTTP/1.1 200 OK\r\n%s\r\ntransfer-encoding: "
                                         b"chunked\r\n\r\n" % SSE]
    for a, b in itertools.pairwise(cuts):
        pieces += [framed[a:b], 0.01]
    upstream = Upstream([pieces, [answer(200, message(5, 6)), CLOSE]], tls=context)

    def agent(base: str, unix: Path | None) -> list[tuple[h11.Response, bytes, bytes]]:
        talk = Agent.to(base)
        answers = []
        for sent in (b'{"stream": true}', b"{}"):
            talk.send(base, sent)
            answers.append(talk.read())
        return answers

    (streamed, closed), meter = through_gateway(
        upstream, agent, env={"EVALLEDGER_GATEWAY_CA": str(ca)})
    assert streamed[1] == body and streamed[2].endswith(framed)
    assert closed[1] == message(5, 6)
    assert [(u.tokens.input_tokens, u.tokens.output_tokens) for u in meter.counted] == [
        (9, 7000), (5, 6)]
    assert upstream.connections == 1
