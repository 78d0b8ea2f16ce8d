"""Limits on a tree's shape: depth, children per run and per tree, children at once."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from orchestra import Agent, ChatReply, ChatRequest, ConfigError, Limits, Runner, RunState, Status
from orchestra._stores.serde import state_from_dict, state_to_dict
from orchestra.testing import tool_calls


class _Fan:
    """Every run whose model is ``fan`` calls ``research`` ``width`` times at once
    (its first reply), then answers; a ``leaf`` answers after ``seconds``."""

    def __init__(self, width: int, seconds: float = 0.0) -> None:
        self.width, self.seconds = width, seconds
        self.running = self.most = 0

    async def complete(self, request: ChatRequest) -> ChatReply:
        if request.model == "leaf":
            self.running += 1
            self.most = max(self.most, self.running)
            await trio.sleep(self.seconds)
            self.running -= 1
            return _reply({"role": "assistant", "content": "found"})
        if any(m["role"] == "tool" for m in request.messages):
            return _reply({"role": "assistant", "content": "done"})
        calls = [("research", {"question": f"q{i}"}) for i in range(self.width)]
        return _reply(tool_calls(*calls))


def _reply(message: dict[str, Any]) -> ChatReply:
    reason = "tool_calls" if message.get("tool_calls") else "stop"
    return ChatReply(message=message, prompt_tokens=20, completion_tokens=5, finish_reason=reason)


def _tree(levels: int, limits: Limits) -> Agent:
    """``levels`` of ``fan`` runs over ``leaf`` runs."""
    agent = Agent(name="leaf", model="leaf")
    for level in range(levels):
        agent = Agent(
            name="root" if level == levels - 1 else f"fan{level}",
            model="fan",
            tools=(agent.as_tool(name="research"),),
        )
    return Agent(name=agent.name, model=agent.model, tools=agent.tools, limits=limits)


def _told(state: RunState) -> list[str]:
    return [m["content"] for m in state.messages if m["role"] == "tool"]


async def test_max_children_starts_that_many_and_tells_the_others():
    result = await Runner(provider=_Fan(3)).run(_tree(1, Limits(max_children=2)), "q")
    assert result.status is Status.COMPLETED and len(result.children) == 2
    told = [t for t in _told(result.state) if "was not started" in t]
    assert told == [
        "leaf was not started: this run may start at most 2 children "
        "(the run goes on with what it has)."
    ]


async def test_max_depth_stops_the_tree_growing():
    result = await Runner(provider=_Fan(2)).run(_tree(2, Limits(max_depth=1)), "q")
    assert result.status is Status.COMPLETED
    assert len(result.children) == 2 and all(not k.children for k in result.children)
    for kid in result.children:
        assert kid.state.limits.max_depth == 0
        assert all("depth limit" in t for t in _told(kid.state))


async def test_max_descendants_bounds_the_whole_tree():
    result = await Runner(provider=_Fan(2)).run(_tree(2, Limits(max_descendants=3)), "q")
    runs = list(result.walk())
    assert len(runs) == 4  # the root and 3 below it
    refused = [t for r in runs for t in _told(r.state) if "may hold at most 3 runs" in t]
    assert len(refused) == 3  # 2 + 2 + 2 asked, 3 started
    assert result.state.tree.child_runs == 3


async def test_max_concurrent_children_makes_the_others_wait(autojump_clock):
    provider = _Fan(4, seconds=10)
    result = await Runner(provider=provider).run(_tree(1, Limits(max_concurrent_children=2)), "q")
    assert result.status is Status.COMPLETED and len(result.children) == 4
    assert provider.most == 2 and trio.current_time() == pytest.approx(20)


async def test_without_shape_limits_all_children_run_at_once(autojump_clock):
    provider = _Fan(4, seconds=10)
    await Runner(provider=provider).run(_tree(1, Limits()), "q")
    assert provider.most == 4 and trio.current_time() == pytest.approx(10)


def test_shape_limits_are_checked():
    with pytest.raises(ConfigError, match="max_children"):
        Limits(max_children=-1)
    with pytest.raises(ConfigError, match="max_concurrent_children"):
        Limits(max_concurrent_children=0)


def test_shape_limits_are_saved_only_when_set():
    plain = RunState(run_id="r", root_id="r", agent="a", model="m", limits=Limits(max_turns=3))
    assert "max_depth" not in state_to_dict(plain)["limits"]  # older versions read it
    shaped = RunState(
        run_id="r", root_id="r", agent="a", model="m", limits=Limits(max_depth=2, max_children=3)
    )
    data = state_to_dict(shaped)
    assert data["limits"]["max_depth"] == 2
    assert state_from_dict(data).limits == shaped.limits
    assert Limits(max_children=3).shape() == {"max_children": 3}
