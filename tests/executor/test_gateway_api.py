"""Reading an answer's usage as its bytes pass through the gateway (_gateway_api): the
same whatever pieces the network cut it into, LF or CRLF, and only events that carry
usage are read."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from evalledger.executor._gateway_api import Reading, api_of, gemini_model
from evalledger.ledger import TokenCounts

ANTHROPIC = [
    {"type": "message_start", "message": {"id": "msg_1", "model": "claude-opus-4-8",
                                          "usage": {"input_tokens": 4, "output_tokens": 1,
                                                    "cache_creation_input_tokens": 14876}}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "text_delta", "text": "usage is a word too\n\n"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
     "usage": {"output_tokens": 87}},
    {"type": "message_stop"},
]
WHOLE = TokenCounts(input_tokens=4, output_tokens=87, cache_write_tokens=14876)


def stream(events: list[dict], newline: bytes) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + newline + b"data: " + json.dumps(e)
                    .encode() + newline + newline for e in events)


@given(cuts=st.lists(st.integers(0, 2000), max_size=12), crlf=st.booleans(),
       stop=st.integers(0, len(ANTHROPIC)))
def test_a_stream_reads_the_same_however_it_is_cut(cuts: list[int], crlf: bool,
                                                   stop: int) -> None:
    body = stream(ANTHROPIC[:stop], b"\r\n" if crlf else b"\n")
    whole = Reading("anthropic", "messages", sse=True)
    whole.feed(body)
    whole.finish()
    # Fed its pieces, or where they lie in what came (the gateway's receive buffer).
    pieces, spans = Reading("anthropic", "messages", sse=True), Reading(
        "anthropic", "messages", sse=True)
    at = 0
    for cut in [*sorted(min(c, len(body)) for c in cuts), len(body)]:
        pieces.feed(body[at:cut])
        spans.feed(bytearray(body), at, cut)
        at = cut
    for reading in (pieces, spans):
        reading.finish()
        assert (reading.tokens, reading.complete, reading.model, reading.request_id) == (
            whole.tokens, whole.complete, whole.model, whole.request_id)
    # Whole once its message_delta came; before, its start (a floor), or nothing.
    assert whole.complete == (stop >= 3)
    assert whole.tokens == (WHOLE if stop >= 3 else TokenCounts(
        input_tokens=4, output_tokens=1, cache_write_tokens=14876) if stop else TokenCounts())


def test_a_json_answer_is_read_once_it_ended() -> None:
    reading = Reading("anthropic", "messages")
    body = json.dumps({"type": "message", "id": "msg_2", "model": "claude-sonnet-4-5",
                       "usage": {"input_tokens": 3, "output_tokens": 5}}).encode()
    reading.feed(body[:10])
    reading.feed(body[10:])
    assert not reading.complete
    reading.finish()
    assert (reading.tokens, reading.complete, reading.request_id) == (
        TokenCounts(input_tokens=3, output_tokens=5), True, "msg_2")


def test_apis_and_models_are_told_by_their_paths() -> None:
    assert api_of("anthropic", "/v1/messages") == "messages"
    assert api_of("openai", "/v1/chat/completions") == "chat"
    assert api_of("openai", "/v1/responses") == "responses"
    assert api_of("gemini", "/v1beta/models/gemini-2.5-pro:streamGenerateContent") == "generate"
    assert api_of("anthropic", "/v1/messages/count_tokens") == "count_tokens"
    assert api_of("gemini", "/v1beta/models/gemini-2.5-pro:countTokens") == "countTokens"
    assert api_of("gemini", "/v1beta/models/gemini-2.5-pro:embedContent") == "embedContent"
    assert gemini_model("/v1beta/models/gemini-2.5-pro:generateContent") == "gemini-2.5-pro"
    assert gemini_model("/v1beta/models") is None
