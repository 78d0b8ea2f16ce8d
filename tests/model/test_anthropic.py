"""Anthropic's Messages API: requests translated (the guarantees over it: test_wires)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestra import AnthropicProvider, ConfigError, ModelSettings
from orchestra._model.anthropic import messages_body
from orchestra._model.provider import ChatRequest
from orchestra.testing import demo_task


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


def test_the_official_client_reads_the_scripted_server(server_url: str) -> None:
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=server_url.removesuffix("/v1"), api_key="k") as client:
        _ask_messages(client)


def _ask_messages(client: Any) -> None:
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


def test_the_official_openai_client_reads_the_scripted_responses(server_url: str) -> None:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=server_url, api_key="k") as client:
        _ask_responses(client)


def _ask_responses(client: Any) -> None:
    said = client.responses.create(
        model="plan",
        input=demo_task("plan"),
        tools=[{"type": "function", "name": "list_files", "parameters": {"type": "object"}}],
        max_output_tokens=300,
    )
    (call,) = [item for item in said.output if item.type == "function_call"]
    assert call.name == "list_files" and said.usage and said.usage.input_tokens > 0
    with client.responses.stream(model="plan", input="hello", max_output_tokens=300) as stream:
        final = stream.get_final_response()
    (streamed,) = final.output  # the scenario's first step: a call, its arguments streamed
    assert streamed.type == "function_call" and streamed.name == "list_files"
    assert streamed.arguments == "{}" and final.usage and final.usage.output_tokens > 0


async def test_thinking_is_counted_as_it_arrives_and_kept_out_of_the_answer() -> None:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m1",
                    "model": "claude",
                    "usage": {"input_tokens": 9, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "Weigh it."},
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Yes."},
            },
        ),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 12},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    heard: list[str] = []

    class Ear:
        def text(self, piece: str, tokens: int) -> None:
            heard.append("text")

        def arguments(self, piece: str, tokens: int) -> None:
            heard.append("thought")

    provider = AnthropicProvider(
        base_url="http://a/v1", api_key="k", transport=httpx.MockTransport(answer)
    )
    request = ChatRequest(
        model="claude", messages=[{"role": "user", "content": "?"}], max_tokens=100, listener=Ear()
    )
    reply = await provider.complete(request)
    await provider.aclose()
    assert reply.message["content"] == "Yes." and reply.completion_tokens == 12
    assert heard == ["thought", "text"]
