"""Anthropic's Messages API: requests translated, replies read back, every guarantee kept."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestra import (
    AnthropicProvider,
    ConfigError,
    Event,
    Limits,
    ModelSettings,
    PriceTable,
    Runner,
    Status,
)
from orchestra._model.anthropic import messages_body
from orchestra._model.provider import ChatRequest
from orchestra._recipes.money import SCRIPTED_PRICE
from orchestra.testing import ScriptedTransport, demo_agent, demo_task

PRICES = PriceTable(default=SCRIPTED_PRICE, published=False)


class Recording(ScriptedTransport):
    """The scripted transport, keeping each Messages request and the usage each reply reported."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.bodies: list[dict[str, Any]] = []
        self.usage: list[dict[str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(await request.aread()))
        response = await super().handle_async_request(request)
        content = await response.aread()
        self.usage.append(_usage_of(content))
        return httpx.Response(response.status_code, headers=response.headers, content=content)


def _usage_of(content: bytes) -> dict[str, int]:
    """The input and output tokens a reply (whole, or its events) reported."""
    text = content.decode()
    if not text.startswith("event:"):
        usage = json.loads(text).get("usage") or {}
        return {"input": usage.get("input_tokens", 0), "output": usage.get("output_tokens", 0)}
    said = {"input": 0, "output": 0}
    for line in text.splitlines():
        if line.startswith("data: "):
            data = json.loads(line[6:])
            if data["type"] == "message_start":
                said["input"] = data["message"]["usage"]["input_tokens"]
            if data["type"] == "message_delta":
                said["output"] = data["usage"]["output_tokens"]
    return said


@pytest.fixture(params=[True, False], ids=["streamed", "whole"])
async def wired(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[AnthropicProvider, Recording]]:
    transport = Recording()
    provider = AnthropicProvider(
        base_url="http://scripted.test/v1", api_key="k", transport=transport, stream=request.param
    )
    yield provider, transport
    await provider.aclose()


@pytest.mark.parametrize("scenario", ["plan", "research"])
async def test_a_tree_completes_and_is_charged_what_the_server_reported(
    wired: tuple[AnthropicProvider, Recording], sandbox: Path, scenario: str
) -> None:
    provider, transport = wired
    prices = PriceTable()
    result = await Runner(provider=provider, prices=prices).run(
        demo_agent(scenario, sandbox), demo_task(scenario)
    )
    assert result.status is Status.COMPLETED, result.state.reason
    assert all(b["max_tokens"] >= 1 for b in transport.bodies)
    reported_in = sum(u["input"] for u in transport.usage)
    reported_out = sum(u["output"] for u in transport.usage)
    tree = result.state.tree
    assert (tree.prompt_tokens, tree.completion_tokens) == (reported_in, reported_out)
    assert tree.model_calls == len(transport.bodies)


def test_a_transcript_becomes_alternating_turns_with_blocks() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "system", "content": "Budget: 2 turns left."},
    ]
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    request = ChatRequest(
        model="claude", messages=messages, tools=tools, max_tokens=300, tool_choice="required"
    )
    body = messages_body(request, stream=True)
    assert body["system"] == "Be brief.\n\nBudget: 2 turns left."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Why?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": 1}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "found"}],
        },
    ]
    assert body["tools"] == [{"name": "read", "input_schema": {"type": "object"}}]
    assert body["tool_choice"] == {"type": "any"} and body["max_tokens"] == 300 and body["stream"]


def test_settings_map_to_the_messages_api() -> None:
    settings = ModelSettings(
        temperature=0.1,
        top_p=0.5,
        seed=3,
        stop=("END",),
        parallel_tool_calls=False,
        extra_body={"metadata": {"user_id": "u1"}},
    )
    tools = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    request = ChatRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=tools, settings=settings
    )
    body = messages_body(request, stream=False)
    assert body["temperature"] == 0.1 and body["top_p"] == 0.5
    assert body["stop_sequences"] == ["END"] and "seed" not in body  # the API has no seed
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["metadata"] == {"user_id": "u1"} and "stream" not in body


def test_a_response_format_is_refused_saying_what_to_do() -> None:
    request = ChatRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "json_object"},
    )
    with pytest.raises(ConfigError, match='output_via="tool"'):
        messages_body(request, stream=True)


@pytest.mark.parametrize("budget", [0.0005 * k for k in range(1, 51)])
async def test_the_budget_sweep_goes_zero_over(sandbox: Path, budget: float) -> None:
    provider = AnthropicProvider(
        base_url="http://scripted.test/v1", api_key="k", transport=ScriptedTransport()
    )
    try:
        result = await Runner(provider=provider).run(
            demo_agent("research", sandbox),
            demo_task("research"),
            limits=Limits(max_budget_usd=budget, max_turns=50),
        )
    finally:
        await provider.aclose()
    assert result.status in {Status.COMPLETED, Status.BUDGET_EXCEEDED}
    for run in result.walk():
        assert run.state.tree.cost_usd <= run.state.limits.max_budget_usd + 1e-12


def _over(transport: ScriptedTransport, **options: Any) -> Runner:
    provider = AnthropicProvider(
        base_url="http://scripted.test/v1", api_key="k", transport=transport
    )
    return Runner(provider=provider, prices=PRICES, **options)


async def test_a_stream_cut_midway_is_charged_and_asked_again(sandbox: Path) -> None:
    events: list[Event] = []
    runner = _over(ScriptedTransport(), sink=events.append)
    result = await runner.run(demo_agent("plan+cut3", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED, result.state.reason
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    assert cut["tokens"] > 0 and cut["turn"] == 1
    turns = [e.data for e in events if e.type == "turn"]
    assert len(turns) == 3 and result.state.own.model_calls == 4  # the cut call is billed
    billed = sum(SCRIPTED_PRICE.cost(t["prompt_tokens"], t["completion_tokens"]) for t in turns)
    assert result.state.own.cost_pico > billed  # plus what arrived of the cut one


async def test_a_stop_mid_stream_charges_what_arrived(sandbox: Path, autojump_clock: Any) -> None:
    events: list[Event] = []
    runner = _over(ScriptedTransport(chunk_s=1.0), sink=events.append)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, demo_agent("plan", sandbox), demo_task("plan"))
        await trio.sleep(2.5)  # the first reply is streaming: a few pieces have come
        handle.cancel("Stop")
        stopped = await handle.wait()
    assert stopped.status is Status.INTERRUPTED
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    own = stopped.state.own
    assert own.model_calls == 1 and own.completion_tokens == cut["tokens"] > 0
    assert own.cost_pico == SCRIPTED_PRICE.cost(own.prompt_tokens, own.completion_tokens)


def test_the_official_client_reads_the_scripted_server(server_url: str) -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server_url.removesuffix("/v1"), api_key="k")
    said = client.messages.create(
        model="plan",
        max_tokens=300,
        messages=[{"role": "user", "content": demo_task("plan")}],
        tools=[{"name": "list_files", "input_schema": {"type": "object", "properties": {}}}],
    )
    assert said.stop_reason == "tool_use" and said.content[0].type == "tool_use"
    assert said.usage.input_tokens > 0 and said.usage.output_tokens > 0
    with client.messages.stream(
        model="plan",
        max_tokens=300,
        messages=[{"role": "user", "content": "hello"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.content and final.usage.output_tokens > 0
