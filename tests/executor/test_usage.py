"""``UsageMeter`` (both stream formats) and the ``RateCard`` in ``evalledger.pricing``.

A rate card is immutable: adding rates gives a new card, so no test here can leak
prices into another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalledger.executor._usage import Usage, UsageMeter, owed
from evalledger.ledger import TokenCounts
from evalledger.pricing import (
    DEFAULT_RATES,
    PricingConflict,
    Rate,
    RateCard,
    normalize_model,
)

SONNET = "claude-sonnet-4-5"
rate_for = DEFAULT_RATES.rate_for


def price(model: str | None, card: RateCard = DEFAULT_RATES, **tokens: int) -> float | None:
    return card.price(model, TokenCounts(**tokens))


def used(model: str | None, cost_usd: float | None = None, *, estimate: bool = False,
         **tokens: int) -> Usage:
    return Usage(model=model, tokens=TokenCounts(**tokens), cost_usd=cost_usd, estimate=estimate)


def totals(meter: UsageMeter) -> dict[str, int]:
    return meter.totals.model_dump()


def usage(**fields: Any) -> dict[str, Any]:
    return {"type": "usage", **fields}


# -- native --------------------------------------------------------------------------------


def test_native_lines_are_deltas() -> None:
    meter = UsageMeter("native", None)
    (first,) = meter.observe(usage(model=SONNET, input_tokens=1000, output_tokens=200,
                                   cache_read_tokens=3000, cache_write_tokens=400, cost_usd=0.05))
    (second,) = meter.observe(usage(model=SONNET, input_tokens=10, output_tokens=1, cost_usd=0.01))
    assert first == used(SONNET, input_tokens=1000, output_tokens=200,
                          cache_read_tokens=3000, cache_write_tokens=400, cost_usd=0.05)
    assert second == used(SONNET, input_tokens=10, output_tokens=1, cost_usd=0.01)
    assert totals(meter) == {"input_tokens": 1010, "output_tokens": 201,
                            "cache_read_tokens": 3000, "cache_write_tokens": 400}
    assert meter.totals.total == meter.live_tokens == 4611
    assert meter.cost_usd == pytest.approx(0.06)
    assert meter.live_cost_usd == pytest.approx(0.06)
    assert meter.cost_complete
    assert meter.finish() == ()


def test_native_ignores_other_lines() -> None:
    meter = UsageMeter("native", SONNET)
    for data in ({"type": "step", "input_tokens": 5}, {"input_tokens": 5}, {"type": "result",
                 "total_cost_usd": 1.0, "usage": {"input_tokens": 5}}):
        assert meter.observe(data) == ()
    assert meter.totals.total == 0 and meter.cost_usd == 0.0 and meter.cost_complete


def test_native_missing_fields_count_zero() -> None:
    meter = UsageMeter("native", None)
    (got,) = meter.observe(usage(model=SONNET, output_tokens=7))
    assert got.tokens == TokenCounts(output_tokens=7)
    assert got.cost_usd == pytest.approx(7 * 15 / 1e6)


@pytest.mark.parametrize("bad", [-5, True, "100", None, [1], {"n": 1}])
def test_native_garbage_token_counts_are_zero(bad: Any) -> None:
    meter = UsageMeter("native", SONNET)
    (got,) = meter.observe(usage(input_tokens=bad, output_tokens=2))
    assert got.tokens == TokenCounts(output_tokens=2)


def test_native_missing_cost_is_priced_from_the_rate_card() -> None:
    meter = UsageMeter("native", None)
    (got,) = meter.observe(usage(model=SONNET, input_tokens=1_000_000, output_tokens=1_000_000,
                                 cache_read_tokens=1_000_000, cache_write_tokens=1_000_000))
    # claude-sonnet-4-5: $3 in, $15 out, $0.30 cache read, $3.75 cache write per million
    assert got.cost_usd == pytest.approx(3 + 15 + 0.30 + 3.75)
    assert meter.cost_usd == pytest.approx(22.05) and meter.cost_complete


def test_native_line_without_model_uses_the_task_model() -> None:
    meter = UsageMeter("native", "openai/gpt-4o-2024-08-06")
    (got,) = meter.observe(usage(input_tokens=1_000_000))
    assert got.model == "openai/gpt-4o-2024-08-06"
    assert got.cost_usd == pytest.approx(2.50)
    # a model that is not text is ignored in favour of the task's
    (got,) = meter.observe(usage(model=42, output_tokens=1_000_000))
    assert got.model == "openai/gpt-4o-2024-08-06"
    assert got.cost_usd == pytest.approx(10.0)


@pytest.mark.parametrize("cost", [-0.5, True, "0.3", None, 1e308, float("inf")])
def test_native_unusable_cost_is_priced_instead(cost: Any) -> None:
    meter = UsageMeter("native", SONNET)
    (got,) = meter.observe(usage(input_tokens=1_000_000, cost_usd=cost))
    assert got.cost_usd == pytest.approx(3.0)


def test_native_reported_cost_wins_over_the_rate_card() -> None:
    meter = UsageMeter("native", SONNET)
    (got,) = meter.observe(usage(input_tokens=1_000_000, cost_usd=0))
    assert got.cost_usd == 0.0
    (got,) = meter.observe(usage(model="unknown-model", input_tokens=10, cost_usd=1))
    assert got.cost_usd == 1.0 and isinstance(got.cost_usd, float)
    assert meter.cost_complete


def test_native_unknown_model_is_unpriced_never_zero() -> None:
    meter = UsageMeter("native", None)
    (priced,) = meter.observe(usage(model=SONNET, input_tokens=1_000_000))
    (unpriced,) = meter.observe(usage(model="mystery-9", input_tokens=500, output_tokens=5))
    (no_model,) = meter.observe(usage(input_tokens=1))
    assert priced.cost_usd == pytest.approx(3.0)
    assert unpriced.cost_usd is None
    assert no_model.cost_usd is None and no_model.model is None
    assert meter.cost_complete is False
    assert meter.cost_usd == pytest.approx(3.0)  # the priced part: a floor
    assert meter.totals.input_tokens == 1_000_501


def test_native_no_tokens_of_an_unknown_model_costs_nothing() -> None:
    meter = UsageMeter("native", "mystery-9")
    (got,) = meter.observe(usage())
    assert got.cost_usd == 0.0
    assert meter.cost_complete


def test_native_model_added_to_the_card_is_priced() -> None:
    card = DEFAULT_RATES.with_rate("acme/house-model-v2", Rate(input=1, output=2))
    meter = UsageMeter("native", None, card)
    (got,) = meter.observe(usage(model="acme/house-model-v2", input_tokens=1_000_000,
                                 output_tokens=500_000))
    assert got.cost_usd == pytest.approx(2.0)


# -- claude-code ---------------------------------------------------------------------------

MODEL = "claude-sonnet-4-5-20250929"


def init(model: str = MODEL) -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "model": model, "session_id": "s"}


def assistant(msg_id: str | None, model: str | None = MODEL, **raw: int) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "message", "role": "assistant", "content": [],
                               "usage": raw}
    if msg_id is not None:
        message["id"] = msg_id
    if model is not None:
        message["model"] = model
    return {"type": "assistant", "message": message, "session_id": "s"}


def result(cost: Any = 0.0123, **raw: int) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "result", "subtype": "success", "is_error": False,
                            "usage": raw}
    if cost is not None:
        data["total_cost_usd"] = cost
    return data


def test_claude_code_assistant_messages_are_an_estimate_not_recorded() -> None:
    meter = UsageMeter("claude-code", None)
    assert meter.observe(init()) == ()
    assert meter.model == MODEL
    assert meter.observe(assistant("m1", input_tokens=10, output_tokens=5,
                                   cache_read_input_tokens=100,
                                   cache_creation_input_tokens=20)) == ()
    assert meter.totals.total == 0 and meter.totals.input_tokens == 0  # nothing accounted yet
    assert meter.live_tokens == 135
    assert meter.live_cost_usd == pytest.approx(
        price(MODEL, input_tokens=10, output_tokens=5, cache_read_tokens=100,
              cache_write_tokens=20)
    )


def test_claude_code_repeated_message_id_counts_its_last_report() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(assistant("m1", input_tokens=10, output_tokens=1))
    meter.observe(assistant("m1", input_tokens=10, output_tokens=50))  # same message, grown
    meter.observe(assistant("m2", input_tokens=3, output_tokens=7))
    assert meter.live_tokens == 10 + 50 + 3 + 7
    (estimate,) = meter.finish()
    assert estimate == used(MODEL, input_tokens=13, output_tokens=57, estimate=True,
                            cost_usd=price(MODEL, input_tokens=13, output_tokens=57))
    assert totals(meter) == {"input_tokens": 13, "output_tokens": 57, "cache_read_tokens": 0,
                            "cache_write_tokens": 0}
    assert meter.cost_complete is False  # an estimate is a floor
    assert meter.finish() == ()  # recorded once


def test_claude_code_messages_without_id_each_count() -> None:
    meter = UsageMeter("claude-code", MODEL)
    meter.observe(assistant(None, input_tokens=1))
    meter.observe(assistant(None, input_tokens=2))
    assert meter.live_tokens == 3


def test_claude_code_result_gives_the_totals() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(assistant("m1", input_tokens=999, output_tokens=999))
    (got,) = meter.observe(result(0.0123, input_tokens=10, output_tokens=160,
                                  cache_read_input_tokens=29000, cache_creation_input_tokens=5300))
    assert got == used(MODEL, input_tokens=10, output_tokens=160,
                        cache_read_tokens=29000, cache_write_tokens=5300, cost_usd=0.0123)
    assert totals(meter) == {"input_tokens": 10, "output_tokens": 160,
                            "cache_read_tokens": 29000, "cache_write_tokens": 5300}
    assert meter.cost_usd == 0.0123 and meter.cost_complete
    assert meter.live_tokens == meter.totals.total == 34_470  # the estimate is gone
    assert meter.finish() == ()


def test_claude_code_second_session_is_not_double_counted() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(assistant("s1-m1", input_tokens=100))
    assert len(meter.observe(result(None, input_tokens=100))) == 1
    meter.observe(init())
    meter.observe(assistant("s2-m1", input_tokens=1000))  # then cut off: no result line
    meter.finish()
    assert meter.totals.input_tokens == 100 + 1000


def test_claude_code_result_without_cost_is_priced() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    (got,) = meter.observe(result(None, input_tokens=1_000_000, output_tokens=1_000_000))
    assert got.cost_usd == pytest.approx(18.0)


def test_claude_code_unknown_model_is_unpriced() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init("some-future-model"))
    (got,) = meter.observe(result(None, input_tokens=100))
    assert got.cost_usd is None
    assert meter.cost_complete is False


def test_claude_code_estimate_for_an_unknown_model_is_unpriced() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(assistant("m1", model=None, input_tokens=100))
    assert meter.live_cost_usd == 0.0
    (estimate,) = meter.finish()
    assert estimate.model is None and estimate.cost_usd is None
    assert meter.cost_complete is False
    assert meter.totals.input_tokens == 100


def test_claude_code_message_model_overrides_the_init_model() -> None:
    meter = UsageMeter("claude-code", "task-model")
    meter.observe(init("claude-haiku-4-5"))
    meter.observe(assistant("m1", model="claude-opus-4-5", output_tokens=1_000_000))
    (estimate,) = meter.finish()
    assert estimate.model == "claude-opus-4-5"
    assert estimate.cost_usd == pytest.approx(25.0)


def test_claude_code_ignores_native_lines_and_malformed_messages() -> None:
    meter = UsageMeter("claude-code", MODEL)
    assert meter.observe(usage(input_tokens=5)) == ()
    assert meter.observe({"type": "assistant", "message": "text"}) == ()
    assert meter.observe({"type": "assistant", "message": {"id": "m", "usage": [1]}}) == ()
    assert meter.observe({"type": "user", "message": {"usage": {"input_tokens": 9}}}) == ()
    assert meter.live_tokens == 0
    assert meter.finish() == ()


def test_claude_code_result_with_garbage_usage() -> None:
    meter = UsageMeter("claude-code", MODEL)
    (got,) = meter.observe({"type": "result", "total_cost_usd": 0.2, "usage": "n/a"})
    assert got == used(MODEL, cost_usd=0.2)


# -- claude-code: several models ---------------------------------------------------------

HAIKU = "claude-haiku-4-5-20251001"


def model_usage(cost: Any, **models: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code 2.x result line: ``modelUsage`` keyed by model name."""
    data = result(cost, input_tokens=1, output_tokens=1)
    data["modelUsage"] = models
    return data


def entry(cost: Any = None, **tokens: int) -> dict[str, Any]:
    """One model's entry, camelCase as the CLI writes it."""
    data: dict[str, Any] = {"inputTokens": 0, "outputTokens": 0, "cacheReadInputTokens": 0,
                            "cacheCreationInputTokens": 0, "webSearchRequests": 0,
                            "contextWindow": 200000, **tokens}
    if cost is not None:
        data["costUSD"] = cost
    return data


def test_claude_code_estimate_is_kept_per_model() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(assistant("m1", input_tokens=10, output_tokens=5))
    meter.observe(assistant("h1", model=HAIKU, input_tokens=1000, output_tokens=1))
    meter.observe(assistant("h1", model=HAIKU, input_tokens=1000, output_tokens=50))  # grown
    meter.observe(assistant("m2", output_tokens=7))
    assert meter.live_tokens == 10 + 5 + 1000 + 50 + 7
    main = price(MODEL, input_tokens=10, output_tokens=12)
    small = price(HAIKU, input_tokens=1000, output_tokens=50)
    assert main is not None and small is not None
    assert meter.live_cost_usd == pytest.approx(main + small)
    assert meter.finish() == (
        used(MODEL, main, estimate=True, input_tokens=10, output_tokens=12),
        used(HAIKU, small, estimate=True, input_tokens=1000, output_tokens=50),
    )
    assert meter.live_tokens == meter.totals.total == 1072
    assert meter.cost_usd == pytest.approx(main + small) and meter.cost_complete is False


def test_claude_code_model_usage_gives_one_usage_per_model() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(assistant("m1", input_tokens=999))  # an estimate the result replaces
    got = meter.observe(model_usage(
        0.013645,
        **{MODEL: entry(0.01161, inputTokens=9, outputTokens=774, cacheReadInputTokens=36391,
                        cacheCreationInputTokens=12871),
           HAIKU: entry(0.0020350000000000004, outputTokens=407)}))
    assert [(u.model, u.tokens.total, u.estimate) for u in got] == [
        (MODEL, 9 + 774 + 36391 + 12871, False), (HAIKU, 407, False)]
    assert got[0].tokens.cache_write_tokens == 12871
    # The float sum of the two costs is one rounding step off the total: the model
    # that cost most takes the difference, so what is booked adds up to the total.
    assert 0.01161 + 0.0020350000000000004 != 0.013645
    assert got[0].cost_usd == pytest.approx(0.01161, abs=1e-15)
    assert got[1].cost_usd == 0.0020350000000000004
    assert meter.cost_usd == 0.013645 and meter.cost_complete
    assert meter.models_used == {MODEL, HAIKU}
    assert meter.finish() == ()


def test_claude_code_per_model_costs_that_disagree_with_the_total_are_kept() -> None:
    meter = UsageMeter("claude-code", None)
    got = meter.observe(model_usage(0.5, **{MODEL: entry(0.25, outputTokens=1),
                                            HAIKU: entry(0.125, outputTokens=1)}))
    assert [u.cost_usd for u in got] == [0.25, 0.125]


def test_claude_code_model_usage_without_a_cost_is_priced_per_model() -> None:
    meter = UsageMeter("claude-code", None)
    got = meter.observe(model_usage(0.9, **{MODEL: entry(None, inputTokens=1_000_000),
                                            "mystery-model": entry(None, inputTokens=5),
                                            HAIKU: entry(float("inf"), outputTokens=1_000_000)}))
    assert [u.model for u in got] == [MODEL, "mystery-model", HAIKU]
    assert got[0].cost_usd == pytest.approx(3.0)
    assert got[1].cost_usd is None
    assert got[2].cost_usd == pytest.approx(price(HAIKU, output_tokens=1_000_000))
    assert meter.cost_complete is False


@pytest.mark.parametrize("raw", [{}, [], "n/a", {"": {"inputTokens": 5}, MODEL: 3}])
def test_claude_code_without_usable_model_usage_books_the_totals_as_before(raw: Any) -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    data = {**result(0.2, input_tokens=10), "modelUsage": raw}
    assert meter.observe(data) == (used(MODEL, 0.2, input_tokens=10),)


# -- pricing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("openai/gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("vertex_ai/claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("eu.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("  Claude-Opus-4-1  ", "claude-opus-4-1"),
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-5", "gpt-5"),
        ("o4-mini", "o4-mini"),
        ("gemini-2.5-pro", "gemini-2.5-pro"),
    ],
)
def test_normalize_model(name: str, key: str) -> None:
    assert normalize_model(name) == key
    # Priced as the name it normalises to, by the maintained card.
    assert price(name, input_tokens=1000) == price(key, input_tokens=1000) is not None


def test_rate_for_nothing() -> None:
    assert rate_for(None) is None
    assert rate_for("") is None
    assert rate_for("no-such-model") is None


def test_price() -> None:
    """By genai-prices' card (list prices per million tokens; Sonnet 4.5's double past
    200,000 prompt tokens in one call, but a usage may sum several calls: its base
    tier)."""
    assert price(SONNET, input_tokens=100_000) == pytest.approx(0.30)
    assert price(SONNET, output_tokens=200_000) == pytest.approx(3.0)
    assert price(SONNET, cache_read_tokens=100_000) == pytest.approx(0.030)
    assert price(SONNET, cache_write_tokens=100_000) == pytest.approx(0.375)
    assert price(SONNET, input_tokens=300_000) == pytest.approx(0.9)  # the base tier
    # no cache-write price: the input price applies
    assert price("gpt-4o", cache_write_tokens=1_000_000) == pytest.approx(2.50)
    assert price("gpt-4o", cache_read_tokens=1_000_000) == pytest.approx(1.25)
    assert price("unknown", input_tokens=1) is None
    assert price(None, input_tokens=1) is None
    assert price("unknown") == 0.0 and price(None) == 0.0  # nothing used costs nothing


def test_with_rate_then_price() -> None:
    rate = Rate(input=1, output=4, cache_read=0.1)
    card = DEFAULT_RATES.with_rate("acme/widget-20250101", rate)
    assert card.rate_for("widget") == rate
    assert price("widget", card, input_tokens=1_000_000,
                 cache_read_tokens=1_000_000) == pytest.approx(1.1)


def test_the_same_rate_twice_is_fine() -> None:
    card = (DEFAULT_RATES.with_rate("widget", Rate(input=1, output=2))
            .with_rate("provider/widget", Rate(input=1.0, output=2.0))
            .with_rate(SONNET, Rate(input=3, output=15))
            .with_rate("anthropic/" + SONNET, Rate(input=3.0, output=15.0)))
    assert card.rate_for("widget") == Rate(input=1, output=2)


def test_a_different_rate_conflicts() -> None:
    card = DEFAULT_RATES.with_rate("widget", Rate(input=1, output=2))
    with pytest.raises(PricingConflict, match="widget"):
        card.with_rate("widget", Rate(input=1, output=3))
    with pytest.raises(PricingConflict, match="claude-sonnet-4-5"):
        card.with_rate(SONNET, Rate(input=3, output=15)).with_rate(
            "anthropic/claude-sonnet-4-5", Rate(input=30, output=150))
    assert issubclass(PricingConflict, ValueError)
    assert card.rate_for("widget") == Rate(input=1, output=2)  # the first one stays
    # A rate given over the maintained card's is no conflict: it is what a file is for.
    assert card.with_rate(SONNET, Rate(input=30, output=150)).rate_for(SONNET) == Rate(
        input=30, output=150)


def test_adding_rates_leaves_the_card_it_came_from_alone() -> None:
    card = DEFAULT_RATES.with_rate("widget", Rate(input=1, output=2))
    assert card != DEFAULT_RATES
    assert DEFAULT_RATES.rate_for("widget") is None
    assert DEFAULT_RATES == RateCard({}) == RateCard()


def test_unpriced_names_each_model_without_a_rate_once() -> None:
    assert DEFAULT_RATES.unpriced(["mystery", SONNET, None, "", "mystery", "alpha"]) == [
        "alpha", "mystery"]


def test_with_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(
        "house-model:\n  input: 0.5\n  output: 1.5\n"
        "bedrock/us.acme.other-model-v1:0: {input: 2, output: 8, cache_read: 0.2,"
        " cache_write: 2.5}\n"
        "claude-sonnet-4-5: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.30}\n"
    )
    card = DEFAULT_RATES.with_file(path)
    assert card.rate_for("house-model") == Rate(input=0.5, output=1.5)
    # the region prefix and version suffix go, an unknown vendor prefix stays
    assert normalize_model("bedrock/us.acme.other-model-v1:0") == "acme.other-model"
    assert card.rate_for("bedrock/us.acme.other-model-v1:0") == Rate(
        input=2, output=8, cache_read=0.2, cache_write=2.5
    )
    assert price("house-model", card, input_tokens=2_000_000) == pytest.approx(1.0)


def test_a_pricing_file_overrides_a_built_in_rate(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("anthropic/claude-sonnet-4-5: {input: 1, output: 1}\n")
    card = DEFAULT_RATES.with_file(path)
    assert card.rate_for(SONNET) == Rate(input=1, output=1)
    assert price(SONNET, card, input_tokens=1_000_000) == pytest.approx(1.0)
    assert rate_for(SONNET) is None  # the default card gives no rate of its own
    assert price(SONNET, input_tokens=100_000) == pytest.approx(0.30)  # the maintained


def test_a_pricing_file_that_prices_one_model_twice_differently_conflicts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("house: {input: 1, output: 1}\nacme/house-20250101: {input: 2, output: 1}\n")
    with pytest.raises(PricingConflict, match=r"prices\.yaml"):
        DEFAULT_RATES.with_file(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("house: {input: -1, output: 1}\n", "house"),
        ("house: {input: 1}\n", "house"),
        ("house: {input: 1, output: 1, extra: 2}\n", "house"),
        ("- a\n- b\n", "expected a mapping"),
        ("house: [unclosed\n", "prices.yaml"),
    ],
)
def test_with_file_errors(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        DEFAULT_RATES.with_file(path)
    assert not isinstance(info.value, PricingConflict)
    assert "prices.yaml" in str(info.value)
    assert rate_for("house") is None


def test_with_file_missing_or_empty(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pricing file"):
        DEFAULT_RATES.with_file(tmp_path / "nope.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert DEFAULT_RATES.with_file(empty) == DEFAULT_RATES


def test_claude_code_each_result_line_counts() -> None:
    # A command that runs the CLI twice (plan, then implement) reports two results.
    meter = UsageMeter("claude-code", None)
    (first,) = meter.observe({"type": "result", "total_cost_usd": 0.5,
                              "usage": {"input_tokens": 10}})
    (second,) = meter.observe({"type": "result", "total_cost_usd": 0.7,
                               "usage": {"input_tokens": 20}})
    assert (first.cost_usd, second.cost_usd) == (0.5, 0.7)
    assert meter.finish() == ()
    assert meter.cost_usd == pytest.approx(1.2) and meter.cost_complete
    assert meter.totals.input_tokens == 30


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("deepseek-v3", "deepseek-v3"),
        ("llama3-70b-v1", "llama3-70b-v1"),
        ("bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
    ],
)
def test_version_numbers_in_names_are_kept(name: str, key: str) -> None:
    assert normalize_model(name) == key


# -- what the transcript says about the agent ------------------------------------------------


def test_version_lines_and_the_models_used_are_noted() -> None:
    meter = UsageMeter("native", "task-model")
    assert meter.observe({"type": "version", "my-agent": "1.4.2", "sdk": "0.9",
                          "type_extra": 3, "evalledger": "spoofed", "model": "m"}) == ()
    meter.observe(usage(model=SONNET, input_tokens=1))
    meter.observe(usage(input_tokens=1))  # no model: the task's
    assert meter.versions == {"my-agent": "1.4.2", "sdk": "0.9"}  # text only, not ours
    assert meter.models_used == {SONNET, "task-model"}


def test_claude_codes_init_line_states_its_version_and_messages_their_model() -> None:
    meter = UsageMeter("claude-code", None)
    meter.observe({**init(), "claude_code_version": "2.0.14"})
    meter.observe(assistant("m1", model="claude-haiku-4-5", input_tokens=1))
    meter.observe(assistant("m2", input_tokens=1))
    assert meter.versions == {"claude_code_version": "2.0.14"}
    assert meter.models_used == {"claude-haiku-4-5", MODEL}


# -- claude-code: partial messages (--include-partial-messages) ---------------------------------


def stream_event(event: dict[str, Any], *, parent: str | None = None,
                 message_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "stream_event", "event": event, "session_id": "s",
                            "parent_tool_use_id": parent}
    if message_id is not None:
        data["api_message_id"] = message_id
    return data


def message_start(msg_id: str, model: str = MODEL, **raw: int) -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": msg_id, "model": model,
                                                  "usage": {"output_tokens": 1, **raw}}}


def message_delta(output: int) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": output}}


@pytest.mark.parametrize("named", [False, True], ids=["cli-2.1.197", "api_message_id"])
def test_claude_code_message_delta_gives_each_message_its_real_output(named: bool) -> None:
    """The assistant line repeats its start's output (1); the message's message_delta,
    matched by api_message_id or as its thread's last started message, has the real
    count. A subagent's message (another thread) interleaved keeps its own."""
    meter = UsageMeter("claude-code", None)
    meter.observe(init())
    meter.observe(stream_event(message_start("m1", input_tokens=4, cache_write_input_tokens=0)))
    meter.observe(stream_event(message_start("h1", HAIKU, input_tokens=143), parent="toolu_1"))
    meter.observe(assistant("m1", input_tokens=4, output_tokens=1))
    meter.observe(stream_event(message_delta(87), message_id="m1" if named else None))
    meter.observe(stream_event(message_delta(7), parent="toolu_1",
                               message_id="h1" if named else None))
    assert meter.live_tokens == 4 + 87 + 143 + 7
    main, small = meter.finish()
    assert (main.model, main.tokens.output_tokens) == (MODEL, 87)
    assert (small.model, small.tokens) == (HAIKU, TokenCounts(input_tokens=143, output_tokens=7))
    assert meter.cost_complete is False  # an estimate, however exact: a floor


def test_claude_code_a_message_counts_are_its_largest_reports_in_any_order() -> None:
    in_order, shuffled = UsageMeter("claude-code", None), UsageMeter("claude-code", None)
    lines = [stream_event(message_start("m1", input_tokens=10)),
             assistant("m1", input_tokens=10, output_tokens=1),
             stream_event(message_delta(50))]
    for line in lines:
        in_order.observe(line)
    for line in (lines[0], lines[2], lines[1]):
        shuffled.observe(line)
    assert in_order.live_tokens == shuffled.live_tokens == 60


# -- no silent zero ---------------------------------------------------------------------------


def test_native_reading_an_agent_stream_books_its_cost_unknown() -> None:
    meter = UsageMeter("native", SONNET)
    assert meter.observe(init()) == ()  # an init line reports no spend: not yet
    assert meter.unread_format is None
    assert meter.observe(assistant("m1", input_tokens=10, output_tokens=5)) == ()
    assert meter.unread_format == "claude-code"
    assert meter.finish() == (used(SONNET, None, estimate=True),)
    assert meter.cost_complete is False and meter.finish() == ()


def test_native_lines_shaped_like_an_agent_but_reporting_no_spend_are_not_unread() -> None:
    """The smoke example's agent prints {"type": "tool_use", ...} (Gemini CLI's shape)
    beside its own usage lines: nothing of its spend is unread."""
    meter = UsageMeter("native", SONNET)
    meter.observe({"type": "tool_use", "tool": "write_file", "path": "add.py"})
    meter.observe({"type": "error", "message": "a log line"})
    meter.observe(usage(input_tokens=10, output_tokens=5))
    assert meter.unread_format is None and meter.finish() == () and meter.cost_complete


def test_owed_is_the_estimate_the_recorded_lines_show() -> None:
    """A lost attempt's lines: what was reported (the first session's result) is not
    owed again; the messages after it are."""
    lines = [init(), assistant("m1", input_tokens=10, output_tokens=5),
             result(0.01, input_tokens=10, output_tokens=5),
             assistant("m2", input_tokens=3, output_tokens=1)]
    (estimate,) = owed({"stream_format": "claude-code"}, lines)
    assert estimate == used(MODEL, price(MODEL, input_tokens=3, output_tokens=1),
                            estimate=True, input_tokens=3, output_tokens=1)
    assert owed({}, [usage(input_tokens=5)]) == ()


def test_claude_code_context_suffix_prices_as_its_model() -> None:
    assert normalize_model("claude-opus-4-8[1m]") == "claude-opus-4-8"
    rate_of = DEFAULT_RATES.rate_of
    assert rate_of("claude-opus-4-8[1m]") == rate_of("claude-opus-4-8") is not None


def test_claude_code_a_second_result_of_one_session_books_what_is_new() -> None:
    """Both pinned CLIs print a second result line when they take another turn after
    their result (a background command ended): its totals are the process's so far."""
    meter = UsageMeter("claude-code", None)

    def said(cost: float, tokens: int, session: str = "s1") -> dict[str, Any]:
        return {"type": "result", "session_id": session, "total_cost_usd": cost,
                "modelUsage": {MODEL: {"inputTokens": tokens, "costUSD": cost}}}

    (first,) = meter.observe(said(0.003, 300))
    (second,) = meter.observe(said(0.0045, 450))
    assert (first.tokens.input_tokens, second.tokens.input_tokens) == (300, 150)
    assert second.cost_usd == pytest.approx(0.0015)
    assert meter.observe(said(0.0045, 450)) == ()  # the same totals again: nothing new
    (other,) = meter.observe(said(0.002, 200, session="s2"))  # another process
    assert other.tokens.input_tokens == 200
    (resumed,) = meter.observe(said(0.001, 100))  # s1 again, lower: a new process
    assert resumed.tokens.input_tokens == 100
    assert meter.totals.input_tokens == 300 + 150 + 200 + 100


def test_only_a_context_size_suffix_is_dropped() -> None:
    assert normalize_model("claude-opus-4-8[1m]") == "claude-opus-4-8"
    assert normalize_model("my-model[v2]") == "my-model[v2]"  # a name, not a context size


def test_models_the_hand_written_card_lacked_are_priced_by_the_maintained_one() -> None:
    """#47: gpt-5-codex was unpriced (its cost unknown) on the hand-written card."""
    assert DEFAULT_RATES.unpriced(["gpt-5-codex", "gpt-5.1-codex", "no-such-model"]) == [
        "no-such-model"]
    assert price("gpt-5-codex", input_tokens=1_000_000) == pytest.approx(1.25)


def test_costs_a_command_says_that_would_sum_past_any_float_leave_a_ledger_that_verifies(
        tmp_path: Path) -> None:
    """Two usage lines of $1e308 made the run's cost inf, which its snapshot (JSON)
    could hold only as null: verify then failed the ledger for good, and resume could
    not mend it. A cost that large is no cost reported: priced from the rate card."""
    from tests.cli.helpers import evalledger, write_tasks

    line = ('{"type":"usage","model":"claude-sonnet-4-5","input_tokens":1000000,'
            '"cost_usd":1e308}')
    tasks = write_tasks(tmp_path / "tasks", {"spends": {
        "command": f"echo '{line}'; echo '{line}'",
        "success_criteria": [{"type": "exit_code"}]}})
    db = tmp_path / "l.db"
    done = evalledger(tmp_path, db, "run", str(tasks))
    assert done.returncode == 0, done.stdout + done.stderr
    assert evalledger(tmp_path, db, "verify").returncode == 0
    shown = evalledger(tmp_path, db, "show", "latest", "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["total_cost_usd"] == pytest.approx(6.0)  # 2 x $3/M
