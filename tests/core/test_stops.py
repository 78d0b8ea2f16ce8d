"""Stop conditions after each step, and replies cut at max_tokens."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    ConfigError,
    InterruptionKind,
    Limits,
    Runner,
    RunState,
    Status,
    tool,
)
from orchestra._core.stops import repeated_calls
from orchestra._recipes.demo import demo_agent, demo_task


async def test_a_model_stuck_on_one_call_is_stopped_with_its_own_reason(run_scenario):
    result = await run_scenario("stuck")
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption.kind is InterruptionKind.NO_PROGRESS
    assert result.state.reason.startswith("no progress: read_file was called 3 times")
    assert result.state.turns == 3  # not the 20 turns of its cap


async def test_a_runaway_that_varies_its_calls_is_left_to_the_limits(run_scenario):
    result = await run_scenario("runaway")
    assert result.status is Status.MAX_TURNS_EXCEEDED


async def test_the_guard_can_be_widened_or_turned_off(sandbox, runner):
    stuck = demo_agent("stuck", sandbox, limits=Limits(max_turns=8))
    wider = await runner.run(stuck.__class__(**{**_fields(stuck), "no_progress_after": 5}), "go")
    assert wider.state.turns == 5
    off = await runner.run(stuck.__class__(**{**_fields(stuck), "no_progress_after": None}), "go")
    assert off.status is Status.MAX_TURNS_EXCEEDED and off.state.turns == 8
    with pytest.raises(ConfigError, match="no_progress_after"):
        stuck.__class__(**{**_fields(stuck), "no_progress_after": 1})


def _fields(agent: Agent) -> dict[str, Any]:
    import attrs

    return attrs.asdict(agent, recurse=False)


async def test_a_user_predicate_stops_the_run_after_the_step(sandbox, runner):
    def two_turns(state: RunState) -> str | None:
        return "enough reading" if state.turns >= 2 else None

    agent = demo_agent("runaway", sandbox)
    agent = agent.__class__(**{**_fields(agent), "stop_when": (two_turns,)})
    result = await runner.run(agent, demo_task("runaway"))
    assert result.status is Status.INTERRUPTED and result.status.resumable
    assert result.state.interruption.kind is InterruptionKind.STOP_CONDITION
    assert "enough reading" in result.state.reason and "two_turns" in result.state.reason
    assert result.state.turns == 2


async def test_a_predicate_that_raises_fails_the_run_naming_it(sandbox, runner):
    def broken(state: RunState) -> str | None:
        raise KeyError("oops")

    agent = demo_agent("plan", sandbox)
    agent = agent.__class__(**{**_fields(agent), "stop_when": [broken]})
    result = await runner.run(agent, demo_task("plan"))
    assert result.status is Status.FAILED and "broken" in result.state.reason


def _call(call_id: str, name: str, args: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_repeats_are_counted_in_a_row_from_the_end():
    def state(*calls: tuple[str, str, str]) -> RunState:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i, (name, args, result) in enumerate(calls):
            messages.append({"role": "assistant", "tool_calls": [_call(f"c{i}", name, args)]})
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
        return RunState(run_id="r", root_id="r", agent="a", model="m", messages=messages)

    same = ("read", '{"a": 1, "b": 2}', "x")
    reordered = ("read", '{"b": 2, "a": 1}', "x")
    assert repeated_calls(state(same, reordered, same), 3) == "read"
    assert repeated_calls(state(same, same), 3) is None
    assert repeated_calls(state(same, same, ("read", '{"a": 1, "b": 2}', "y")), 3) is None
    assert repeated_calls(state(same, ("list", "{}", "x"), same, same), 3) is None


def test_one_reply_making_the_same_call_three_times_counts_once():
    def reply(*ids: str) -> list[dict[str, Any]]:
        calls = [_call(i, "read", "{}") for i in ids]
        results = [{"role": "tool", "tool_call_id": i, "content": "x"} for i in ids]
        return [{"role": "assistant", "tool_calls": calls}, *results]

    def state(*replies: list[dict[str, Any]]) -> RunState:
        messages = [{"role": "user", "content": "go"}, *(m for r in replies for m in r)]
        return RunState(run_id="r", root_id="r", agent="a", model="m", messages=messages)

    assert repeated_calls(state(reply("a", "b", "c")), 3) is None
    assert repeated_calls(state(reply("a", "b", "c"), reply("d")), 3) is None
    assert repeated_calls(state(reply("a", "b", "c"), reply("d"), reply("e")), 3) == "read"


@tool
def write(text: str) -> str:
    """Write text somewhere."""
    raise AssertionError("a call from a cut reply must not run")


class CutCall:
    """Replies with a tool call cut at max_tokens, then answers."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        tools = [m for m in request.messages if m["role"] == "tool"]
        if tools:
            self.seen.append(tools[-1]["content"])
            message: dict[str, Any] = {"role": "assistant", "content": "gave up"}
            return ChatReply(
                message=message, finish_reason="stop", prompt_tokens=5, completion_tokens=2
            )
        call = _call("c1", "write", '{"text": "a long te')
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return ChatReply(
            message=message, finish_reason="length", prompt_tokens=5, completion_tokens=9
        )


async def test_a_reply_cut_at_max_tokens_is_not_dispatched():
    provider = CutCall()
    agent = Agent(name="a", model="m", tools=(write,))
    result = await Runner(provider=provider).run(agent, "write it")
    assert result.status is Status.COMPLETED
    [text] = provider.seen
    assert text.startswith("Error: not run") and "max_tokens" in text
