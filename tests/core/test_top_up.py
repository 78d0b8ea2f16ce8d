"""Top-ups: a limit that asks instead of stopping, and the grants that answer it.

The ``research_runaway`` tree: one child reads files for ever (it never
answers), the other answers; with ``on_limit="ask"`` the runaway pauses at its
budget with its answer so far, the tree pauses with it, and a grant, a
refusal or its parent's policy decides what happens next.
"""

from __future__ import annotations

import attrs
import pytest

from orchestra import (
    ConfigError,
    InterruptionKind,
    Limits,
    StateError,
    Status,
    TopUp,
    TopUps,
    state_from_dict,
    state_to_dict,
)

ROOT = Limits(max_turns=20, max_budget_usd=0.05, on_limit="ask")
CHILD = Limits(max_turns=8, max_budget_usd=0.004)


@pytest.fixture
def tree(scenario_agent):
    return scenario_agent("research_runaway", limits=ROOT, child_limits=CHILD)


def _asking(result):
    return next(
        r for r in result.walk() if r.state.interruption and r.state.run_id != result.run_id
    )


async def test_a_child_at_its_budget_asks_and_its_tree_pauses_with_it(runner, tree):
    paused = await runner.run(tree, "Summarise")
    request = paused.state.interruption
    assert paused.status is Status.INTERRUPTED
    assert request.kind is InterruptionKind.BUDGET_REQUEST and request.kind.waits_for_human
    child = _asking(paused).state
    assert request.run_id == child.run_id and child.status is Status.INTERRUPTED
    assert request.call_id == f"limit-{child.turns}-0"
    assert request.estimate_usd > 0  # three more calls at its average so far
    assert "What its tools returned" in request.partial
    # the answer so far is kept out of its transcript: granted, it goes on from there
    assert all(m.get("content") != request.partial for m in child.messages)
    assert child.tree.cost_pico <= child.limits.budget_pico


async def test_a_grant_continues_the_child_within_the_granted_total(runner, tree):
    paused = await runner.run(tree, "Summarise")
    child_id = paused.state.interruption.run_id
    runner.grant(paused.run_id, usd=0.003)
    again = await runner.resume(paused.run_id, tree)
    child = runner.store.load(child_id)
    assert child.limits.max_budget_usd == pytest.approx(0.007)
    assert child.limit_raises[-1].note == "granted $0.003"
    assert child.turns > _asking(paused).state.turns  # it went on
    assert child.tree.cost_pico <= child.limits.budget_pico  # never past what was granted
    assert again.state.tree.cost_pico <= again.state.limits.budget_pico


async def test_the_same_grant_twice_applies_once_and_another_is_refused(runner, tree):
    paused = await runner.run(tree, "Summarise")
    child_id = paused.state.interruption.run_id
    runner.grant(paused.run_id, usd=0.003)
    runner.grant(paused.run_id, usd=0.003)  # a second, concurrent, click: nothing written
    assert runner.store.load(child_id).limits.max_budget_usd == pytest.approx(0.007)
    with pytest.raises(StateError, match="already granted otherwise"):
        runner.grant(paused.run_id, usd=0.01)
    with pytest.raises(StateError, match="asks for more budget, not for an approval"):
        runner.approve(paused.run_id)


async def test_a_grant_past_what_an_ancestor_has_left_is_refused(runner, scenario_agent):
    tight = attrs.evolve(ROOT, max_budget_usd=0.012)
    agent = scenario_agent("research_runaway", limits=tight, child_limits=CHILD)
    paused = await runner.run(agent, "Summarise")
    child_id = paused.state.interruption.run_id
    carved = runner.store.load(child_id).limits  # its fair share of the tight root
    with pytest.raises(StateError, match=r"assistant run .* left of its \$0.012 budget"):
        runner.grant(paused.run_id, usd=0.05)
    assert runner.store.load(child_id).limits == carved  # nothing written


async def test_a_refusal_ends_the_child_with_its_answer_so_far(runner, tree):
    paused = await runner.run(tree, "Summarise")
    request = paused.state.interruption
    runner.reject(paused.run_id, reason="enough")
    done = await runner.resume(paused.run_id, tree)
    child = runner.store.load(request.run_id)
    assert done.status is Status.COMPLETED
    assert child.status is Status.BUDGET_EXCEEDED and child.answer_partial
    assert "more was refused (enough)" in child.reason
    assert "What its tools returned" in child.messages[-1]["content"]


async def test_a_parents_policy_grants_once_then_asks_a_person(runner, tree, events):
    policy = TopUps(grant=TopUp(usd=0.002), times=1)
    agent = attrs.evolve(tree, top_ups=policy)
    paused = await runner.run(agent, "Summarise")
    child = _asking(paused).state
    answers = [e for e in events if e.type == "top_up"]
    assert [a.data["granted"] for a in answers] == [True, False]
    assert "granted it 1 time(s) already" in answers[1].data["reason"]
    assert paused.state.interruption.kind is InterruptionKind.BUDGET_REQUEST
    assert child.limits.max_budget_usd == pytest.approx(0.006)
    assert [r.note for r in child.limit_raises] == ["top-up from the parent's policy"]


async def test_a_turn_limit_asks_too(runner, scenario_agent):
    agent = scenario_agent("runaway", limits=Limits(max_turns=3, on_limit="ask"))
    paused = await runner.run(agent, "Summarise")
    assert paused.state.interruption.kind is InterruptionKind.BUDGET_REQUEST
    assert "turn limit reached" in paused.state.reason
    runner.grant(paused.run_id, turns=2)
    again = await runner.resume(paused.run_id, agent)
    assert again.state.turns == 5 and again.state.interruption.call_id == "limit-5-1"


def test_on_limit_is_checked_saved_when_set_and_read_back() -> None:
    with pytest.raises(ConfigError, match="on_limit must be 'stop' or 'ask'"):
        Limits(on_limit="pay")
    assert "on_limit" not in Limits(max_turns=3).saved()  # older versions read it
    assert Limits(on_limit="ask").saved()["on_limit"] == "ask"
    with pytest.raises(ConfigError, match="grants something"):
        TopUp()


async def test_a_paused_request_is_saved_and_read_back_whole(runner, tree):
    paused = await runner.run(tree, "Summarise")
    again = state_from_dict(state_to_dict(paused.state))
    assert again.interruption == paused.state.interruption
    assert again.limits.on_limit == "ask"


async def test_two_concurrent_grants_of_one_request_apply_once(tree, provider, tmp_path):
    """Two processes (here: threads, each with its own connection to one SQLite file)
    grant the same request at the same moment: compare-and-swap in the store
    lets one write and the other find it written."""
    import threading

    from orchestra import Runner, SQLiteStore
    from orchestra._approval import grant

    path = tmp_path / "runs.db"
    paused = await Runner(provider=provider, store=SQLiteStore(path)).run(tree, "Summarise")
    child_id = paused.state.interruption.run_id
    ready = threading.Barrier(2)
    said: list[object] = []

    def grant_once() -> None:
        with SQLiteStore(path) as store:
            ready.wait()
            said.append(grant(store, paused.run_id, TopUp(usd=0.003)))

    threads = [threading.Thread(target=grant_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    with SQLiteStore(path) as store:
        child = store.load(child_id)
    assert len(said) == 2  # neither failed
    assert [r.note for r in child.limit_raises] == ["granted $0.003"]
    assert child.limits.max_budget_usd == pytest.approx(0.007)
