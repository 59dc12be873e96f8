"""The model gateway's cost to an agent (docs/gateway.md): latency it adds to a call and
the streaming throughput it keeps, against a direct connection, measured in one run.

Three processes, as in a run: an upstream (a local HTTP server answering Anthropic's
Messages API: a small JSON answer, or a stream of server-sent events), the gateway (this
process, on trio, as a batch runs it), and a client (a separate Python process, one
keep-alive connection, as an agent's SDK) that calls the upstream directly or through
the gateway, in alternating rounds.

Lines scripts read: ``added latency per call: 0.61 ms (target <= 2 ms)``, ``ratio
streaming throughput gateway/direct: 0.95 (target >= 0.9)`` (as fast as a socket
goes) and ``ratio paced streaming throughput gateway/direct: 1.00`` (an event each 5 ms,
as a model writes).

The streamed ratio is the gateway's CPU per byte against the upstream's and the
client's: three processes share the machine's cores (two, here, with whatever else
runs), so it moves with the machine's load; run it several times and read the spread.
docs/gateway.md ("Its cost") says what the gateway spends per byte and per call, and
what a forwarder that only copies bytes reaches on the same machine.
Run: python bench/gateway.py [--calls N] [--stream-mb M] [--rounds R]. Not part of the
tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalledger.executor._gateway import open_gateway
from evalledger.executor._usage import Usage

UPSTREAM = textwrap.dedent('''
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    EVENT = ("event: content_block_delta\\ndata: " + json.dumps({"type": "content_block_delta",
             "index": 0, "delta": {"type": "text_delta", "text": "x" * 4000}}) + "\\n\\n").encode()
    ANSWER = json.dumps({"type": "message", "id": "msg_1", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "usage": {"input_tokens": 10, "output_tokens": 2}}).encode()
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)
                return
            count, pace = body["events"], body.get("pace", 0)
            start = json.dumps({"type": "message_start", "message": {"id": "msg_2",
                "model": "claude-sonnet-4-5", "usage": {"input_tokens": 10,
                "output_tokens": 1}}})
            end = json.dumps({"type": "message_delta", "usage": {"output_tokens": count}})
            payload = (f"event: message_start\\ndata: {start}\\n\\n".encode() + EVENT * count
                       + f"event: message_delta\\ndata: {end}\\n\\n".encode())
            # As the APIs stream: chunked, a piece as it is made.
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            view = memoryview(payload)
            step = len(EVENT) if pace else 65536  # paced: an event a chunk, as a model writes
            for i in range(0, len(view), step):
                piece = view[i:i + step]
                if pace:
                    time.sleep(pace)
                self.wfile.write(b"%x\\r\\n" % len(piece) + piece + b"\\r\\n")
            self.wfile.write(b"0\\r\\n\\r\\n")
        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if len(sys.argv) > 2:  # HTTPS, as the model APIs answer: a certificate and its key
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1], sys.argv[2])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()
''')

CLIENT = textwrap.dedent('''
    import http.client, json, socket, ssl, sys, time
    from urllib.parse import urlsplit
    base, calls, events = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    url = urlsplit(base)
    if url.scheme == "https":  # straight to an HTTPS upstream, trusting the CA given
        conn = http.client.HTTPSConnection(url.hostname, url.port,
            context=ssl.create_default_context(cafile=sys.argv[4]))
    else:
        conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.connect()  # headers and body are two writes: no wait on a delayed ACK between
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    headers = {"content-type": "application/json", "x-api-key": "sk-test"}
    def call(body):
        conn.request("POST", url.path + "/v1/messages", json.dumps(body), headers)
        answer = conn.getresponse()
        size = 0
        while chunk := answer.read(65536):
            size += len(chunk)
        return answer.status, size
    call({"model": "claude-sonnet-4-5"})  # the connections opened
    took = []
    for _ in range(calls):
        began = time.perf_counter()
        status, _ = call({"model": "claude-sonnet-4-5"})
        took.append(time.perf_counter() - began)
        assert status == 200, status
    began = time.perf_counter()
    status, size = call({"model": "claude-sonnet-4-5", "stream": True, "events": events})
    streamed = time.perf_counter() - began
    assert status == 200, status
    began = time.perf_counter()
    status, _ = call({"model": "claude-sonnet-4-5", "stream": True, "events": 200,
                      "pace": 0.005})
    paced = time.perf_counter() - began
    took.sort()
    print(json.dumps({"median_call": took[len(took) // 2], "stream_bytes": size,
                      "stream_seconds": streamed, "paced_seconds": paced}))
''')


class _Meter:
    """Counts what the gateway reports, and holds nothing back (no budget)."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, usage: Usage) -> None:
        self.calls += 1

    async def record(self, usage: Usage, call: dict[str, object]) -> None:
        pass

    def refusal(self) -> str | None:
        return None

    def refused(self, reason: str) -> None:
        pass

    def api_seen(self, status: int | str, provider: str) -> None:
        pass


def _client(base: str, calls: int, events: int, ca: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CLIENT, base, str(calls), str(events), ca],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


async def _measure(upstream: str, calls: int, events: int, rounds: int, ca: str,
                   said: str) -> None:
    """Direct to ``upstream`` against through the gateway, ``rounds`` times each, in
    turns; ``ca``: the CA an HTTPS upstream's certificate is from (the client trusts it
    going direct, the gateway going through); ``said``: how the lines name the case."""
    meter = _Meter()
    env = {"EVALLEDGER_GATEWAY_ANTHROPIC_URL": upstream, "ANTHROPIC_API_KEY": "sk-runner",
           "EVALLEDGER_GATEWAY_CA": ca}
    async with open_gateway(env) as gateway:
        attempt = gateway.attempt(frozenset({"anthropic"}), meter, lambda m, t: 0.0)
        through = f"{gateway.base_url}/{attempt.token}/anthropic"
        direct_runs, gateway_runs = [], []
        for _ in range(rounds):  # alternating: the machine's noise falls on both
            direct_runs.append(await trio.to_thread.run_sync(_client, upstream, calls, events,
                                                             ca))
            gateway_runs.append(await trio.to_thread.run_sync(_client, through, calls, events,
                                                              ca))
        await gateway.close(attempt, now=True)
    assert meter.calls == rounds * (calls + 3), meter.calls

    def median(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    direct_call, gateway_call = median(direct_runs, "median_call"), median(gateway_runs,
                                                                           "median_call")
    size = direct_runs[0]["stream_bytes"]
    direct_rate = size / median(direct_runs, "stream_seconds")
    gateway_rate = size / median(gateway_runs, "stream_seconds")
    print(f"{said}: calls: {calls} small JSON answers a round, {rounds} rounds; stream: "
          f"{size / 1e6:.1f} MB of server-sent events")
    print(f"{said}: median call: direct {direct_call * 1000:.2f} ms, through the gateway "
          f"{gateway_call * 1000:.2f} ms")
    print(f"{said}: added latency per call: {(gateway_call - direct_call) * 1000:.2f} ms "
          "(target <= 2 ms)")
    print(f"{said}: streaming: direct {direct_rate / 1e6:.0f} MB/s, through the gateway "
          f"{gateway_rate / 1e6:.0f} MB/s")
    print(f"ratio streaming throughput gateway/direct, {said}: {gateway_rate / direct_rate:.2f} "
          "(target >= 0.9)")
    direct_paced, gateway_paced = (median(direct_runs, "paced_seconds"),
                                   median(gateway_runs, "paced_seconds"))
    print(f"{said}: a stream paced as a model writes (200 events, one each 5 ms): direct "
          f"{direct_paced:.3f} s, through the gateway {gateway_paced:.3f} s")
    print(f"ratio paced streaming throughput gateway/direct, {said}: "
          f"{direct_paced / gateway_paced:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--stream-mb", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    events = int(args.stream_mb * 1e6 / 4100)
    with tempfile.TemporaryDirectory() as folder:
        # The APIs answer over HTTPS: a test CA (trustme, of the test extra) and its
        # certificate for the upstream, as a real API's from a public CA.
        import trustme

        ca = trustme.CA()
        ca_file, cert_file = Path(folder) / "ca.pem", Path(folder) / "server.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(cert_file))
        for scheme, tls, said in (("http", [], "plain upstream"),
                                  ("https", [str(cert_file)] * 2, "HTTPS upstream")):
            server = subprocess.Popen([sys.executable, "-c", UPSTREAM, *tls],
                                      stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout is not None
                port = int(server.stdout.readline())
                trio.run(_measure, f"{scheme}://127.0.0.1:{port}", args.calls, events,
                         args.rounds, str(ca_file), said)
            finally:
                server.kill()


if __name__ == "__main__":
    main()
