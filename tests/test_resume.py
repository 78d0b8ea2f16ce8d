"""Resuming a saved run: spend and turns carry over; only an explicit raise adds room."""

from __future__ import annotations

import pytest

from orchestra import Limits, StateError, Status


async def test_resume_without_raise_stops_again_and_spends_nothing(runner, scenario_agent, events):
    agent = scenario_agent("runaway", limits=Limits(max_turns=4))
    first = await runner.run(agent, "go")
    assert first.status is Status.MAX_TURNS_EXCEEDED
    calls_before = sum(e.type == "model_request" for e in events)
    again = await runner.resume(first.run_id, agent)
    assert again.status is Status.MAX_TURNS_EXCEEDED
    assert again.state.turns == 4 and again.state.own.cost_pico == first.state.own.cost_pico
    assert sum(e.type == "model_request" for e in events) == calls_before


async def test_an_explicit_raise_continues_and_is_recorded(runner, scenario_agent):
    agent = scenario_agent("runaway", limits=Limits(max_turns=4))
    first = await runner.run(agent, "go")
    raised = await runner.resume(first.run_id, agent, limits=Limits(max_turns=6), note="two more")
    assert raised.status is Status.MAX_TURNS_EXCEEDED
    assert raised.state.turns == 6
    [record] = raised.state.limit_raises
    assert (record.before.max_turns, record.after.max_turns, record.note) == (4, 6, "two more")
    assert raised.state.own.cost_pico > first.state.own.cost_pico


async def test_completed_runs_cannot_be_resumed(runner, scenario_agent):
    agent = scenario_agent("plan")
    done = await runner.run(agent, "go")
    with pytest.raises(StateError, match="ended completed; it cannot be resumed"):
        await runner.resume(done.run_id, agent)


async def test_tree_usage_is_recounted_from_descendants_on_load(runner, scenario_agent):
    from orchestra import Usage
    from orchestra._core.execute import load_live

    agent = scenario_agent("research")
    done = await runner.run(agent, "go")
    stale = runner.store.load(done.run_id)
    stale.tree = Usage()  # as if the process died before the root saved its children's spend
    runner.store.save(stale)
    live = load_live(runner, done.run_id, agent, None)
    assert live.state.tree == done.state.tree
    assert live.state.tree.cost_pico == done.state.own.cost_pico + sum(
        c.state.tree.cost_pico for c in done.children
    )
