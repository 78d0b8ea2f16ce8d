"""Real prices: published ones for known models, the user's first, cached input
billed at its rate, tiers by prompt size; a reasoning model within its budget."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestra import Limits, OpenAIProvider, Price, PriceTable, PriceTier, Runner, Status
from orchestra._money import from_usd
from orchestra._prices import published_price
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._recipes.money import SCRIPTED_PRICE
from orchestra.testing import ScriptedTransport

pytest.importorskip("genai_prices")


def test_a_known_model_has_its_published_price_and_no_warning() -> None:
    price = PriceTable()["gpt-4.1-mini"]
    assert (price.input_per_million, price.output_per_million) == (0.40, 1.60)
    assert price.cached_input_per_million == 0.10
    assert price.source.startswith("genai-prices ") and price.source.endswith("openai gpt-4.1-mini")
    assert PriceTable().warning("gpt-4.1-mini", budgeted=True) is None


def test_the_endpoint_picks_the_provider_and_the_user_s_price_wins() -> None:
    groq = PriceTable().price("llama-3.3-70b-versatile", endpoint="https://api.groq.com/openai/v1")
    assert groq.source.endswith("groq llama-3.3-70b-versatile")
    given = Price(input_per_million=9, output_per_million=9, source="given")
    assert PriceTable(models={"gpt-4.1-mini": given})["gpt-4.1-mini"] is given
    assert PriceTable(default=given, published=False)["gpt-4.1-mini"] is given


def test_an_unknown_model_keeps_the_assumed_default_and_its_warning() -> None:
    table = PriceTable()
    assert table["my-local-model"] is table.default
    said = table.warning("my-local-model", budgeted=False)
    assert said is not None and "no price for model 'my-local-model'" in said
    assert published_price("my-local-model", "http://127.0.0.1:8080/v1") is None


def test_tiers_come_through_and_bill_every_token_of_a_long_call() -> None:
    price = PriceTable()["gemini-2.5-pro"]
    (tier,) = price.tiers
    assert tier.from_prompt_tokens == 200_000 and tier.input_per_million > price.input_per_million
    short = price.cost(199_999, 1_000)
    long = price.cost(200_000, 1_000)
    assert short == 199_999 * price.input_pico + 1_000 * price.output_pico
    assert (
        long
        == 200_000 * from_usd(tier.input_per_million) // 10**6
        + 1_000 * from_usd(tier.output_per_million) // 10**6
    )


def test_cached_input_is_billed_at_its_rate() -> None:
    price = Price(input_per_million=2, output_per_million=8, cached_input_per_million=0.5)
    assert (
        price.cost(1_000, 100, cached_tokens=600)
        == 400 * 2_000_000 + 600 * 500_000 + 100 * 8_000_000
    )
    assert price.cost(1_000, 100, cached_tokens=5_000) == price.cost(
        1_000, 100, cached_tokens=1_000
    )
    assert Price().cost(1_000, 0, cached_tokens=600) == Price().cost(1_000, 0)  # no cached rate


def test_a_reservation_assumes_the_dearest_tier_it_may_reach() -> None:
    cheaper_long = Price(
        input_per_million=4,
        output_per_million=10,
        tiers=[PriceTier(from_prompt_tokens=100, input_per_million=1, output_per_million=1)],
    )
    # the call may come back shorter than reserved, at the dearer short rate
    assert cheaper_long.reserved(150, 10) == 150 * 4_000_000 + 10 * 10_000_000
    assert cheaper_long.cost(150, 10) < cheaper_long.reserved(150, 10)
    assert cheaper_long.cost(99, 10) <= cheaper_long.reserved(150, 10)


# -- replies that report cached and reasoning tokens ---------------------------------------


def scripted_runner(events: list[Any] | None = None, prices: PriceTable | None = None) -> Runner:
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    table = prices or PriceTable(default=SCRIPTED_PRICE, published=False)
    return Runner(provider=provider, prices=table, sink=None if events is None else events.append)


async def test_a_reasoning_run_costs_what_the_provider_bills(sandbox) -> None:
    events: list[Any] = []
    result = await scripted_runner(events).run(demo_agent("reasoning", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED and result.answer.startswith("errors.log mentions")
    own = result.state.own
    assert own.reasoning_tokens == 3 * 300 and own.cached_input_tokens > 0
    turns = [e.data for e in events if e.type == "turn"]
    billed = sum(
        SCRIPTED_PRICE.cost(t["prompt_tokens"], t["completion_tokens"], t["cached_input_tokens"])
        for t in turns
    )
    assert own.cost_pico == billed  # cached input at $0.50, reasoning as output
    uncached = sum(SCRIPTED_PRICE.cost(t["prompt_tokens"], t["completion_tokens"]) for t in turns)
    assert billed < uncached
    assert sum(t["reasoning_tokens"] for t in turns) == own.reasoning_tokens


async def test_cached_and_reasoning_tokens_roll_up_the_tree_exactly(sandbox) -> None:
    result = await scripted_runner().run(demo_agent("research", sandbox), demo_task("research"))
    assert result.status is Status.COMPLETED
    for run in result.walk():
        state = run.state
        kids = [c.state.tree for c in run.children]
        assert state.tree.cached_input_tokens == state.own.cached_input_tokens + sum(
            k.cached_input_tokens for k in kids
        )


class Recorder(httpx.AsyncBaseTransport):
    """The scripted provider, keeping each request body."""

    def __init__(self) -> None:
        self.inner = ScriptedTransport()
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return await self.inner.handle_async_request(request)


async def test_a_model_that_refuses_max_tokens_is_asked_with_max_completion_tokens(sandbox):
    recorder = Recorder()
    provider = OpenAIProvider(base_url="http://127.0.0.1:1/v1", api_key="k", transport=recorder)
    runner = Runner(provider=provider, prices=PriceTable(default=SCRIPTED_PRICE, published=False))
    result = await runner.run(demo_agent("reasoning", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED and result.state.own.model_calls == 3
    caps = [("max_tokens" in b, "max_completion_tokens" in b) for b in recorder.bodies]
    assert caps == [(True, False), (False, True), (False, True), (False, True)]  # refused once


def test_openai_s_api_gets_max_completion_tokens_and_others_max_tokens() -> None:
    assert OpenAIProvider(base_url="https://api.openai.com/v1").cap_field("gpt-5") == (
        "max_completion_tokens"
    )
    assert OpenAIProvider(base_url="http://127.0.0.1:8080/v1").cap_field("qwen") == "max_tokens"
    forced = OpenAIProvider(base_url="http://127.0.0.1:8080/v1", cap_field="max_completion_tokens")
    assert forced.cap_field("qwen") == "max_completion_tokens"


async def test_fifty_budgets_against_a_reasoning_model_none_over(sandbox) -> None:
    price = Price(input_per_million=2, output_per_million=12, cached_input_per_million=0.5)
    runner = scripted_runner(prices=PriceTable(default=price, published=False))
    agent = demo_agent("reasoning", sandbox)
    over, stopped = 0, 0
    for i in range(50):
        budget = 0.002 + i * 0.0003  # from too little for a step to enough for the answer
        result = await runner.run(
            agent, demo_task("plan"), limits=Limits(max_turns=20, max_budget_usd=budget)
        )
        over += result.state.tree.cost_pico > from_usd(budget)
        stopped += result.status is Status.BUDGET_EXCEEDED
    assert over == 0
    assert 0 < stopped < 50  # the sweep crosses the cost of the whole run
