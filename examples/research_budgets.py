"""Claim: in a tree, each child has its own budget, and spend adds up exactly to the root.

Runs two research trees: a root agent with a ``research`` tool (a researcher
agent, :meth:`Agent.as_tool`) under a $0.05 budget, each child carved a $0.01
budget of its own from what the root has left.

* ``research``: three questions at once, three children that complete;
* ``research_runaway``: one child never stops (it reads a file every turn);
  its own budget stops it ``budget_exceeded`` within $0.01, its sibling
  completes, and the root still answers with both findings.

Prints per run the status, turns, spend (a child's tree spend, the root's
own) and budget, and per tree the total. Exits 1 unless every run spent
within its budget and every tree's total is exactly the root's own spend
plus its children's (integer pico-dollars).

    python examples/research_budgets.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, RunResult, catalog
from orchestra.testing import make_sandbox, scripted_server

ROOT_BUDGET = 0.05
CHILD_BUDGET = 0.01
INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
TREES = ("research", "research_runaway")


def root_agent(scenario: str, directory: Path) -> Agent:
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher. Answer the question using the tools.",
        tools=catalog(directory),
        limits=Limits(max_turns=100, max_budget_usd=CHILD_BUDGET),
    )
    research = researcher.as_tool(
        name="research", description="Research a question with a sub-agent."
    )
    return Agent(
        name="assistant",
        model=scenario,
        instructions=INSTRUCTIONS,
        tools=(*catalog(directory), research),
        limits=Limits(max_turns=20, max_budget_usd=ROOT_BUDGET),
    )


async def trees(directory: Path) -> dict[str, RunResult]:
    results = {}
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for scenario in TREES:
            agent = root_agent(scenario, directory)
            results[scenario] = await runner.run(agent, "Look into the logs.")
        await provider.aclose()
    return results


def question(result: RunResult) -> str:
    users = (m for m in result.state.messages if m.get("role") == "user")
    text = str(next(users, {}).get("content", ""))
    return text if len(text) <= 27 else text[:24] + "..."


def row(name: str, status: str, turns: str, spent: float, budget: float | None) -> str:
    within = "-" if budget is None else ("yes" if spent <= budget else "NO")
    shown = "-" if budget is None else f"{budget:.6f}"
    return f"{name:<29} {status:<16} {turns:>5} {spent:>9.6f} {shown:>9} {within:>6}"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="research-budgets-") as tmp:
        results = trio.run(trees, make_sandbox(tmp))
    ok = True
    for i, (scenario, root) in enumerate(results.items()):
        if i:
            print()
        print(f"{scenario}: root budget ${ROOT_BUDGET}, ${CHILD_BUDGET} per child")
        print(f"{'run':<29} {'status':<16} {'turns':>5} {'spent':>9} {'budget':>9} {'within':>6}")
        state = root.state
        print(row("root (own calls)", state.status.value, str(state.turns), root.cost_usd, None))
        children_pico = 0
        for child in root.ordered_children():
            budget = child.state.limits.max_budget_usd
            spent = child.tree_cost_usd
            children_pico += child.state.tree.cost_pico
            print(
                row(
                    "  " + question(child),
                    child.status.value,
                    str(child.state.turns),
                    spent,
                    budget,
                )
            )
            ok = ok and budget is not None and budget <= CHILD_BUDGET and spent <= budget
        total = root.tree_cost_usd
        exact = state.tree.cost_pico == state.own.cost_pico + children_pico
        print(row("tree total", "(root + children)", "", total, ROOT_BUDGET))
        print(f"tree total = root own + children, to the pico-dollar: {'yes' if exact else 'NO'}")
        ok = ok and exact and total <= ROOT_BUDGET and len(root.children) > 0
    runaway = results["research_runaway"]
    stopped = {c.status.value for c in runaway.children}
    ok = ok and "budget_exceeded" in stopped and runaway.status.value == "completed"
    if not ok:
        print("CLAIM FAILED: a run spent more than its budget, or a total does not add up")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
