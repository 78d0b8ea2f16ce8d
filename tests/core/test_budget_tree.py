"""The budget tree: carved child budgets, live roll-up, zero overshoot."""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import (
    Agent,
    Carving,
    ChatReply,
    ChatRequest,
    Limits,
    Runner,
    RunResult,
    Status,
    Tool,
    ToolContext,
    tool,
)
from orchestra._core.run import LiveRun
from orchestra._model.tokens import count_completion, count_prompt, encoding
from orchestra._money import from_usd
from orchestra._state import RunState, Usage

# -- the scripted research demo ----------------------------------------------


def assert_tree_sums(result: RunResult) -> None:
    for node in result.walk():
        children = sum(c.state.tree.cost_pico for c in node.children)
        assert node.state.tree.cost_pico == node.state.own.cost_pico + children
        budget = node.state.limits.budget_pico
        assert budget is None or node.state.tree.cost_pico <= budget


async def test_research_tree_rolls_up_exactly(run_scenario):
    result = await run_scenario("research")
    assert result.status is Status.COMPLETED
    assert len(result.children) == 3
    assert all(c.status is Status.COMPLETED for c in result.children)
    assert result.state.own.child_runs == 3
    assert_tree_sums(result)
    assert {c.state.parent_id for c in result.children} == {result.run_id}
    assert {c.state.root_id for c in result.children} == {result.run_id}


async def test_child_transcript_stays_out_of_the_parent(run_scenario):
    result = await run_scenario("research")
    parent_texts = [m.get("content") for m in result.state.messages]
    for child in result.children:
        assert child.answer in parent_texts  # the answer came back as the tool result
        child_tool_texts = [m["content"] for m in child.state.messages if m["role"] == "tool"]
        assert child_tool_texts
        assert not set(child_tool_texts) & set(parent_texts)  # its transcript did not


async def test_runaway_child_stops_at_its_budget_and_parent_answers(run_scenario):
    result = await run_scenario(
        "research_runaway",
        limits=Limits(max_budget_usd=0.02, max_turns=40),
        child_limits=Limits(max_turns=30, max_budget_usd=0.005),
    )
    assert result.status is Status.COMPLETED
    statuses = sorted(c.status.value for c in result.children)
    assert statuses == ["budget_exceeded", "completed"]
    runaway = next(c for c in result.children if c.status is Status.BUDGET_EXCEEDED)
    assert runaway.tree_cost_usd <= 0.005
    assert "researcher stopped: budget_exceeded" in json.dumps(result.state.messages)
    assert_tree_sums(result)


async def test_deep_tree_has_three_levels_below_the_root(run_scenario):
    result = await run_scenario("deep", child_limits=Limits(max_turns=10, max_budget_usd=0.05))
    assert result.status is Status.COMPLETED
    depth, node = 0, result
    while node.children:
        depth, node = depth + 1, node.children[0]
    assert depth == 3
    assert_tree_sums(result)


async def test_child_is_not_started_when_the_parent_has_nothing_left(runner):
    parent = LiveRun(
        state=RunState(
            run_id="p",
            root_id="p",
            agent="a",
            model="m",
            limits=Limits(max_budget_usd=0.01),
            tree=Usage(cost_pico=from_usd(0.01)),
        ),
        agent=Agent(name="a", model="m"),
        runner=runner,
    )
    text = await runner.spawn_child(parent, "c1", Agent(name="researcher", model="researcher"), "q")
    assert text.startswith(
        "researcher was not started: not enough budget left for this child: $0.00"
    )
    assert "needed, $0.000000 left for one call" in text
    assert parent.children == []


async def test_child_deadline_never_later_than_parent(run_scenario, autojump_clock):
    result = await run_scenario(
        "slow_tree", limits=Limits(timeout_s=1.5), child_limits=Limits(timeout_s=60)
    )
    assert result.status is Status.DEADLINE_EXCEEDED
    assert trio.current_time() == 1.5
    assert all(c.status is Status.DEADLINE_EXCEEDED for c in result.children)
    assert all(c.state.limits.deadline <= result.state.limits.deadline for c in result.children)


# -- property: random trees, budgets, scripts and concurrency ------------------

node_spec = st.recursive(
    st.fixed_dictionaries(
        {
            "loops": st.integers(0, 6),
            "pad": st.integers(1, 400),
            "budget": st.floats(0.0, 0.01),
            "delay": st.integers(0, 3),
        }
    ),
    lambda children: st.fixed_dictionaries(
        {
            "loops": st.integers(0, 4),
            "pad": st.integers(1, 200),
            "budget": st.floats(0.0, 0.01),
            "delay": st.integers(0, 3),
            "children": st.lists(children, min_size=1, max_size=3),
        }
    ),
    max_leaves=8,
)


class TreeModel:
    """Plays the spec in the task: spawn children (all at once), loop, then answer."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        spec = json.loads(request.messages[0]["content"])
        turn = sum(m["role"] == "assistant" for m in request.messages)
        await trio.sleep(spec["delay"] * 0.1)
        msg = self._message(spec, turn)
        if not request.tools:  # a wind-down's last call: an answer from what it has
            msg = {"role": "assistant", "content": "found " * (spec["pad"] % 80 + 1)}
        wanted = count_completion(msg)
        assert request.max_tokens is not None
        if wanted > request.max_tokens:  # honour max_tokens as a real model does
            text = encoding().decode(encoding().encode("x " * wanted)[: request.max_tokens])
            msg, wanted = {"role": "assistant", "content": text}, request.max_tokens
        return ChatReply(
            message=msg,
            finish_reason="stop",
            completion_tokens=wanted,
            prompt_tokens=count_prompt(request.messages, request.tools),
        )

    def _message(self, spec: dict[str, Any], turn: int) -> dict[str, Any]:
        children = spec.get("children", [])
        calls = []
        if turn == 0 and children:
            calls = [("spawn", {"spec": json.dumps(c)}) for c in children]
        elif turn < spec["loops"] + (1 if children else 0):
            calls = [("pad", {"n": spec["pad"]})]
        if not calls:
            return {"role": "assistant", "content": "answer " * (spec["pad"] % 50 + 1)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{turn}_{i}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a)},
                }
                for i, (n, a) in enumerate(calls)
            ],
        }


@tool(read_only=True)
def pad(n: int) -> str:
    """Return n words."""
    return "word " * n


def tree_agent() -> Agent:
    async def spawn(spec: str, ctx: ToolContext) -> str:
        budget = json.loads(spec)["budget"]
        limits = Limits(max_budget_usd=budget, max_turns=20)
        return await ctx.run_child(agent, spec, limits=limits)

    spawn_tool = Tool(
        name="spawn",
        description="Run a child.",
        function=spawn,
        read_only=True,
        takes_context=True,
        spawns=True,
        parameters={
            "type": "object",
            "properties": {"spec": {"type": "string"}},
            "required": ["spec"],
        },
    )
    agent = Agent(
        name="node", model="tree", tools=(spawn_tool, pad), max_tokens=300, no_progress_after=None
    )
    return agent


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=node_spec, root_budget=st.floats(0.0, 0.03))
def test_no_node_ever_spends_past_its_budget(spec, root_budget):
    async def main() -> RunResult:
        runner = Runner(provider=TreeModel())
        return await runner.run(
            tree_agent(), json.dumps(spec), limits=Limits(max_budget_usd=root_budget, max_turns=200)
        )

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status in {Status.COMPLETED, Status.BUDGET_EXCEEDED}
    assert result.state.tree.cost_pico <= from_usd(root_budget)
    assert_tree_sums(result)
    for node in result.walk():
        requested = json.loads(node.state.messages[0]["content"])["budget"]
        if node.state.parent_id is not None:
            assert node.state.limits.budget_pico <= from_usd(requested)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=node_spec, root_budget=st.floats(0.0, 0.03), wind=st.integers(1, 400))
def test_with_wind_down_no_node_spends_past_its_budget_and_partial_answers_are_answers(
    spec, root_budget, wind
):
    async def main() -> RunResult:
        runner = Runner(provider=TreeModel())
        limits = Limits(max_budget_usd=root_budget, max_turns=200, wind_down_tokens=wind)
        return await runner.run(tree_agent(), json.dumps(spec), limits=limits)

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status in {Status.COMPLETED, Status.BUDGET_EXCEEDED, Status.MAX_TURNS_EXCEEDED}
    assert result.state.tree.cost_pico <= from_usd(root_budget)
    assert_tree_sums(result)
    for node in result.walk():
        state = node.state
        assert state.limits.wind_down_tokens == wind  # carved down the tree
        if state.parent_id is not None:  # a child started could make a call
            assert state.turns >= 1 or state.status is not Status.BUDGET_EXCEEDED, state.reason
        assert state.tree.cost_pico <= (state.limits.budget_pico or 0)
        if state.answer_partial:
            assert state.status is not Status.COMPLETED and state.answer
            last = state.messages[-1]["content"]
            handed = last.startswith("[Written by Orchestra, not the model: ")
            assert handed or state.messages[-2]["role"] == "system"  # the wind-down's note


# -- property: fair carving and shape limits over random trees ------------------

carving = st.builds(
    Carving,
    split=st.sampled_from(["equal", "as_left"]),
    answer_tokens=st.sampled_from([0, 64, 128]),
)
shape = st.builds(
    Limits,
    max_depth=st.none() | st.integers(0, 3),
    max_children=st.none() | st.integers(0, 3),
    max_descendants=st.none() | st.integers(0, 6),
    max_concurrent_children=st.none() | st.integers(1, 2),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=node_spec, root_budget=st.floats(0.0, 0.03), policy=carving, limits=shape)
def test_fair_carving_and_shape_limits_hold_on_random_trees(spec, root_budget, policy, limits):
    events: list[Any] = []

    async def main() -> RunResult:
        runner = Runner(provider=TreeModel(), sink=events.append)
        agent = attrs.evolve(tree_agent(), carving=policy)
        given = attrs.evolve(limits, max_budget_usd=root_budget, max_turns=200)
        return await runner.run(agent, json.dumps(spec), limits=given)

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.state.tree.cost_pico <= from_usd(root_budget)
    assert_tree_sums(result)  # no node past its budget, on every path to the root
    carved = {
        e.run_id: from_usd(e.data["limits"]["max_budget_usd"] or 0.0)
        for e in events
        if e.type == "run_started"
    }
    for node in result.walk():
        state = node.state
        if state.parent_id is not None and policy.split == "equal":
            # every child started could make a call (shares protect it; "as_left"
            # lets the siblings running first take what it needed, as documented)
            assert state.turns >= 1 or state.status is not Status.BUDGET_EXCEEDED, state.reason
        depth = 0 if limits.max_depth is None else limits.max_depth
        assert limits.max_depth is None or _levels(node) <= depth
        if limits.max_children is not None:
            assert len(node.children) <= limits.max_children
        if policy.split == "equal" and node.children:  # shares never add past the parent
            assert sum(carved[c.run_id] for c in node.children) <= carved[node.run_id]
    runs = sum(1 for _ in result.walk())
    assert limits.max_descendants is None or runs - 1 <= limits.max_descendants


def _levels(node: RunResult) -> int:
    return 1 + max((_levels(c) for c in node.children), default=-1)
