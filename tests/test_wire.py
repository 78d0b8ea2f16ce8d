"""Limits across the wire (issue 50, point 3): the carve a tool holds and sends,
read and honoured by the service that receives it."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import (
    Agent,
    ConfigError,
    Event,
    Limits,
    OpenAIProvider,
    Runner,
    ToolContext,
    ToolError,
    tool,
)
from orchestra.testing import ScriptedTransport
from orchestra.wire import HEADER, WireLimits


def test_a_carve_goes_through_a_header_and_tightens_the_services_own_limits() -> None:
    sent = WireLimits(budget_usd=0.006, deadline=1_800_000_000.5, caller="run_x")
    got = WireLimits.from_headers({HEADER.lower(): sent.headers()[HEADER]})
    assert got == sent
    own = Limits(max_turns=9, max_budget_usd=1.0, deadline=1_900_000_000.0)
    tight = got.within(own)
    assert (tight.max_budget_usd, tight.deadline, tight.max_turns) == (0.006, 1_800_000_000.5, 9)
    assert WireLimits(budget_usd=2.0).within(own).max_budget_usd == 1.0
    assert WireLimits.from_headers({"other": "x"}) is None


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("{not json", "not JSON"),
        ('["budget_usd"]', "a JSON object of"),
        ('{"budget_usd": 1, "extra": 2}', "a JSON object of"),
        ('{"budget_usd": -1}', "budget_usd must not be negative"),
        ('{"budget_usd": true}', "budget_usd must be a finite number"),
        ('{"deadline": 1e999}', "deadline must be a finite number"),
        ('{"caller": 7}', "caller must be a run id"),
    ],
)
def test_a_header_that_is_not_a_carve_is_refused_in_one_line(raw: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        WireLimits.from_headers({HEADER: raw})
    assert "\n" not in str(caught.value)


def _lead(body: Any) -> Agent:
    @tool(read_only=True)
    async def research(question: str, ctx: ToolContext) -> str:
        """Ask another service."""
        return await body(ctx)

    return Agent(name="lead", model="deep", tools=[research], limits=Limits(max_budget_usd=0.05))


async def _run(body: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    result = await Runner(provider=provider, sink=events.append).run(_lead(body), "Why?")
    return result, events


async def test_the_run_holds_the_carve_then_is_charged_what_the_service_reported() -> None:
    seen: list[WireLimits | None] = []

    def reporting(usd: float) -> Any:
        async def body(ctx: ToolContext) -> str:
            async with ctx.remote(usd=0.01) as call:
                seen.append(WireLimits.from_headers(call.headers()))
                call.report(usd)
            return "the service answered"

        return body

    free, _ = await _run(reporting(0.0))  # the same tree, the service costing nothing
    result, events = await _run(reporting(0.004))
    carve = seen[-1]
    assert carve is not None and carve.budget_usd == 0.01 and carve.caller == result.run_id
    spend = [e.data for e in events if e.type == "remote_spend"]
    assert spend == [{"call_id": spend[0]["call_id"], "cost_usd": 0.004, "reported": True}]
    assert result.tree_cost_usd == pytest.approx(free.tree_cost_usd + 0.004, abs=1e-9)


async def test_a_call_that_reports_nothing_is_charged_all_it_held() -> None:
    async def body(ctx: ToolContext) -> str:
        async with ctx.remote(usd=0.01):
            raise ToolError("the service is down")

    result, events = await _run(body)
    spend = [e.data for e in events if e.type == "remote_spend"]
    assert spend[0]["cost_usd"] == 0.01 and spend[0]["reported"] is False
    assert "the service is down" in str(result.state.messages)


async def test_a_carve_is_at_most_what_the_run_has_left_and_refused_when_nothing_is() -> None:
    held: list[float | None] = []

    async def body(ctx: ToolContext) -> str:
        async with ctx.remote(usd=5.0) as call:
            held.append(call.limits.budget_usd)
            call.report(0.0)
        return "ok"

    await _run(body)
    assert held[0] is not None and 0 < held[0] < 0.05

    async def greedy(ctx: ToolContext) -> str:
        async with ctx.remote(usd=0.05) as call:
            call.report(0.05)  # the service spent all of it
        async with ctx.remote(usd=0.01):
            return "never"

    result, _ = await _run(greedy)
    assert "no budget is left to pass on" in str(result.state.messages)
