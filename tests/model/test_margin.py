"""The budget holds against servers that count differently, and says so when it cannot."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestra import (
    FIRST_MARGIN,
    Calibration,
    ChatReply,
    ChatRequest,
    Limits,
    Margin,
    Runner,
    RunResult,
    Status,
)
from orchestra._model.margin import PAD
from orchestra._model.reply import _clean_message
from orchestra._money import from_usd
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra.testing import reply as scripted_reply

Usage = dict[str, Any]


class Skewed:
    """The scripted provider, with the usage it reports rewritten by ``skew``.

    ``skew(usage, request)`` returns the usage the "server" reports (None: no
    usage at all). ``ignore_max_tokens`` makes it answer as if no limit was set.
    """

    base_url = "http://skewed.invalid/v1"

    def __init__(
        self, skew: Callable[[Usage, ChatRequest], Usage | None], *, ignore_max_tokens: bool = False
    ) -> None:
        self.skew = skew
        self.ignore_max_tokens = ignore_max_tokens
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.calls += 1
        payload = request.payload()
        if self.ignore_max_tokens:
            payload.pop("max_tokens", None)
        body = scripted_reply(payload)
        usage = self.skew(dict(body["usage"]), request)
        choice = body["choices"][0]
        return ChatReply(
            message=_clean_message(choice["message"]),
            finish_reason=choice["finish_reason"],
            prompt_tokens=usage["prompt_tokens"] if usage else 0,
            completion_tokens=usage["completion_tokens"] if usage else 0,
            usage_reported=usage is not None,
        )


def sixty_percent_more(usage: Usage, request: ChatRequest) -> Usage:
    return {**usage, "prompt_tokens": math.ceil(usage["prompt_tokens"] * 1.6)}


def llama_template(usage: Usage, request: ChatRequest) -> Usage:
    """llama.cpp's chat template as measured: +167 on turn 1, +22 per tool round trip."""
    round_trips = sum(m["role"] == "tool" for m in request.messages)
    return {**usage, "prompt_tokens": usage["prompt_tokens"] + 167 + 22 * round_trips}


async def runaway(sandbox: Path, runner: Runner, budget: float, **limits: Any) -> RunResult:
    agent = demo_agent("runaway", sandbox, limits=Limits(max_turns=60, **limits))
    return await runner.run(agent, demo_task("runaway"), limits=Limits(max_budget_usd=budget))


BUDGETS = [0.0004 + i * 0.0002 for i in range(50)]  # $0.0004 .. $0.0102


@pytest.mark.parametrize("skew", [sixty_percent_more, llama_template])
async def test_a_sweep_of_budgets_never_overshoots_a_server_that_counts_more(sandbox, skew):
    runner = Runner(provider=Skewed(skew))  # one runner: it learns the server once
    for budget in BUDGETS:
        result = await runaway(sandbox, runner, budget)
        assert result.status is Status.BUDGET_EXCEEDED, budget
        assert result.state.tree.cost_pico <= from_usd(budget), (budget, result.state.reason)
        assert result.state.turns >= 1 or budget < 0.0025  # the margin costs little


async def test_each_fresh_runner_holds_the_budget_from_its_first_call(sandbox):
    for budget in BUDGETS[::5]:
        result = await runaway(sandbox, Runner(provider=Skewed(sixty_percent_more)), budget)
        assert result.state.tree.cost_pico <= from_usd(budget), budget


async def test_without_a_margin_the_same_sweep_overshoots(sandbox):
    """The sweep above can fail: reserving our own count alone is not enough."""
    runner = Runner(provider=Skewed(sixty_percent_more), calibration=Calibration(first=Margin()))
    over = 0
    for budget in BUDGETS:
        result = await runaway(sandbox, runner, budget)
        over += result.state.tree.cost_pico > from_usd(budget)
    assert over > 0


async def test_an_overshoot_is_reported_never_completed(sandbox):
    """A server that ignores max_tokens: the run says it went over, and by how much."""
    provider = Skewed(lambda u, r: {**u, "completion_tokens": 500_000}, ignore_max_tokens=True)
    agent = demo_agent("plan", sandbox)
    result = await Runner(provider=provider).run(
        agent, demo_task("plan"), limits=Limits(max_budget_usd=0.05)
    )
    assert result.status is Status.BUDGET_EXCEEDED
    assert result.state.tree.cost_pico > from_usd(0.05)
    assert "over budget" in result.state.reason and "over (" in result.state.reason
    assert provider.calls == 1  # nothing more was spent, no tool was dispatched


async def test_a_parent_whose_child_overshot_says_so(sandbox):
    """The parent's gate finds the tree already past the budget and says by how much."""
    provider = Skewed(
        lambda u, r: {**u, "completion_tokens": 20_000} if r.model == "researcher" else u,
        ignore_max_tokens=True,
    )
    agent = demo_agent("research", sandbox)
    result = await Runner(provider=provider).run(
        agent, demo_task("research"), limits=Limits(max_budget_usd=0.2)
    )
    assert result.status is Status.BUDGET_EXCEEDED
    assert "over budget" in result.state.reason
    assert "$0.000000 left" not in result.state.reason


async def test_a_reply_without_usage_is_charged_as_estimated(sandbox):
    provider = Skewed(lambda u, r: None)
    events: list[Any] = []
    result = await Runner(provider=provider, sink=events.append).run(
        demo_agent("plan", sandbox), demo_task("plan")
    )
    assert result.status is Status.COMPLETED
    turns = [e for e in events if e.type == "turn"]
    assert turns and all(e.data["usage_reported"] is False for e in turns)
    truth = Runner(provider=Skewed(lambda u, r: u))
    exact = await truth.run(demo_agent("plan", sandbox), demo_task("plan"))
    assert result.state.own.prompt_tokens >= exact.state.own.prompt_tokens  # never under
    assert result.state.own.cost_pico > 0


async def test_a_reply_without_usage_is_charged_our_count_of_it_and_the_reason_says_so(sandbox):
    """The prompt margin widens the prompt (as reserved), never the reply: the
    scripted server counts the replies of ``plan`` as we do (34 tokens)."""
    estimated = await Runner(provider=Skewed(lambda u, r: None)).run(
        demo_agent("plan", sandbox), demo_task("plan")
    )
    exact = await Runner(provider=Skewed(lambda u, r: u)).run(
        demo_agent("plan", sandbox), demo_task("plan")
    )
    assert estimated.state.own.completion_tokens == exact.state.own.completion_tokens == 34
    assert estimated.state.reason == (
        "answered (3 replies without usage, charged as estimated: the prompt as reserved, "
        "our count widened by the prompt margin; the reply by our count)"
    )
    assert exact.state.reason == "answered"


def test_calibration_starts_conservative_then_learns_the_largest_gap():
    cal = Calibration()
    assert cal.margin("p", "m") == FIRST_MARGIN
    assert FIRST_MARGIN.apply(1000) >= 1600 + 167  # 60 % more, or a long template
    cal.observe("p", "m", ours=1000, theirs=1167, messages=2)
    cal.observe("p", "m", ours=2000, theirs=2189, messages=4)
    learnt = cal.margin("p", "m")
    assert learnt.apply(1000, 2) >= 1167 and learnt.apply(2000, 4) >= 2189
    assert learnt.apply(1000, 2) < FIRST_MARGIN.apply(1000)
    assert learnt.tokens == PAD
    assert cal.margin("p", "other") == FIRST_MARGIN  # per (provider, model)
    cal.observe("q", "m", ours=1000, theirs=900, messages=2)  # counts less: no slack needed
    assert cal.margin("q", "m").apply(1000, 2) == 1000 + PAD


def test_a_fixed_margin_is_a_floor():
    runner = Runner(provider=Skewed(llama_template), prompt_margin=Margin(ratio=0.5))
    runner.pricing.observe_prompt("m", ours=1000, theirs=1000, messages=2)
    assert runner.pricing.margin_for("m").ratio == 0.5


async def test_a_token_budget_needs_no_prices_and_is_carved_down_the_tree(sandbox):
    agent = demo_agent("research", sandbox)
    result = await Runner(provider=Skewed(lambda u, r: u)).run(
        agent, demo_task("research"), limits=Limits(max_tokens_total=6000)
    )
    assert result.state.tree.tokens <= 6000
    children = list(result.walk())[1:]
    assert children
    for child in children:
        assert child.state.limits.max_tokens_total is not None
        assert child.state.limits.max_tokens_total <= 6000
    assert result.status in {Status.BUDGET_EXCEEDED, Status.COMPLETED}


async def test_a_token_budget_stops_a_runaway_before_the_call(sandbox):
    agent = demo_agent("runaway", sandbox, limits=Limits(max_turns=60))
    provider = Skewed(sixty_percent_more)
    result = await Runner(provider=provider).run(
        agent, demo_task("runaway"), limits=Limits(max_tokens_total=5000)
    )
    assert result.status is Status.BUDGET_EXCEEDED
    assert result.state.reason.startswith("token budget")
    assert result.state.tree.tokens <= 5000
