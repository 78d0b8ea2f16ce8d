"""orchestra.testing.FakeProvider: fixed replies with true counts, no HTTP."""

from __future__ import annotations

import json

import pytest

from orchestra import Agent, Runner, Status, tool
from orchestra.testing import DONE, FakeProvider, tool_calls


@tool(read_only=True)
def echo(text: str) -> str:
    """Echo text."""
    return text


async def test_plays_its_turns_then_repeats_the_last_and_keeps_requests():
    provider = FakeProvider(tool_calls(("echo", {"text": "hi"})), DONE)
    result = await Runner(provider=provider).run(Agent(name="a", model="m", tools=(echo,)), "go")
    assert result.status is Status.COMPLETED and result.answer == "done"
    assert len(provider.requests) == 2
    assert [m["content"] for m in result.state.messages if m["role"] == "tool"] == ["hi"]
    assert result.state.own.prompt_tokens > 0 and result.state.own.completion_tokens > 0


def test_tool_calls_encodes_dicts_and_keeps_strings():
    message = tool_calls(("a", {"x": 1}), ("b", "{not json"))
    args = [c["function"]["arguments"] for c in message["tool_calls"]]
    assert json.loads(args[0]) == {"x": 1} and args[1] == "{not json"
    assert [c["id"] for c in message["tool_calls"]] == ["c0", "c1"]


def test_needs_a_turn():
    with pytest.raises(ValueError, match="at least one"):
        FakeProvider()
