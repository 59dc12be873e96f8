"""A local stand-in for a model API (Anthropic's Messages, OpenAI's chat completions): a
real HTTP server on a loopback port that answers from a script and records every
request, for the tests of what calls such an API (judges)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import trustme


@dataclass
class Reply:
    """One scripted answer: a status, headers, a body (JSON, or text as is), a delay."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    method: str = "POST"


def anthropic_answer(text: str, input_tokens: int = 1000, output_tokens: int = 50) -> Reply:
    return Reply(body={"type": "message", "role": "assistant",
                       "content": [{"type": "text", "text": text}],
                       "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}})


def openai_answer(text: str, prompt_tokens: int = 1000, completion_tokens: int = 50) -> Reply:
    return Reply(body={"object": "chat.completion",
                       "choices": [{"index": 0, "message": {"role": "assistant",
                                                            "content": text}}],
                       "usage": {"prompt_tokens": prompt_tokens,
                                 "completion_tokens": completion_tokens}})


class LoopbackServer:
    """A real HTTP server on a free loopback port, in a thread, while the ``with`` lasts;
    its handler quiet (no log line per request)."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.origin = "http://127.0.0.1"

    def secure(self, ca: trustme.CA) -> Self:
        """Serve HTTPS instead, as the real APIs do, with a certificate for ``localhost``
        that ``ca`` issued: a test CA, which a client trusts only when told to."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(context)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.origin = "https://localhost"
        return self

    @property
    def url(self) -> str:
        return f"{self.origin}:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeApi(LoopbackServer):
    """Serves ``script`` in order (the last reply again once it runs out); ``seen`` holds
    each request as it came."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self._last = Reply(status=500, body={"error": "nothing scripted"})
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                api.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()},
                                     json.loads(raw or b"{}"), time.monotonic(),
                                     self.command))
                reply = api.script.popleft() if api.script else api._last
                api._last = reply
                time.sleep(reply.delay)
                data = (reply.body if isinstance(reply.body, bytes | str)
                        else json.dumps(reply.body))
                payload = data.encode() if isinstance(data, str) else data
                try:
                    self.send_response(reply.status)
                    for name, value in {"content-type": "application/json",
                                        **reply.headers}.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout under test)

            do_GET = do_POST  # a read, answered as scripted too

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)


def serving() -> Iterator[FakeApi]:
    with FakeApi() as api:
        yield api
