"""Prices: a model priced by assumption or at zero is said, not silent."""

from __future__ import annotations

from typing import Any

from orchestra import Limits, Price, PriceTable, Runner, Status
from orchestra._recipes.demo import demo_agent, demo_task


def test_an_unknown_model_is_priced_by_assumption_and_said_so():
    table = PriceTable(models={"known": Price(input_per_million=1, output_per_million=2)})
    assert table.warning("known", budgeted=True) is None
    said = table.warning("mystery", budgeted=False)
    assert said is not None and "no price for model 'mystery'" in said and "$2.00" in said
    assert PriceTable(warn_unknown=False).warning("mystery", budgeted=False) is None


def test_a_zero_price_under_a_usd_budget_is_said():
    table = PriceTable(models={"free": Price(input_per_million=0, output_per_million=0)})
    said = table.warning("free", budgeted=True)
    assert said is not None and "zero price" in said and "max_tokens_total" in said
    assert table.warning("free", budgeted=False) is None


async def test_a_run_emits_its_price_warning_once(sandbox, provider):
    events: list[Any] = []
    runner = Runner(provider=provider, sink=events.append)
    result = await runner.run(demo_agent("plan", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    warnings = [e for e in events if e.type == "price_warning"]
    assert len(warnings) == 1 and warnings[0].data["model"] == "plan"


async def test_a_token_budget_binds_where_a_zero_price_cannot(sandbox, provider):
    free = PriceTable(default=Price(input_per_million=0, output_per_million=0))
    runner = Runner(provider=provider, prices=free)
    agent = demo_agent("runaway", sandbox)
    usd = Limits(max_turns=30, max_budget_usd=0.001)
    unbound = await runner.run(agent, demo_task("runaway"), limits=usd)
    assert unbound.status is Status.MAX_TURNS_EXCEEDED  # the USD budget never bit
    tokens = Limits(max_turns=30, max_budget_usd=0.001, max_tokens_total=4000)
    bound = await runner.run(agent, demo_task("runaway"), limits=tokens)
    assert bound.status is Status.BUDGET_EXCEEDED and bound.state.tree.tokens <= 4000
