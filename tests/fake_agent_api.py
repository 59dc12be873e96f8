"""Local stand-ins for the model APIs the real agent CLIs call: Anthropic's Messages API
(Claude Code), OpenAI's Responses API (Codex) and Gemini's streamGenerateContent (Gemini
CLI; its router's generateContent answered as a side call), each streaming server-sent
events as the real ones do, answering from a script and recording what each call was told and
what usage each answer reported (the truth a ledger is checked against).

A script is a list of ``Turn``: a tool call (the agent's own shell tool) or a final
message, with the usage the answer reports. A turn may ``hold`` its answer: the server
sends the message's start (with ``output_tokens: 1``, as the real API does) and then
waits on a ``threading.Event`` before the rest, so a test can interrupt the agent at a
known point by waiting on ``FakeAgentApi.holding``, never by sleeping.

Calls on any other model than the main one (a subagent Claude Code starts on a small
model) are answered from ``side``, in order, its last turn again once it runs out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .fake_api import LoopbackServer


@dataclass
class Usage:
    """What one answer reports: fresh input, output, cache reads and writes."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class Turn:
    """One scripted answer: a shell command to run (``command``, by the agent's own
    shell tool), another tool to call (``tool`` with ``input``) or a final ``text``."""

    command: str | None = None
    text: str = "Done."
    tool: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    hold: threading.Event | None = None


@dataclass
class Served:
    """A call as the server answered it: the model asked for and the usage reported
    (``finished``: the whole answer was sent; else it was cut off after its start)."""

    model: str
    usage: Usage
    side: bool
    finished: bool = False


class FakeAgentApi(LoopbackServer):
    """Serves ``script`` in order on a loopback port (``url``) for ``main_model``; every
    other model gets ``side``. ``served`` holds each call as answered; ``holding`` is
    set while a held answer waits."""

    def __init__(self, script: list[Turn], *, main_model: str,
                 side: list[Turn] | None = None) -> None:
        self.script = list(script)
        self.main_model = main_model
        self.side = list(side or [Turn(text="Done.", usage=Usage(143, 7))])
        self.served: list[Served] = []
        self.requests: list[dict[str, Any]] = []
        self.holding = threading.Event()
        self._held: list[threading.Event] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def do_GET(self) -> None:
                self._json(404, {"error": {"type": "not_found", "message": self.path}})

            def do_HEAD(self) -> None:
                self._json(200, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                with api._lock:
                    api.requests.append({"path": self.path, "body": body, "headers": {
                        k.lower(): v for k, v in self.headers.items()}})
                if path.endswith("/messages/count_tokens"):
                    self._json(200, {"input_tokens": 100})
                elif path.endswith("/messages"):
                    api._answer(self, body, "anthropic")
                elif path.endswith("/responses"):
                    api._answer(self, body, "responses")
                elif path.endswith(":countTokens"):
                    self._json(200, {"totalTokens": 100})
                elif path.endswith(":streamGenerateContent"):
                    api._answer(self, {**body, "model": _gemini_model(path)}, "gemini")
                elif path.endswith(":generateContent"):  # a side call: Gemini CLI's router
                    api._side_json(self, _gemini_model(path))
                else:
                    self._json(404, {"error": {"type": "not_found", "message": self.path}})

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)

    def __exit__(self, *exc: object) -> None:
        # A held answer waits no more: its thread ends as the server does.
        for turn in [*self.script, *self.side]:
            if turn.hold is not None:
                turn.hold.set()
        for hold in self._held:
            hold.set()
        super().__exit__(*exc)

    def _next(self, model: str) -> tuple[Turn, bool]:
        with self._lock:
            if model and model != self.main_model:
                return (self.side.pop(0) if len(self.side) > 1 else self.side[0]), True
            if self.script:
                return self.script.pop(0), False
            return Turn(text="Nothing more to do."), False

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any],
                dialect: str) -> None:
        model = str(body.get("model") or "")
        turn, side = self._next(model)
        served = Served(model, turn.usage, side)
        with self._lock:
            self.served.append(served)
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.end_headers()
        number = len(self.served)
        events = _DIALECTS[dialect](turn, model, number)
        try:
            for index, (name, data) in enumerate(events):
                if index == 1 and turn.hold is not None:
                    self._held.append(turn.hold)
                    handler.wfile.flush()
                    self.holding.set()
                    turn.hold.wait()
                said = f"data: {json.dumps(data)}\r\n\r\n" if name is None else (
                    f"event: {name}\ndata: {json.dumps(data)}\n\n")
                handler.wfile.write(said.encode())
                handler.wfile.flush()
            served.finished = True
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent was stopped while the answer was on its way

    def _side_json(self, handler: BaseHTTPRequestHandler, model: str) -> None:
        """A side call answered whole (Gemini CLI's router asks which model to use)."""
        turn, _ = self._next(model)
        with self._lock:
            self.served.append(Served(model, turn.usage, True, finished=True))
        usage = turn.usage
        payload = json.dumps({"candidates": [{"content": {"role": "model", "parts": [
            {"text": json.dumps({"complexity_reasoning": "A small task.",
                                 "complexity_score": 10})}]}, "finishReason": "STOP"}],
            "usageMetadata": _gemini_usage(usage), "modelVersion": model}).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


def _anthropic_events(turn: Turn, model: str, number: int,
                      ) -> Iterator[tuple[str | None, Any]]:
    """A Messages API stream: the message's start with its input usage and one output
    token, its content block, then ``message_delta`` with the real output count."""
    usage = turn.usage
    yield "message_start", {"type": "message_start", "message": {
        "id": f"msg_{number:04d}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage.input, "output_tokens": 1,
                  "cache_read_input_tokens": usage.cache_read,
                  "cache_creation_input_tokens": usage.cache_write}}}
    if turn.command is not None or turn.tool is not None:
        name, arguments = (("Bash", {"command": turn.command, "description": "Run it"})
                           if turn.command is not None else (turn.tool, turn.input))
        yield "content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "tool_use",
                                                        "id": f"toolu_{number:04d}",
                                                        "name": name, "input": {}}}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps(arguments)}}
        stop = "tool_use"
    else:
        yield "content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": turn.text}}
        stop = "end_turn"
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"input_tokens": usage.input,
                                      "output_tokens": usage.output,
                                      "cache_read_input_tokens": usage.cache_read,
                                      "cache_creation_input_tokens": usage.cache_write}}
    yield "message_stop", {"type": "message_stop"}


def _responses_events(turn: Turn, model: str, number: int,
                      ) -> Iterator[tuple[str | None, Any]]:
    """A Responses API stream: created, one output item (a shell call or a message),
    completed with the usage (OpenAI counts cached input inside ``input_tokens``)."""
    usage = turn.usage
    response = {"id": f"resp_{number:04d}", "object": "response", "model": model,
                "status": "in_progress", "output": []}
    yield "response.created", {"type": "response.created", "response": response}
    if turn.command is not None:
        item: dict[str, Any] = {
            "type": "function_call", "id": f"fc_{number:04d}", "call_id": f"call_{number:04d}",
            "name": "exec_command", "arguments": json.dumps({"cmd": turn.command}),
            "status": "completed"}
    else:
        item = {"type": "message", "id": f"msg_{number:04d}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
    yield "response.output_item.added", {"type": "response.output_item.added",
                                         "output_index": 0, "item": item}
    yield "response.output_item.done", {"type": "response.output_item.done",
                                        "output_index": 0, "item": item}
    yield "response.completed", {"type": "response.completed", "response": {
        **response, "status": "completed", "output": [item],
        "usage": {"input_tokens": usage.input + usage.cache_read,
                  "input_tokens_details": {"cached_tokens": usage.cache_read},
                  "output_tokens": usage.output,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage.input + usage.cache_read + usage.output}}}


def _gemini_model(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(":", 1)[0]


def _gemini_usage(usage: Usage, *, output: int | None = None) -> dict[str, int]:
    """Gemini's usage: the prompt counts cached input in; candidates are the output."""
    return {"promptTokenCount": usage.input + usage.cache_read,
            "cachedContentTokenCount": usage.cache_read,
            "candidatesTokenCount": usage.output if output is None else output,
            "totalTokenCount": usage.input + usage.cache_read + usage.output}


def _gemini_events(turn: Turn, model: str, number: int) -> Iterator[tuple[str | None, Any]]:
    """A streamGenerateContent stream: a first chunk (a word of text, the usage so far:
    the prompt and one output token), then the call or the answer with the whole usage
    (each chunk's usage is the total so far)."""
    yield None, {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                                 "index": 0}],
                 "usageMetadata": _gemini_usage(turn.usage, output=1),
                 "modelVersion": model, "responseId": f"g{number:04d}"}
    if turn.command is not None:
        part: dict[str, Any] = {"functionCall": {"name": "run_shell_command",
                                                 "args": {"command": turn.command}}}
    else:
        part = {"text": turn.text}
    yield None, {"candidates": [{"content": {"role": "model", "parts": [part]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": _gemini_usage(turn.usage), "modelVersion": model,
                 "responseId": f"g{number:04d}"}


# How each API streams (an event name None: Gemini's, data lines only, CRLF).
_DIALECTS: dict[str, Callable[[Turn, str, int], Iterator[tuple[str | None, Any]]]] = {
    "anthropic": _anthropic_events, "responses": _responses_events, "gemini": _gemini_events}
