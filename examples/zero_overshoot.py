"""Claim: a budget is enforced *before* each model call, so spend never passes it.

Runs the ``runaway`` scenario (a tool call every turn, never an answer) under
budgets from $0.002 to $0.05 and prints, for each, what was spent and by how
much it stayed under. The design's harness, which checked the budget after
each call, spent $0.010780 on a $0.010 budget; here every row ends
``budget_exceeded`` at or under its budget.

    python examples/zero_overshoot.py
"""

from __future__ import annotations

import tempfile

import trio

from orchestra import Limits, OpenAIProvider, Runner, ToolPolicy
from orchestra._demo import demo_agent, demo_task
from orchestra.testing import make_sandbox, scripted_server

BUDGETS = (0.002, 0.005, 0.01, 0.02, 0.05)


async def main() -> None:
    directory = make_sandbox(tempfile.mkdtemp(prefix="zero-overshoot-"))
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        print(f"{'budget':>8} {'spent':>10} {'left':>10} {'turns':>5}  status")
        for budget in BUDGETS:
            agent = demo_agent(
                "runaway",
                directory,
                limits=Limits(max_budget_usd=budget, max_turns=1000),
                child_limits=Limits(),
                policy=ToolPolicy(),
            )
            result = await runner.run(agent, demo_task("runaway"))
            spent = result.tree_cost_usd
            assert spent <= budget, f"overspent {spent} > {budget}"
            print(
                f"{budget:>8.3f} {spent:>10.6f} {budget - spent:>10.6f} "
                f"{result.state.turns:>5}  {result.status.value}"
            )
        await provider.aclose()


if __name__ == "__main__":
    trio.run(main)
