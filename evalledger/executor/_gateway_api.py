"""The model APIs the gateway speaks: where each is, how it is authenticated, how its
errors look, and what usage its answers report (docs/gateway.md).

Pure: no I/O. A ``Reading`` follows one answer as its bytes pass through (a JSON body,
or server-sent events as they stream) and says what the API reported: the model, the
token counts and whether they are whole (an answer cut before its final usage is a
floor).

- Anthropic Messages: ``message_start`` gives the input side and the model, each
  ``message_delta`` the output so far (cumulative); a JSON answer its ``usage``.
- OpenAI Responses: ``response.completed`` / ``response.incomplete`` /
  ``response.failed`` carry the usage (cached input counted inside ``input_tokens``).
- OpenAI Chat Completions: the ``usage`` of the answer, or of a stream's last chunk
  (the gateway asks for it: ``stream_options.include_usage``).
- Gemini generateContent / streamGenerateContent: ``usageMetadata`` (each chunk's is
  the total so far); ``toolUsePromptTokenCount`` is input (a tool's result read back),
  ``thoughtsTokenCount`` output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalledger.ledger import NO_TOKENS, TokenCounts

# One event of a stream, or a JSON body, at most this large is read for its usage: an
# answer is passed on whole whatever its size, a larger event is just not looked into.
MAX_EVENT = 16 * 1024 * 1024
# How a stream's every byte is searched: re's literal search (measured 30% faster
# than bytes.find on model text; the gateway's main cost per byte after the kernel's).
_USAGE = re.compile(b"usage")


@dataclass(frozen=True)
class Provider:
    """One API: its name in the gateway's paths and ``gateway:``, its upstream by
    default, the runner's variables holding its key, and how an agent is pointed at the
    gateway (base URL and key variables)."""

    name: str
    upstream: str
    key_variables: tuple[str, ...]
    # The agent's variables: its base URL (the gateway's path for it) and its key.
    base_url_variables: tuple[str, ...]
    base_url_suffix: str
    agent_key_variables: tuple[str, ...]
    # Request headers and query parameters that carry a key: never sent upstream.
    key_headers: tuple[str, ...]
    key_params: tuple[str, ...] = ()

    def auth(self, key: str) -> dict[str, str]:
        if self.name == "anthropic":
            return {"x-api-key": key}
        if self.name == "gemini":
            return {"x-goog-api-key": key}
        return {"authorization": f"Bearer {key}"}

    def error(self, status: int, message: str) -> dict[str, Any]:
        """An error body as the API itself shapes one (what its clients parse)."""
        if self.name == "anthropic":
            kind = "invalid_request_error" if status == 400 else "api_error"
            return {"type": "error", "error": {"type": kind, "message": message}}
        if self.name == "gemini":
            state = "INVALID_ARGUMENT" if status == 400 else "UNAVAILABLE"
            return {"error": {"code": status, "message": message, "status": state}}
        return {"error": {"message": message, "type": "invalid_request_error"
                          if status == 400 else "server_error", "code": None, "param": None}}


PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("anthropic", "https://api.anthropic.com", ("ANTHROPIC_API_KEY",),
             ("ANTHROPIC_BASE_URL",), "", ("ANTHROPIC_API_KEY",),
             ("x-api-key", "authorization")),
    Provider("openai", "https://api.openai.com", ("OPENAI_API_KEY",),
             ("OPENAI_BASE_URL",), "/v1", ("OPENAI_API_KEY", "CODEX_API_KEY"),
             ("authorization",)),
    Provider("gemini", "https://generativelanguage.googleapis.com",
             ("GEMINI_API_KEY", "GOOGLE_API_KEY"), ("GOOGLE_GEMINI_BASE_URL",), "",
             ("GEMINI_API_KEY", "GOOGLE_API_KEY"), ("x-goog-api-key", "authorization"),
             ("key",)),
)}


def api_of(provider: str, path: str) -> str:
    """Which API of ``provider`` a request path calls: ``messages``, ``responses``,
    ``chat``, ``generate`` (Gemini's generateContent, either way), or the path's last
    part (a Gemini method's name: ``countTokens``)."""
    last = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if provider == "gemini" and ":" in last:
        method = last.split(":", 1)[1]
        return "generate" if method in ("generateContent", "streamGenerateContent") else method
    return {"completions": "chat"}.get(last, last)


# What an agent may post that spends nothing: passed on, not metered. Any other post
# to an API whose usage the gateway does not read is refused: an agent must not spend
# past its meter and its budget through an API the gateway cannot count (embeddings,
# batches, an old completions API). A read (GET, HEAD: a CLI's check that its base URL
# answers, a model listing) spends nothing and is passed on.
FREE = frozenset({("anthropic", "count_tokens"), ("openai", "models"),
                  ("anthropic", "models"), ("gemini", "countTokens"), ("gemini", "models")})
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def allowed(provider: str, api: str, method: str) -> bool:
    """Whether the gateway passes a call on: one it meters, a free one, or a read."""
    return method in _READS or reads_usage(provider, api) or (provider, api) in FREE


def is_read(method: str) -> bool:
    """A read: passed on without a body (none spends, whatever a body or a header asks:
    ``X-HTTP-Method-Override`` is never passed on either)."""
    return method in _READS


# The answers of a metered API the gateway reads usage in: Gemini's ``alt`` asks for
# another (``proto``: protobuf); sse and json (the default) it reads.
_GEMINI_ALTS = frozenset({"sse", "json"})


def unreadable(provider: str, api: str, *, background: object,
               alts: list[str]) -> str | None:
    """Why a metered call's answer would hold no usage the gateway can read (the call
    is refused then, before it spends), or None. An OpenAI response made in the
    ``background`` answers ``queued`` with no usage, and its result is fetched later by
    a read; Gemini's ``alt=proto`` answers in protobuf."""
    if (provider, api) == ("openai", "responses") and background is True:
        return ("a background response reports no usage in its answer: the gateway "
                "meters a call by its answer (ask without background)")
    if (provider, api) == ("gemini", "generate") and (
            len(alts) > 1 or any(alt not in _GEMINI_ALTS for alt in alts)):
        return (f"alt={','.join(alts)} answers in a form the gateway reads no usage in "
                "(alt=sse or alt=json)")
    return None


def gemini_model(path: str) -> str | None:
    """The model a Gemini path names (``.../models/gemini-2.5-pro:generateContent``)."""
    last = path.rsplit("/", 1)[-1]
    return last.split(":", 1)[0] if ":" in last else None


@dataclass
class Reading:
    """What one answer has reported so far. ``complete``: its final usage came (else its
    counts are a floor: the answer was cut before it)."""

    provider: str
    api: str
    model: str | None = None
    tokens: TokenCounts = NO_TOKENS
    complete: bool = False
    request_id: str | None = None
    _buffer: bytearray = field(default_factory=bytearray)
    # The answer is server-sent events (its content type says so), else one JSON body.
    sse: bool = False
    # Invariant: whether the unfinished event kept in ``_buffer`` holds "usage".
    _usage_kept: bool = False

    def feed(self, data: bytes | bytearray, start: int = 0, end: int | None = None) -> None:
        """More of the answer's body: ``data[start:end]``, looked into where it lies (a
        stream keeps only what an unfinished event needs)."""
        end = len(data) if end is None else end
        buffer = self._buffer
        if not self.sse:
            buffer += memoryview(data)[start:end]
            if len(buffer) > MAX_EVENT:
                buffer.clear()  # too large to look into: its usage stays unknown
            return
        # The one search of every byte (a stream's bulk: its text). "usage" may straddle
        # what was kept and what came.
        if self._usage_kept or _USAGE.search(data, start, end) or b"usage" in (
                bytes(buffer[-4:]) + bytes(data[start:min(end, start + 4)])):
            buffer += memoryview(data)[start:end]
            self._read_events()
            self._usage_kept = buffer.find(b"usage") >= 0  # of one unfinished event
        elif (after := _after_last_event(buffer, data, start, end)) < 0:
            buffer += memoryview(data)[start:end]  # one event goes on
        else:  # no event here carries usage: keep only the unfinished one, if any
            buffer[:] = memoryview(data)[after:end]
        if len(buffer) > MAX_EVENT:
            buffer.clear()
            self._usage_kept = False

    def _read_events(self) -> None:
        """Read each whole event in the buffer that carries usage, and keep the
        unfinished one. One pass (each search starts where the last ended: linear). An
        event ends at a blank line: "\n\n", or "\n\r\n" (CRLF lines)."""
        buffer = self._buffer
        at = 0
        lf, crlf = buffer.find(b"\n\n"), buffer.find(b"\n\r\n")
        while lf >= 0 or crlf >= 0:
            end, size = (lf, 2) if crlf < 0 or 0 <= lf < crlf else (crlf, 3)
            # Only the events that carry usage are parsed (a stream's text deltas, nearly
            # all of it, never are).
            if buffer.find(b"usage", at, end) >= 0 and (
                    data := _event_data(bytes(buffer[at:end]))) is not None:
                self._see(data)
            at = end + size
            if 0 <= lf < at:
                lf = buffer.find(b"\n\n", at)
            if 0 <= crlf < at:
                crlf = buffer.find(b"\n\r\n", at)
        del buffer[:at]

    def finish(self) -> None:
        """The body ended: a JSON answer is read whole; a stream's last event may lack
        its blank line."""
        if self.sse:
            data = _event_data(bytes(self._buffer)) if self._usage_kept else None
            if data is not None:
                self._see(data)
        else:
            try:
                data = json.loads(self._buffer)
            except (ValueError, RecursionError):
                data = None
            # Gemini's streamGenerateContent without alt=sse: its chunks as one array,
            # each chunk's usage the total so far.
            for item in data if isinstance(data, list) else [data]:
                if isinstance(item, dict):
                    self._see(item)
                    # A usage of null (a response still queued) is no usage.
                    self.complete = self.complete or isinstance(
                        item.get("usage"), dict) or isinstance(item.get("usageMetadata"), dict)
        self._buffer.clear()
        self._usage_kept = False

    def _see(self, data: dict[str, Any]) -> None:
        read_for(self.provider, self.api)(self, data)


def _after_last_event(kept: bytearray, data: bytes | bytearray, start: int, end: int) -> int:
    """Where the bytes after the last blank line ("\n\n", "\n\r\n") that ends in
    ``data[start:end]`` start (-1: none ends there), ``kept`` coming before them (it
    holds no blank line). Searched back line by line: an event is a few lines."""
    at = end
    while (newline := data.rfind(b"\n", start, at)) >= 0:
        # The two bytes before it, which may be ``kept``'s last.
        before = (bytes(kept[-2:]) + bytes(data[max(start, newline - 2):newline]))[-2:]
        if before.endswith((b"\n", b"\n\r")):
            return newline + 1
        at = newline
    return -1


def _event_data(event: bytes) -> dict[str, Any] | None:
    """A server-sent event's data lines joined, as a JSON object (None: not one)."""
    lines = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    try:
        data = json.loads(b"\n".join(lines))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _anthropic(reading: Reading, data: dict[str, Any]) -> None:
    kind = data.get("type")
    message = data.get("message") if kind == "message_start" else data
    if kind in ("message_start", "message") and isinstance(message, dict):
        reading.request_id = reading.request_id or _text(message.get("id"))
    if isinstance(message, dict) and isinstance(message.get("model"), str):
        reading.model = message["model"]
    usage = (message or {}).get("usage") if isinstance(message, dict) else None
    if not isinstance(usage, dict):
        return
    before = reading.tokens
    # A delta's counts are the message's so far; a field it leaves out keeps its value.
    reading.tokens = TokenCounts.model_construct(
        input_tokens=_int(usage.get("input_tokens")) or before.input_tokens,
        output_tokens=_int(usage.get("output_tokens")) or before.output_tokens,
        cache_read_tokens=(_int(usage.get("cache_read_input_tokens"))
                           or before.cache_read_tokens),
        cache_write_tokens=(_int(usage.get("cache_creation_input_tokens"))
                            or before.cache_write_tokens))
    if kind in ("message_delta", None, "message"):  # the output's final count
        reading.complete = True


def _responses(reading: Reading, data: dict[str, Any]) -> None:
    response = data.get("response") if "response" in data else data
    if isinstance(response, dict):
        _openai(reading, response, "input_tokens", "output_tokens", "input_tokens_details")


def _chat(reading: Reading, data: dict[str, Any]) -> None:
    _openai(reading, data, "prompt_tokens", "completion_tokens", "prompt_tokens_details")


def _openai(reading: Reading, answer: dict[str, Any], input_: str, output: str,
            details: str) -> None:
    """An OpenAI answer (a Responses response, a Chat Completions chunk): its id, model
    and usage, whose input counts the cached tokens in."""
    reading.request_id = reading.request_id or _text(answer.get("id"))
    if isinstance(answer.get("model"), str):
        reading.model = answer["model"]
    usage = answer.get("usage")
    if isinstance(usage, dict):
        cached = _int((usage.get(details) or {}).get("cached_tokens"))
        reading.tokens = TokenCounts.model_construct(
            input_tokens=max(0, _int(usage.get(input_)) - cached),
            output_tokens=_int(usage.get(output)), cache_read_tokens=cached,
            cache_write_tokens=0)
        reading.complete = True


def _gemini(reading: Reading, data: dict[str, Any]) -> None:
    reading.request_id = reading.request_id or _text(data.get("responseId"))
    if isinstance(data.get("modelVersion"), str):
        reading.model = data["modelVersion"]
    usage = data.get("usageMetadata")
    if isinstance(usage, dict):
        cached = _int(usage.get("cachedContentTokenCount"))
        prompt = _int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount"))
        reading.tokens = TokenCounts.model_construct(
            input_tokens=max(0, prompt - cached), cache_read_tokens=cached,
            output_tokens=(_int(usage.get("candidatesTokenCount"))
                           + _int(usage.get("thoughtsTokenCount"))),
            cache_write_tokens=0)
        # Each chunk's is the total so far: whole once the answer says it finished.
        candidates = data.get("candidates")
        reading.complete = not reading.sse or any(
            isinstance(c, dict) and c.get("finishReason") for c in candidates or ())


def _nothing(reading: Reading, data: dict[str, Any]) -> None:
    """An API the gateway passes on without reading usage (``count_tokens``, models)."""
    reading.complete = True


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


_READERS: dict[tuple[str, str], Callable[[Reading, dict[str, Any]], None]] = {
    ("anthropic", "messages"): _anthropic, ("openai", "responses"): _responses,
    ("openai", "chat"): _chat, ("gemini", "generate"): _gemini,
}


def reads_usage(provider: str, api: str) -> bool:
    """Whether answers of this API report usage the gateway books (else it passes them
    on and books nothing)."""
    return (provider, api) in _READERS


def read_for(provider: str, api: str) -> Callable[[Reading, dict[str, Any]], None]:
    return _READERS.get((provider, api), _nothing)
