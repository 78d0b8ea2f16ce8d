"""Every exit of the loop, on the scripted provider."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    InterruptionKind,
    Limits,
    ProviderHTTPError,
    Runner,
    Status,
)
from orchestra._model.tokens import count_prompt


async def test_plan_completes_in_three_turns(run_scenario, events):
    result = await run_scenario("plan")
    assert result.status is Status.COMPLETED
    assert result.answer == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    assert (result.state.turns, result.state.own.tool_runs) == (3, 2)
    prompts = [e.data["prompt_tokens"] for e in events if e.type == "turn"]
    assert len(prompts) == 3 and prompts == sorted(set(prompts))


async def test_every_event_carries_the_run_id(run_scenario, events):
    result = await run_scenario("plan")
    assert events and all(e.to_dict()["run_id"] == result.run_id for e in events)
    kinds = [e.type for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_stopped"
    assert {"turn", "tool_start", "tool_result"} <= set(kinds)


async def test_runaway_stops_at_exactly_max_turns(run_scenario, events):
    result = await run_scenario("runaway", limits=Limits(max_turns=20))
    assert result.status is Status.MAX_TURNS_EXCEEDED
    assert result.state.turns == 20
    assert sum(e.type == "model_request" for e in events) == 20


async def test_runaway_input_grows_quadratically(run_scenario):
    fifty = await run_scenario("runaway", limits=Limits(max_turns=50))
    hundred = await run_scenario("runaway", limits=Limits(max_turns=100))
    assert hundred.state.own.prompt_tokens / fifty.state.own.prompt_tokens > 3


async def test_budget_stops_before_overspending(run_scenario):
    result = await run_scenario("runaway", limits=Limits(max_budget_usd=0.01, max_turns=100))
    assert result.status is Status.BUDGET_EXCEEDED
    assert 0 < result.cost_usd <= 0.01
    assert "left" in result.state.reason


async def test_zero_budget_makes_no_call(run_scenario, events):
    result = await run_scenario("plan", limits=Limits(max_budget_usd=0))
    assert result.status is Status.BUDGET_EXCEEDED
    assert not any(e.type == "model_request" for e in events)


async def test_zero_turns_makes_no_call(run_scenario):
    result = await run_scenario("plan", limits=Limits(max_turns=0))
    assert result.status is Status.MAX_TURNS_EXCEEDED
    assert result.state.turns == 0


async def test_approval_interrupts_before_the_write(run_scenario, sandbox):
    result = await run_scenario("destructive")
    assert result.status is Status.INTERRUPTED
    interruption = result.state.interruption
    assert interruption.kind is InterruptionKind.APPROVAL
    assert (interruption.tool, interruption.arguments) == ("delete_file", {"path": "access.log"})
    assert (sandbox / "access.log").exists()


async def test_deadline_inside_a_slow_tool(run_scenario, autojump_clock):
    start = trio.current_time()
    result = await run_scenario("slow", limits=Limits(timeout_s=1.0))
    assert result.status is Status.DEADLINE_EXCEEDED
    assert trio.current_time() - start == 1.0


async def test_slow_completes_after_three_seconds(run_scenario, autojump_clock, events):
    start = trio.current_time()
    result = await run_scenario("slow")
    assert result.status is Status.COMPLETED
    assert abs(trio.current_time() - start - 3.0) < 1e-6
    assert sum(e.type == "tool_progress" for e in events) == 15


class _Broken:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code

    async def complete(self, request: ChatRequest) -> ChatReply:
        raise ProviderHTTPError("boom", status_code=self.status_code)


async def test_a_request_the_provider_refuses_fails_the_run():
    result = await Runner(provider=_Broken(400)).run(Agent(name="a", model="m"), "hi")
    assert result.status is Status.FAILED
    assert "boom" in result.state.reason


async def test_a_provider_down_past_the_retries_stops_the_run_resumable(autojump_clock):
    result = await Runner(provider=_Broken(500)).run(Agent(name="a", model="m"), "hi")
    assert result.status is Status.INTERRUPTED and result.status.resumable
    assert "boom" in result.state.reason


class _Liar:
    """Answers prose, reporting the true prompt count."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        msg = {"role": "assistant", "content": json.dumps({"max": request.max_tokens})}
        return ChatReply(
            message=msg,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=5,
        )


async def test_max_tokens_is_lowered_to_what_the_budget_pays():
    agent = Agent(name="a", model="m", max_tokens=4096)
    result = await Runner(provider=_Liar()).run(agent, "hi", limits=Limits(max_budget_usd=0.001))
    granted = json.loads(result.answer)["max"]
    # $0.001 minus the prompt, at $12/M output tokens
    assert 16 <= granted < 0.001 / 12e-6
    assert result.status is Status.COMPLETED


async def test_the_saved_state_keeps_the_elapsed_time(autojump_clock):
    from orchestra import MemoryStore, tool
    from orchestra.testing import DONE, FakeProvider, tool_calls

    @tool(read_only=True)
    async def wait() -> str:
        """Wait two seconds."""
        await trio.sleep(2)
        return "waited"

    store = MemoryStore()
    provider = FakeProvider(tool_calls(("wait", {})), DONE)
    agent = Agent(name="a", model="m", tools=(wait,))
    result = await Runner(provider=provider, store=store).run(agent, "go")
    assert result.state.elapsed_s == pytest.approx(2.0)
    assert store.load(result.run_id).elapsed_s == pytest.approx(2.0)


class _CutCall:
    """Writes a call of read_file and is cut at ``max_tokens`` in its arguments."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"pa'},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return ChatReply(
            message=message,
            finish_reason="length",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=request.max_tokens or 0,
        )


async def test_a_call_cut_by_the_budget_is_answered_in_words_never_run(sandbox):
    from orchestra import catalog

    agent = Agent(name="a", model="m", tools=catalog(sandbox), max_tokens=4096)
    result = await Runner(provider=_CutCall()).run(agent, "hi", limits=Limits(max_budget_usd=0.002))
    assert result.status is Status.BUDGET_EXCEEDED
    assert "cut at" in (result.state.reason or "")
    last = result.state.messages[-1]
    assert last["role"] == "tool" and last["tool_call_id"] == "c1"
    assert last["content"].startswith("Error: not run. Your reply was cut at max_tokens")
    assert result.state.own.tool_runs == 0


class _CutAfterOneCall:
    """Writes a whole call of read_file, then one the cut breaks; then answers."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        if any(m["role"] == "tool" for m in request.messages):
            message: dict[str, Any] = {"role": "assistant", "content": "read it"}
            finish = "stop"
        else:
            whole = {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
            broken = {"name": "read_file", "arguments": '{"path": "err'}
            calls = [
                {"id": f"c{i}", "type": "function", "function": f}
                for i, f in enumerate((whole, broken))
            ]
            message, finish = {"role": "assistant", "content": None, "tool_calls": calls}, "length"
        return ChatReply(
            message=message,
            finish_reason=finish,
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=10,
        )


async def test_of_a_cut_reply_the_whole_calls_run_and_the_broken_one_is_said(sandbox):
    from orchestra import catalog

    agent = Agent(name="a", model="m", tools=catalog(sandbox))
    result = await Runner(provider=_CutAfterOneCall()).run(agent, "hi")
    results = {
        m["tool_call_id"]: m["content"] for m in result.state.messages if m["role"] == "tool"
    }
    assert results["c0"].startswith("The text of notes.txt")
    assert results["c1"].startswith("Error: not run. Your reply was cut at max_tokens")
    assert result.state.own.tool_runs == 1 and result.answer == "read it"
