"""Fair carving: siblings share the pool, the parent keeps its answer, no child that cannot call."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from orchestra import (
    Agent,
    Carving,
    ChatReply,
    ChatRequest,
    ConfigError,
    Limits,
    Runner,
    Status,
    tool,
)
from orchestra._money import from_usd
from orchestra.testing import tool_calls


async def test_research_at_two_cents_gets_all_three_findings(run_scenario):
    result = await run_scenario("research", limits=Limits(max_turns=20, max_budget_usd=0.02))
    assert result.status is Status.COMPLETED
    kids = result.children
    assert len(kids) == 3 and all(k.status is Status.COMPLETED for k in kids)
    answer = result.answer or ""
    for found in ("worker 7 timed out", "504", "restart it once"):
        assert found in answer
    assert result.state.tree.cost_pico <= from_usd(0.02)


async def test_research_at_one_cent_answers_and_starts_no_child_that_cannot_call(run_scenario):
    result = await run_scenario("research", limits=Limits(max_turns=20, max_budget_usd=0.01))
    assert result.status is Status.COMPLETED and result.answer
    assert result.children, "at least one child is started"
    assert all(k.state.turns >= 1 for k in result.children)
    told = [m["content"] for m in result.state.messages if m["role"] == "tool"]
    refused = [t for t in told if "not enough budget left for this child" in t]
    assert len(refused) + len(result.children) == 3
    assert all("needed" in t and "left for one call" in t for t in refused)
    assert result.state.tree.cost_pico <= from_usd(0.01)


async def test_siblings_share_equally_whatever_order_they_start_in(run_scenario):
    child = Limits(max_turns=8)  # no budget of their own: the share is their cap
    result = await run_scenario(
        "research", limits=Limits(max_turns=20, max_budget_usd=0.03), child_limits=child
    )
    given = sorted(k.state.limits.budget_pico or 0 for k in result.children)
    assert len(given) == 3
    # shares were equal when carved; the first to end gave its rest to the others
    assert given[0] >= from_usd(0.003)


class _Planner:
    """A parent model that calls tools ``names`` at once, then answers; children
    answer at once (a fixed reply size, so costs are known)."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        if request.model != "p":
            await trio.sleep(float(request.model.removeprefix("c")))
            message: dict[str, Any] = {"role": "assistant", "content": "found it"}
        elif any(m["role"] == "tool" for m in request.messages):
            message = {"role": "assistant", "content": "done"}
        else:
            message = tool_calls(*((name, {"question": "q"}) for name in self.names))
        reason = "tool_calls" if message.get("tool_calls") else "stop"
        return ChatReply(
            message=message, prompt_tokens=50, completion_tokens=10, finish_reason=reason
        )


def _parent(carving: Carving, budget: float, *kids: Agent) -> Agent:
    return Agent(
        name="parent",
        model="p",
        tools=tuple(kid.as_tool() for kid in kids),
        limits=Limits(max_budget_usd=budget),
        carving=carving,
    )


def _kid(name: str, seconds: int = 0) -> Agent:
    return Agent(name=name, model=f"c{seconds}")


async def _carved(carving: Carving, *names: str) -> dict[str, float]:
    """The budgets the children of one reply started with (before any gave back)."""
    events: list[Any] = []
    parent = _parent(carving, 0.5, *(_kid(name) for name in names))
    await Runner(provider=_Planner(*names), sink=events.append).run(parent, "q")
    started = [e for e in events if e.type == "run_started" and e.data["agent"] != "parent"]
    return {e.data["agent"]: e.data["limits"]["max_budget_usd"] for e in started}


async def test_weights_give_a_tool_a_larger_share():
    carved = await _carved(Carving(weights={"a": 2}), "a", "b")
    assert carved["a"] == pytest.approx(2 * carved["b"], rel=1e-6)


async def test_equal_shares_by_default():
    carved = await _carved(Carving(), "a", "b", "c")
    assert carved["a"] == pytest.approx(carved["b"], rel=1e-6)
    assert carved["b"] == pytest.approx(carved["c"], rel=1e-6)


async def test_as_left_caps_each_child_at_what_is_left_when_it_starts():
    carved = await _carved(Carving(split="as_left"), "a", "b")
    assert min(carved.values()) > 0.45  # each may spend (nearly) the whole pool


async def test_a_child_that_ends_gives_its_rest_to_a_sibling_still_running(autojump_clock):
    kids = (_kid("fast", 0), _kid("slow", 5))
    parent = _parent(Carving(), 0.5, *kids)
    result = await Runner(provider=_Planner("fast", "slow")).run(parent, "q")
    fast, slow = sorted(result.children, key=lambda k: k.state.agent)
    assert (fast.state.agent, slow.state.agent) == ("fast", "slow")
    spent = fast.state.tree.cost_pico
    assert slow.state.limits.budget_pico == pytest.approx(
        2 * fast.state.limits.budget_pico - spent, abs=2
    )


async def test_the_parent_keeps_what_its_answer_needs():
    kids = tuple(_kid(f"k{i}") for i in range(3))
    parent = _parent(Carving(answer_tokens=100), 0.01, *kids)
    provider = _Planner(*(f"k{i}" for i in range(3)))
    result = await Runner(provider=provider).run(parent, "q")
    assert result.status is Status.COMPLETED and result.answer == "done"
    last = provider.requests[-1]
    assert last.model == "p" and last.max_tokens is not None and last.max_tokens >= 100


async def test_a_child_whose_own_limit_cannot_pay_a_call_is_not_started():
    tiny = Agent(name="tiny", model="c0", limits=Limits(max_budget_usd=0.000001))
    parent = _parent(Carving(), 0.5, tiny)
    result = await Runner(provider=_Planner("tiny")).run(parent, "q")
    assert result.children == ()
    told = next(m["content"] for m in result.state.messages if m["role"] == "tool")
    assert told.startswith("tiny was not started: not enough budget left for this child: $")


def test_a_carving_policy_refuses_nonsense():
    with pytest.raises(ConfigError, match="split"):
        Carving(split="largest")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="weights"):
        Carving(weights={"a": 0})
    with pytest.raises(ConfigError, match="answer_tokens"):
        Carving(answer_tokens=-1)


async def test_a_root_with_ten_turns_is_not_charged_its_childrens_turns(run_scenario):
    result = await run_scenario("research", limits=Limits(max_turns=10))
    assert result.status is Status.COMPLETED
    assert sum(k.state.turns for k in result.children) == 9
    assert result.state.turns == 2 and result.state.tree.model_calls == 11


@tool(name="echo", read_only=True)
def _echo(text: str) -> str:
    """Echo.

    Args:
        text: what to say.
    """
    return text


def test_the_carving_is_part_of_the_agent_value():
    a = Agent(name="a", model="m", tools=(_echo,))
    assert a.carving == Carving() and json.dumps(a.carving.split) == '"equal"'
