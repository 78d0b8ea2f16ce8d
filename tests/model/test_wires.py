"""The same guarantees over every wire format: Chat Completions, Responses, Messages.

Each test runs the scripted scenarios through one provider per wire format
(the scripted transport answers each in its own format): trees complete and
are charged exactly what the server reported, a budget sweep goes 0 over, a
cut stream is charged once for what arrived, a Stop mid-stream keeps it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from orchestra import (
    Agent,
    AnthropicProvider,
    Event,
    Limits,
    OpenAIProvider,
    PriceTable,
    ResponsesProvider,
    Runner,
    Status,
)
from orchestra._model.provider import HTTPProvider
from orchestra._recipes.demo import RESEARCH_INSTRUCTIONS
from orchestra._recipes.money import SCRIPTED_PRICE
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, demo_tools

PRICES = PriceTable(default=SCRIPTED_PRICE, published=False)
WIRES: dict[str, Callable[..., HTTPProvider]] = {
    "chat": OpenAIProvider,
    "responses": ResponsesProvider,
    "anthropic": AnthropicProvider,
}


def provider_of(wire: str, transport: httpx.AsyncBaseTransport, **options: Any) -> HTTPProvider:
    make = WIRES[wire]
    return make(base_url="http://scripted.test/v1", api_key="k", transport=transport, **options)


class Recording(ScriptedTransport):
    """The scripted transport, keeping the usage each reply reported, in any wire format."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.usage: list[tuple[int, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        content = await response.aread()
        self.usage.append(reported(content))
        return httpx.Response(response.status_code, headers=response.headers, content=content)


def reported(content: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens a reply reported: a whole body, or the events of one."""
    text = content.decode()
    bodies = [json.loads(text)] if text.lstrip().startswith("{") else _event_data(text)
    prompt = completion = 0
    for body in bodies:
        usage = body.get("usage") or (body.get("message") or body.get("response") or {}).get(
            "usage"
        )
        if not usage:
            continue
        if "input_tokens" in usage:  # Messages and Responses: cache reads and writes apart
            cache = ("cache_read_input_tokens", "cache_creation_input_tokens")
            prompt = usage["input_tokens"] + sum(usage.get(k, 0) for k in cache)
        prompt = usage.get("prompt_tokens", prompt)
        completion = usage.get("completion_tokens", usage.get("output_tokens", completion))
    return prompt, completion


def totals(usage: list[tuple[int, int]]) -> tuple[int, int]:
    """(prompt, completion) tokens summed over replies."""
    return sum(p for p, _ in usage), sum(c for _, c in usage)


def _event_data(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line[6:].strip() != "[DONE]"
    ]


@pytest.fixture(params=list(WIRES))
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[True, False], ids=["streamed", "whole"])
async def recorded(wire: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    transport = Recording()
    provider = provider_of(wire, transport, stream=request.param)
    yield provider, transport
    await provider.aclose()


@pytest.mark.parametrize("scenario", ["plan", "research", "extract"])
async def test_a_tree_completes_charged_exactly_what_the_server_reported(
    recorded: Any, wire: str, sandbox: Path, scenario: str
) -> None:
    provider, transport = recorded
    via = "tool" if wire == "anthropic" else "response_format"  # Messages has no response_format
    agent = demo_agent(scenario, sandbox, output_via=via)
    result = await Runner(provider=provider, prices=PRICES).run(agent, demo_task(scenario))
    assert result.status is Status.COMPLETED, result.state.reason
    tree = result.state.tree
    prompt = sum(p for p, _ in transport.usage)
    completion = sum(c for _, c in transport.usage)
    assert (tree.prompt_tokens, tree.completion_tokens) == (prompt, completion)
    assert tree.cost_pico == SCRIPTED_PRICE.cost(prompt, completion)
    assert tree.model_calls == len(transport.usage)
    if scenario == "extract":
        assert result.output is not None and result.output.worker == 7


@pytest.mark.parametrize("budget", [0.0005 * k for k in range(1, 51)])
async def test_the_budget_sweep_goes_zero_over(wire: str, sandbox: Path, budget: float) -> None:
    provider = provider_of(wire, ScriptedTransport())
    try:
        result = await Runner(provider=provider, prices=PRICES).run(
            demo_agent("research", sandbox),
            demo_task("research"),
            limits=Limits(max_budget_usd=budget, max_turns=50),
        )
    finally:
        await provider.aclose()
    assert result.status in {Status.COMPLETED, Status.BUDGET_EXCEEDED}
    for run in result.walk():
        assert run.state.tree.cost_usd <= run.state.limits.max_budget_usd + 1e-12


async def test_a_stream_cut_midway_is_charged_and_asked_again(wire: str, sandbox: Path) -> None:
    events: list[Event] = []
    provider = provider_of(wire, ScriptedTransport())
    runner = Runner(provider=provider, prices=PRICES, sink=events.append)
    result = await runner.run(demo_agent("plan+cut3", sandbox), demo_task("plan"))
    await provider.aclose()
    assert result.status is Status.COMPLETED, result.state.reason
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    assert cut["tokens"] > 0 and cut["turn"] == 1
    turns = [e.data for e in events if e.type == "turn"]
    assert len(turns) == 3 and result.state.own.model_calls == 4  # the cut call is billed
    billed = sum(SCRIPTED_PRICE.cost(t["prompt_tokens"], t["completion_tokens"]) for t in turns)
    assert result.state.own.cost_pico > billed  # plus what arrived of the cut one


async def test_a_stop_mid_stream_charges_what_arrived(
    wire: str, sandbox: Path, autojump_clock: Any
) -> None:
    events: list[Event] = []
    provider = provider_of(wire, ScriptedTransport(chunk_s=1.0))
    runner = Runner(provider=provider, prices=PRICES, sink=events.append)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, demo_agent("plan", sandbox), demo_task("plan"))
        await trio.sleep(2.5)  # the first reply is streaming: a few pieces have come
        handle.cancel("Stop")
        stopped = await handle.wait()
    await provider.aclose()
    assert stopped.status is Status.INTERRUPTED
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    own = stopped.state.own
    assert own.model_calls == 1 and own.completion_tokens == cut["tokens"] > 0
    assert own.cost_pico == SCRIPTED_PRICE.cost(own.prompt_tokens, own.completion_tokens)


async def test_a_rate_limit_is_retried_after_the_time_it_asks(
    wire: str, sandbox: Path, autojump_clock: Any
) -> None:
    events: list[Event] = []
    provider = provider_of(wire, ScriptedTransport())
    runner = Runner(provider=provider, prices=PRICES, sink=events.append)
    result = await runner.run(demo_agent("plan+429", sandbox), demo_task("plan"))
    await provider.aclose()
    assert result.status is Status.COMPLETED, result.state.reason
    (retry,) = [e.data for e in events if e.type == "model_retry"]
    assert retry["wait_s"] >= 1.0  # the scripted 429 says retry-after: 1


async def test_one_tree_mixes_providers_and_rolls_spend_up_exactly(sandbox: Path) -> None:
    chat, messages = Recording(), Recording()
    runner = Runner(
        provider=provider_of("chat", chat),
        providers={"anthropic": provider_of("anthropic", messages)},
        prices=PRICES,
    )
    researcher = Agent(
        name="researcher",
        model="anthropic:researcher",  # asked through providers["anthropic"], as "researcher"
        instructions=RESEARCH_INSTRUCTIONS,
        tools=demo_tools(sandbox),
        limits=Limits(max_turns=8, max_budget_usd=0.05),
    )
    root = demo_agent("research", sandbox)
    tools = (*[t for t in root.tools if t.name != "research"], researcher.as_tool(name="research"))
    try:
        result = await runner.run(attrs.evolve(root, tools=tools), demo_task("research"))
    finally:
        for provider in (runner.provider, *runner.providers.values()):
            await provider.aclose()
    assert result.status is Status.COMPLETED, result.state.reason
    assert len(result.children) == 3 and len(chat.usage) == 2 and len(messages.usage) == 9
    root_own, kids = result.state.own, [c.state.own for c in result.children]
    assert (root_own.prompt_tokens, root_own.completion_tokens) == totals(chat.usage)
    said = (sum(k.prompt_tokens for k in kids), sum(k.completion_tokens for k in kids))
    assert said == totals(messages.usage)
    for own in (root_own, *kids):
        assert own.cost_pico == SCRIPTED_PRICE.cost(own.prompt_tokens, own.completion_tokens)
    assert result.state.tree.cost_pico == root_own.cost_pico + sum(k.cost_pico for k in kids)


async def test_cache_reads_and_writes_are_charged_each_at_its_rate(sandbox: Path) -> None:
    price = attrs.evolve(SCRIPTED_PRICE, cached_input_per_million=0.2, cache_write_per_million=2.5)
    prices = PriceTable(default=price, published=False)
    transport = Recording()
    provider = provider_of("anthropic", transport)
    runner = Runner(provider=provider, prices=prices)
    result = await runner.run(demo_agent("reasoning", sandbox), demo_task("plan"))
    await provider.aclose()
    assert result.status is Status.COMPLETED, result.state.reason
    own = result.state.own
    assert own.cached_input_tokens > 0 and own.cache_write_tokens > 0
    assert own.prompt_tokens == sum(p for p, _ in transport.usage)  # reads and writes included
    plain = own.prompt_tokens - own.cached_input_tokens - own.cache_write_tokens
    expected = (
        plain * price.input_pico
        + own.cached_input_tokens * price.cached_pico
        + own.cache_write_tokens * price.cache_write_pico
        + own.completion_tokens * price.output_pico
    )
    assert own.cost_pico == expected


def test_a_reservation_prices_every_prompt_token_as_a_possible_cache_write() -> None:
    price = attrs.evolve(SCRIPTED_PRICE, cache_write_per_million=2.5)
    assert price.reserved(1000, 100) == 1000 * price.cache_write_pico + 100 * price.output_pico
    assert price.cost(1000, 100, written_tokens=1000) == price.reserved(1000, 100)
    assert price.affordable_completion(price.reserved(1000, 100), 1000) == 100
