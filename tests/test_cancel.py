"""One call cancels a whole tree: runs, requests and tools; deadlines."""

from __future__ import annotations

import trio

from orchestra import InterruptionKind, Limits, OpenAIProvider, Runner, Status
from orchestra._recipes.demo import demo_task
from orchestra.testing import ScriptedTransport


async def start(runner, agent, task, nursery):
    return await runner.start(nursery, agent, task)


async def test_cancel_at_1_2s_ends_a_3s_tool_at_1_2s(
    runner, scenario_agent, autojump_clock, events
):
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("slow"), demo_task("slow"))
        await trio.sleep(1.2)
        handle.cancel("user pressed Stop")
        result = await handle.wait()
        assert trio.current_time() == 1.2
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption.kind is InterruptionKind.CANCELLED
    assert result.state.reason == "user pressed Stop"
    assert result.state.own.model_calls == 1  # the spend of the first call is kept
    assert result.cost_usd > 0
    progress = [e for e in events if e.type == "tool_progress"]
    # every 200 files of 3000 over 3 s: 5 before 1.2 s, and a 6th at 1.2 s exactly if the
    # tool's wake-up is scheduled before the cancel (trio may order the two either way)
    assert len(progress) in (5, 6)
    assert all(e.data["elapsed_ms"] <= 1200 for e in progress)
    assert events[-1].type == "run_stopped" and events[-1].data["status"] == "interrupted"


async def test_cancel_reaches_every_run_of_a_tree(runner, scenario_agent, autojump_clock, events):
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("slow_tree"), demo_task("slow_tree"))
        await trio.sleep(1.0)
        handle.cancel("stop everything")
        result = await handle.wait()
    runs = result.walk()
    assert len(runs) == 4
    assert all(r.status is Status.INTERRUPTED for r in runs)
    assert all(r.state.reason == "stop everything" for r in runs)
    stopped = {e.run_id for e in events if e.type == "run_stopped"}
    assert stopped == {r.run_id for r in runs}
    assert sum(r.state.tree.cost_pico for r in result.children) + result.state.own.cost_pico == (
        result.state.tree.cost_pico
    )


async def test_cancel_reaches_depth_3_inside_a_model_call(sandbox, scenario_agent, autojump_clock):
    provider = OpenAIProvider(base_url="http://s/v1", transport=ScriptedTransport(latency=1.0))
    runner = Runner(provider=provider)
    agent = scenario_agent("deep", child_limits=Limits(max_turns=10, max_budget_usd=0.05))
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("deep"))
        await trio.sleep(3.5)  # root, depth 1, depth 2 have each made one call; depth 3 is in one
        handle.cancel("deep stop")
        result = await handle.wait()
    runs = result.walk()
    assert len(runs) == 4
    assert [r.state.turns for r in runs] == [1, 1, 1, 0]
    assert all(r.status is Status.INTERRUPTED and r.state.reason == "deep stop" for r in runs)
    assert trio.current_time() == 3.5


async def test_cancelling_one_child_lets_the_parent_continue(
    runner, scenario_agent, autojump_clock
):
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("slow_tree"), demo_task("slow_tree"))
        await trio.sleep(1.0)
        root = handle._live
        target = root.children[1].state.run_id
        assert runner.cancel(target, "not this one")
        result = await handle.wait()
    assert result.status is Status.COMPLETED
    statuses = [c.status for c in result.children]
    assert statuses.count(Status.INTERRUPTED) == 1 and statuses.count(Status.COMPLETED) == 2
    assert "interrupted after 0 turns" not in result.answer
    assert "not this one" in result.answer


async def test_deadline_inside_a_model_call(sandbox, scenario_agent, autojump_clock):
    provider = OpenAIProvider(base_url="http://s/v1", transport=ScriptedTransport(latency=5.0))
    result = await Runner(provider=provider).run(
        scenario_agent("plan", limits=Limits(timeout_s=1.0)), "go"
    )
    assert result.status is Status.DEADLINE_EXCEEDED
    assert result.state.turns == 0 and result.cost_usd == 0
    assert trio.current_time() == 1.0


async def test_cancel_of_an_unknown_run_is_false(runner):
    assert runner.cancel("run_nope") is False


async def test_outer_scope_cancel_records_interrupted(runner, scenario_agent, autojump_clock):
    with trio.move_on_after(0.5):
        await runner.run(scenario_agent("slow"), "go", run_id="run_outer")
    state = runner.store.load("run_outer")
    assert state.status is Status.INTERRUPTED
    assert state.interruption.kind is InterruptionKind.CANCELLED


async def test_a_cancelled_run_resumes_and_reruns_its_interrupted_read(
    runner, scenario_agent, autojump_clock, events
):
    agent = scenario_agent("slow")
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("slow"))
        await trio.sleep(1.0)
        handle.cancel("pause")
        stopped = await handle.wait()
    assert stopped.status is Status.INTERRUPTED
    assert stopped.state.interruption.kind is InterruptionKind.CANCELLED
    resumed = await runner.resume(stopped.run_id, agent)
    assert resumed.status is Status.COMPLETED
    assert resumed.state.turns == 2  # the saved first reply was not requested again
    starts = [e for e in events if e.type == "tool_start"]
    assert len(starts) == 2  # the cancelled read-only scan started again...
    assert resumed.state.own.tool_runs == 1  # ...and finished once (runs count finished tools)


class _BrokenOnCancel:
    """A provider whose call, when cancelled, fails with a bug of its own."""

    async def complete(self, request: object) -> object:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("connection pool corrupted")


async def test_an_error_raised_while_a_run_is_cancelled_is_recorded_not_taken_for_the_cancel(
    scenario_agent, autojump_clock, events
):
    runner = Runner(provider=_BrokenOnCancel(), sink=events.append)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("plan"), demo_task("plan"))
        await trio.sleep(1.0)
        handle.cancel("stop")
        result = await handle.wait()
    assert result.status is Status.FAILED
    assert result.state.reason == "internal error: RuntimeError('connection pool corrupted')"
    assert [e.data["status"] for e in events if e.type == "run_stopped"] == ["failed"]
