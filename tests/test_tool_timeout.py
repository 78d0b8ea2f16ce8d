"""Per-tool time limits: a read that runs out is answered in words; a write is in doubt."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import trio

from orchestra import (
    Agent,
    ConfigError,
    Event,
    InterruptionKind,
    Limits,
    OTelTracer,
    RecordingTracerProvider,
    Runner,
    Status,
    Tool,
    ToolContext,
    ToolPolicy,
    tool,
)
from orchestra.testing import DONE, InMemorySpanSink, tool_calls
from orchestra.testing import FakeProvider as Script


def calls(*names: str) -> dict[str, Any]:
    return tool_calls(*((n, "{}") for n in names))


def agent(*tools: Tool, policy: ToolPolicy | None = None, limits: Limits | None = None) -> Agent:
    return Agent(
        name="a",
        model="m",
        tools=tools,
        policy=policy or ToolPolicy(),
        limits=limits or Limits(max_turns=5),
    )


def tool_messages(state: Any) -> list[str]:
    return [m["content"] for m in state.messages if m["role"] == "tool"]


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "tool_result"]


# -- reads ----------------------------------------------------------------------------------


async def test_a_read_that_runs_out_is_stopped_and_answered_and_the_run_goes_on(autojump_clock):
    stopped_at: list[float] = []

    @tool(read_only=True, timeout_s=5)
    async def slow() -> str:
        """Never ends."""
        try:
            await trio.sleep_forever()
        finally:
            stopped_at.append(trio.current_time())
        return "unreachable"

    events: list[Event] = []
    result = await Runner(provider=Script(calls("slow"), DONE), sink=events.append).run(
        agent(slow), "go"
    )
    assert result.status is Status.COMPLETED
    assert tool_messages(result.state) == [
        "Error: slow timed out after 5 s and was stopped; it returned nothing."
    ]
    assert stopped_at == [5.0] and trio.current_time() == 5.0
    [data] = results(events)
    assert (data["ok"], data["timed_out"], data["in_doubt"], data["ms"]) == (
        False,
        True,
        False,
        5000.0,
    )
    assert result.state.own.tool_runs == 1


async def test_the_policy_default_applies_to_tools_without_their_own(autojump_clock):
    @tool(read_only=True)
    async def plain() -> str:
        """Slow, no limit of its own."""
        await trio.sleep(10)
        return "plain done"

    @tool(read_only=True, timeout_s=30)
    async def patient() -> str:
        """Slow, with a longer limit of its own."""
        await trio.sleep(20)
        return "patient done"

    @tool(read_only=True, timeout_s=math.inf)
    async def unbounded() -> str:
        """Slow, explicitly without limit."""
        await trio.sleep(25)
        return "unbounded done"

    script = Script(calls("plain", "patient", "unbounded"), DONE)
    policy = ToolPolicy(tool_timeout_s=2)
    result = await Runner(provider=script).run(
        agent(plain, patient, unbounded, policy=policy), "go"
    )
    assert tool_messages(result.state) == [
        "Error: plain timed out after 2 s and was stopped; it returned nothing.",
        "patient done",
        "unbounded done",
    ]
    assert trio.current_time() == 25.0  # the reads ran concurrently


async def test_a_blocked_sync_read_is_abandoned_in_its_thread(mock_clock):
    reported, release, finished = threading.Event(), threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    @tool(read_only=True, timeout_s=3)
    def stuck(ctx: ToolContext) -> str:
        """Blocks until released."""
        threads.append(threading.current_thread())
        ctx.progress("waiting")
        reported.set()
        release.wait(30)
        ctx.progress("too late")
        finished.set()
        return "late result"

    events: list[Event] = []
    runner = Runner(provider=Script(calls("stuck"), DONE), sink=events.append)
    async with trio.open_nursery() as nursery:
        handle: list[Any] = []

        async def go() -> None:
            handle.append(await runner.run(agent(stuck), "go"))

        nursery.start_soon(go)
        assert await trio.to_thread.run_sync(reported.wait, 10)
        mock_clock.jump(3)
    [result] = handle
    assert result.status is Status.COMPLETED
    assert tool_messages(result.state) == [
        "Error: stuck timed out after 3 s and was stopped; it returned nothing."
    ]
    assert trio.current_time() == 3.0
    assert threads[0] is not threading.main_thread()
    assert not finished.is_set()  # still running in its thread when the run ended
    release.set()
    assert await trio.to_thread.run_sync(finished.wait, 10)
    labels = [e.data["label"] for e in events if e.type == "tool_progress"]
    assert labels == ["waiting"]  # reported from the thread; nothing once abandoned


async def test_a_sync_tool_with_a_limit_runs_in_a_thread_and_returns():
    where: dict[str, threading.Thread] = {}

    @tool(read_only=True, timeout_s=60)
    def quick() -> dict[str, int]:
        """Quick."""
        where["quick"] = threading.current_thread()
        return {"n": 1}

    @tool(read_only=True)
    def inline() -> str:
        """Quick, no limit."""
        where["inline"] = threading.current_thread()
        return "inline"

    result = await Runner(provider=Script(calls("quick", "inline"), DONE)).run(
        agent(quick, inline), "go"
    )
    assert tool_messages(result.state) == ['{"n": 1}', "inline"]
    assert where["quick"] is not threading.main_thread()
    assert where["inline"] is threading.main_thread()


async def test_the_run_deadline_is_not_mistaken_for_the_tool_limit(autojump_clock):
    @tool(read_only=True, timeout_s=5)
    async def slow() -> str:
        """Slow."""
        await trio.sleep(60)
        return "done"

    result = await Runner(provider=Script(calls("slow"), DONE)).run(
        agent(slow, limits=Limits(max_turns=5, timeout_s=2)), "go"
    )
    assert result.status is Status.DEADLINE_EXCEEDED
    assert tool_messages(result.state) == []
    assert trio.current_time() == 2.0


# -- writes ---------------------------------------------------------------------------------


def slow_write(*, idempotent: bool = False) -> tuple[Tool, list[str]]:
    """A write that hangs the first time it runs, and records each attempt's key."""
    keys: list[str] = []

    async def send(ctx: ToolContext) -> str:
        """Send the report."""
        keys.append(ctx.idempotency_key)
        if len(keys) == 1:
            await trio.sleep_forever()
        return "sent"

    return tool(timeout_s=4, idempotent=idempotent)(send), keys


async def test_a_write_that_runs_out_is_in_doubt_and_waits_for_a_human(autojump_clock):
    send, keys = slow_write()
    runner = Runner(provider=Script(calls("send"), DONE))
    result = await runner.run(agent(send), "go")
    assert result.status is Status.INTERRUPTED
    waiting = result.state.interruption
    assert waiting is not None and waiting.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert (waiting.call_id, waiting.tool) == ("c0", "send")
    assert waiting.reason.startswith("send timed out after 4 s and its outcome is unknown")
    assert "approve to run it again, or reject" in waiting.reason
    assert tool_messages(result.state) == [] and result.state.started == ["c0"]

    again = await runner.resume(result.run_id, agent(send))  # nobody decided: not re-run
    assert again.status is Status.INTERRUPTED and len(keys) == 1
    assert again.state.interruption is not None
    assert again.state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME

    runner.approve(result.run_id)
    done = await runner.resume(result.run_id, agent(send))
    assert done.status is Status.COMPLETED
    assert tool_messages(done.state) == ["sent"] and len(keys) == 2


async def test_a_rejected_timed_out_write_is_not_run_again(autojump_clock):
    send, keys = slow_write()
    runner = Runner(provider=Script(calls("send"), DONE))
    result = await runner.run(agent(send), "go")
    runner.reject(result.run_id, reason="it was sent")
    done = await runner.resume(result.run_id, agent(send))
    assert done.status is Status.COMPLETED
    assert tool_messages(done.state) == ["Rejected by the user: it was sent"]
    assert len(keys) == 1


async def test_an_idempotent_write_runs_again_on_resume_with_the_same_key(autojump_clock):
    send, keys = slow_write(idempotent=True)
    runner = Runner(provider=Script(calls("send"), DONE))
    result = await runner.run(agent(send), "go")
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption is not None
    assert "resume to run it again with the same idempotency key" in (
        result.state.interruption.reason
    )
    done = await runner.resume(result.run_id, agent(send))
    assert done.status is Status.COMPLETED
    assert tool_messages(done.state) == ["sent"]
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_a_timed_out_tool_span_says_timeout(autojump_clock):
    spans = InMemorySpanSink()
    send, _ = slow_write()
    tracer = OTelTracer(tracer_provider=RecordingTracerProvider(sink=spans))
    await Runner(provider=Script(calls("send"), DONE), tracer=tracer).run(agent(send), "go")
    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool send"]
    assert span.attributes is not None and span.attributes["error.type"] == "timeout"


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, math.nan, True, "5"])
def test_a_limit_must_be_positive_seconds(value):
    async def noop() -> str:
        return ""

    with pytest.raises(ConfigError, match="timeout_s must be a number of seconds > 0"):
        tool(timeout_s=value)(noop)
    with pytest.raises(ConfigError, match="tool_timeout_s must be a number of seconds > 0"):
        ToolPolicy(tool_timeout_s=value)


def test_agent_tools_are_bounded_by_their_child_limits_not_the_policy():
    child = Agent(name="child", model="m")
    assert child.as_tool().timeout_s == math.inf
