"""The executor's ``UsageMeter`` reads a Claude Code transcript with the one parser the
viewer reads it with (``evalledger.agents``): the live estimate that enforces a budget
and the viewer's tokens-over-time curve (``RunningUsage``) count the same lines alike.
"""

from __future__ import annotations

from typing import Any

from evalledger.agents import RunningUsage, parser_for
from evalledger.executor._usage import UsageMeter

SONNET = "claude-sonnet-4-5"


def assistant(message_id: Any, input_tokens: int, output_tokens: int,
              **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"model": SONNET, "content": [{"type": "text", "text": "hi"}],
                               "usage": {"input_tokens": input_tokens,
                                         "output_tokens": output_tokens}, **extra}
    if message_id is not ...:
        message["id"] = message_id
    return {"type": "assistant", "message": message}


# A transcript as an agent CLI may write it, with the shapes a parser must decide on:
# a message repeated over lines, lines with no id, a null id, a numeric id, counts
# out of range, a second session after a result.
TRANSCRIPT: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "model": SONNET, "claude_code_version": "2.0.1"},
    assistant("msg_1", 100, 10),
    assistant("msg_1", 100, 25),  # the same message, its usage so far: replaces
    assistant(None, 40, 4),
    assistant(None, 60, 6),  # a null id twice: two messages, or one?
    assistant(..., 7, 1),
    assistant(..., 9, 2),
    assistant(3, 11, 1),
    assistant(3, 13, 1),
    assistant("msg_2", 2**60, 5.0),  # a count beyond any real one reads as none
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
    {"type": "result", "subtype": "success", "total_cost_usd": 0.01,
     "usage": {"input_tokens": 300, "output_tokens": 50}},
    assistant("msg_3", 20, 2),  # a second session in the same command
]


def test_the_meters_live_tokens_and_the_viewers_usage_curve_agree_on_every_line() -> None:
    meter = UsageMeter("claude-code", None)
    curve = RunningUsage()
    parse = parser_for("claude-code")
    assert parse is not None
    for number, line in enumerate(TRANSCRIPT, 1):
        meter.observe(line)
        curve.add(parse(line))
        assert meter.live_tokens == curve.total.total, (number, line)


def test_the_meter_takes_the_model_and_version_the_parser_reads() -> None:
    meter = UsageMeter("claude-code", "default-model")
    meter.observe({"type": "system", "subtype": "init", "model": "", "claude_code_version": ""})
    entry = parser_for("claude-code")({"type": "system", "model": ""})  # type: ignore[misc]
    assert entry.steps[0].model is None  # type: ignore[union-attr]
    # An empty name is no name, to the meter as to the viewer.
    assert meter.model == "default-model"
    assert "claude_code_version" not in meter.versions
