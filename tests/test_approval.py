"""Approval, rejection and resume, on the same code path as any pending call."""

from __future__ import annotations

import json

import pytest

from orchestra import InterruptionKind, Limits, StateError, Status, ToolPolicy


async def test_approve_then_resume_deletes_once(runner, scenario_agent, sandbox):
    agent = scenario_agent("destructive")
    stopped = await runner.run(agent, "free space")
    assert stopped.status is Status.INTERRUPTED
    waiting = runner.approve(stopped.run_id)
    assert (waiting.tool, waiting.arguments) == ("delete_file", {"path": "access.log"})
    done = await runner.resume(stopped.run_id, agent)
    assert done.status is Status.COMPLETED
    assert done.answer == "Deleted access.log to free space."
    assert not (sandbox / "access.log").exists()
    assert done.state.turns == 3 and done.state.own.tool_runs == 2
    assert done.state.own.cost_pico > stopped.state.own.cost_pico


async def test_reject_with_reason_writes_it_into_the_transcript(runner, scenario_agent, sandbox):
    agent = scenario_agent("destructive")
    stopped = await runner.run(agent, "free space")
    runner.reject(stopped.run_id, reason="keep it")
    done = await runner.resume(stopped.run_id, agent)
    assert (sandbox / "access.log").exists()
    assert "Rejected by the user: keep it" in [m["content"] for m in done.state.messages]
    assert "nothing was deleted" in done.answer


async def test_reject_without_reason_is_never_empty(runner, scenario_agent, sandbox):
    agent = scenario_agent("destructive", policy=ToolPolicy())
    stopped = await runner.run(agent, "free space")
    runner.reject(stopped.run_id)
    done = await runner.resume(stopped.run_id, agent)
    assert "The user declined this call; nothing was done." in json.dumps(done.state.messages)
    assert done.answer != "Deleted access.log to free space."  # the design's lie cannot happen
    assert (sandbox / "access.log").exists()


async def test_approval_binds_to_the_exact_arguments(runner, scenario_agent, sandbox):
    agent = scenario_agent("destructive")
    stopped = await runner.run(agent, "free space")
    runner.approve(stopped.run_id)
    state = runner.store.load(stopped.run_id)
    state.approvals[0] = type(state.approvals[0])(
        call_id=state.approvals[0].call_id, arguments={"path": "errors.log"}
    )
    runner.store.save(state)
    again = await runner.resume(stopped.run_id, agent)
    assert again.status is Status.INTERRUPTED
    assert again.state.interruption.kind is InterruptionKind.APPROVAL
    assert (sandbox / "access.log").exists() and (sandbox / "errors.log").exists()


async def test_approving_a_run_that_waits_for_nothing_is_refused(runner, scenario_agent):
    done = await runner.run(scenario_agent("plan"), "go")
    with pytest.raises(StateError, match="waits for no approval"):
        runner.approve(done.run_id)


async def test_child_approval_surfaces_at_the_root_and_resumes_the_child(runner, sandbox):
    from orchestra import Agent, catalog

    deleter = Agent(
        name="cleaner", model="destructive", tools=catalog(sandbox), limits=Limits(max_turns=5)
    )
    root = Agent(
        name="boss",
        model="deep",
        tools=(deleter.as_tool(name="research"),),
        limits=Limits(max_turns=5),
    )
    stopped = await runner.run(root, "clean up")
    assert stopped.status is Status.INTERRUPTED
    waiting = stopped.state.interruption
    [child] = stopped.children
    assert waiting.run_id == child.run_id and waiting.tool == "delete_file"
    assert child.status is Status.INTERRUPTED
    runner.approve(stopped.run_id)
    done = await runner.resume(stopped.run_id, root)
    assert done.status is Status.COMPLETED
    [child] = done.children
    assert child.status is Status.COMPLETED and child.state.turns == 3
    assert not (sandbox / "access.log").exists()
    assert done.state.own.child_runs == 1  # the child was resumed, not started again
