"""Claim: a budget is enforced *before* each model call, so spend never passes it.

Runs the ``runaway`` scenario (a tool call every turn, never an answer) under
three USD budgets, with a turn cap far out of reach (1,000), and prints for
each the turns the budget bought, what was spent, what was left and whether
spend stayed within the budget. Before each call the worst case (the prompt
with its margin plus ``max_tokens`` of output) is reserved; when the rest of
the budget cannot pay for it, the run stops ``budget_exceeded`` without
calling. The design's harness, which checked the budget after each call,
spent $0.010780 on a $0.010 budget.

Exits 1 if any run spent more than its budget (or stopped for another reason).

    python examples/zero_overshoot.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, RunResult, Status, catalog
from orchestra.testing import make_sandbox, scripted_server

BUDGETS = (0.002, 0.01, 0.05)
INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."


async def runaways(directory: Path) -> list[tuple[float, RunResult]]:
    results = []
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for budget in BUDGETS:
            agent = Agent(
                name="assistant",
                model="runaway",
                instructions=INSTRUCTIONS,
                tools=catalog(directory),
                limits=Limits(max_budget_usd=budget, max_turns=1000),
            )
            result = await runner.run(agent, "Look into the logs and tell me what went wrong.")
            results.append((budget, result))
        await provider.aclose()
    return results


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="zero-overshoot-") as tmp:
        results = trio.run(runaways, make_sandbox(tmp))
    print("runaway under a USD budget (turn cap 1,000)")
    print(f"{'budget':>8} {'turns':>5} {'spent':>10} {'left':>10}  {'spent<=budget':<13}  status")
    ok = True
    for budget, result in results:
        spent = result.tree_cost_usd
        within = spent <= budget
        ok = ok and within and result.status is Status.BUDGET_EXCEEDED
        print(
            f"{budget:>8.3f} {result.state.turns:>5} {spent:>10.6f} {budget - spent:>10.6f}  "
            f"{'yes' if within else 'NO':<13}  {result.status.value}"
        )
    if not ok:
        print("CLAIM FAILED: a run spent more than its budget, or did not stop on it")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
