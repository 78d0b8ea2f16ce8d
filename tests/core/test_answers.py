"""A reply that calls no tool: an answer, a call written as text, an answer after a
failed call, or (for an agent that looks first) a reply sent back once."""

from __future__ import annotations

from typing import Any

from orchestra import Agent, Limits, Runner, Status, tool
from orchestra._core.answers import LOOK_NOTE
from orchestra._core.loop import LOOK_MAX_TOKENS
from orchestra.testing import DONE, FakeProvider, tool_calls


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    if key == "missing":
        raise LookupError(f"no such key: {key}")
    return f"{key} is 7"


def agent(**options: Any) -> Agent:
    return Agent(name="a", model="m", tools=(lookup,), limits=Limits(max_turns=6), **options)


def prose(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def test_a_plain_answer_completes_as_answered():
    result = await Runner(provider=FakeProvider(DONE)).run(agent(), "q")
    assert (result.state.status, result.state.reason) == (Status.COMPLETED, "answered")


async def test_a_call_written_as_text_fails_the_run_and_says_why():
    written = prose('```json\n{"name": "lookup", "arguments": {"key": "a"}}\n```')
    result = await Runner(provider=FakeProvider(written)).run(agent(), "q")
    assert result.state.status is Status.FAILED
    assert "wrote a call of lookup as text" in (result.state.reason or "")
    assert result.state.own.tool_runs == 0


async def test_json_naming_no_declared_tool_is_an_answer():
    said = prose('The config has {"name": "other"} in it.')
    result = await Runner(provider=FakeProvider(said)).run(agent(), "q")
    assert result.state.status is Status.COMPLETED


async def test_an_answer_after_a_failed_call_says_so():
    provider = FakeProvider(tool_calls(("lookup", {"key": "missing"})), prose("It is 7."))
    result = await Runner(provider=provider).run(agent(), "q")
    assert result.state.status is Status.COMPLETED
    said = "answered after a failed call: lookup: Error: no such key: missing"
    assert result.state.reason == said


async def test_an_answer_after_a_call_that_worked_is_plain():
    provider = FakeProvider(tool_calls(("lookup", {"key": "a"})), prose("It is 7."))
    result = await Runner(provider=provider).run(agent(), "q")
    assert result.state.reason == "answered"


async def test_looking_first_asks_for_a_tool_until_one_ran():
    provider = FakeProvider(tool_calls(("lookup", {"key": "a"})), prose("It is 7."))
    await Runner(provider=provider).run(agent(look_first=True), "q")
    assert [r.tool_choice for r in provider.requests] == ["required", None]
    assert provider.requests[0].max_tokens == LOOK_MAX_TOKENS
    assert provider.requests[1].max_tokens == 1024
    assert provider.requests[0].payload()["tool_choice"] == "required"
    assert "tool_choice" not in provider.requests[1].payload()


async def test_a_reply_without_looking_is_sent_back_once_in_words():
    provider = FakeProvider(
        prose("I will call lookup."), tool_calls(("lookup", {"key": "a"})), prose("It is 7.")
    )
    result = await Runner(provider=provider).run(agent(look_first=True), "q")
    roles = [m["role"] for m in result.state.messages]
    assert roles == ["user", "assistant", "system", "assistant", "tool", "assistant"]
    assert result.state.messages[2] == LOOK_NOTE
    assert (result.state.status, result.state.answer) == (Status.COMPLETED, "It is 7.")
    assert result.state.turns == 3


async def test_a_second_reply_without_looking_is_taken_as_the_answer():
    provider = FakeProvider(prose("I will call lookup."), prose("It is 7, I think."))
    result = await Runner(provider=provider).run(agent(look_first=True), "q")
    assert (result.state.status, result.state.answer) == (Status.COMPLETED, "It is 7, I think.")
    assert sum(m == LOOK_NOTE for m in result.state.messages) == 1


async def test_an_agent_that_does_not_look_first_sends_no_tool_choice():
    provider = FakeProvider(prose("7."))
    await Runner(provider=provider).run(agent(), "q")
    assert "tool_choice" not in provider.requests[0].payload()
