"""Claim: with wind-down, a run stopped by a limit hands back what it found, and no
run ever spends past its budget.

Against the scripted provider (in-process), each tree with and without a
wind-down reserve of 128 output tokens (``Limits(wind_down_tokens=128)``):

* ``research_runaway`` with each child's budget at $0.004 and at $0.05 (and 8
  turns): the child that never stops ends at its limit; with wind-down it
  answers from what it read, marked partial, and its parent's answer carries it;
* 300 random trees (``research``, ``research_runaway`` or ``deep``; random root
  budgets of $0.002 to $0.05, child budgets of $0.001 to $0.02, child turn caps
  of 2 to 8), the same trees both ways.

Prints, per way: runs stopped at a limit, how many of them handed back an
answer, runs over their budget, and the total spend. Exits 1 unless every
limit-stopped ``research_runaway`` child answers with wind-down (and none
without), at least half of the random trees' limit-stopped runs answer with
it, and no run anywhere spent past its budget.

    python examples/wind_down.py
"""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import trio

from orchestra import Limits, OpenAIProvider, Runner, RunResult, Status
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox

WIND = 128
TREES = 300
SEED = 32
LIMITS = {Status.BUDGET_EXCEEDED, Status.MAX_TURNS_EXCEEDED, Status.DEADLINE_EXCEEDED}


@attrs.frozen
class Tree:
    scenario: str
    root_budget: float
    child_budget: float
    child_turns: int


@attrs.define
class Tally:
    stopped: int = 0
    answered: int = 0
    over: int = 0
    spent: float = 0.0

    def add(self, result: RunResult) -> None:
        self.spent += result.tree_cost_usd
        for node in walk(result):
            state = node.state
            self.over += state.tree.cost_pico > (state.limits.budget_pico or 1 << 62)
            if state.status in LIMITS:
                self.stopped += 1
                self.answered += bool(state.answer_partial and state.answer)


def walk(result: RunResult) -> Iterator[RunResult]:
    yield result
    for child in result.children:
        yield from walk(child)


async def run_tree(tree: Tree, directory: Path, wind: int | None) -> RunResult:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    child = Limits(max_turns=tree.child_turns, max_budget_usd=tree.child_budget)
    limits = Limits(max_turns=20, max_budget_usd=tree.root_budget, wind_down_tokens=wind)
    agent = demo_agent(tree.scenario, directory, limits=limits, child_limits=child)
    try:
        return await Runner(provider=provider).run(agent, demo_task(tree.scenario))
    finally:
        await provider.aclose()


def random_trees() -> list[Tree]:
    rng = random.Random(SEED)
    return [
        Tree(
            scenario=rng.choice(("research", "research_runaway", "deep")),
            root_budget=round(rng.uniform(0.002, 0.05), 6),
            child_budget=round(rng.uniform(0.001, 0.02), 6),
            child_turns=rng.randint(2, 8),
        )
        for _ in range(TREES)
    ]


async def runaway_children(directory: Path, wind: int | None) -> list[RunResult]:
    """The limit-stopped children of research_runaway at two child budgets."""
    found = []
    for budget in (0.004, 0.05):
        result = await run_tree(Tree("research_runaway", 1.0, budget, 8), directory, wind)
        stopped = [c for c in result.children if c.status in LIMITS]
        for child in stopped:
            partial = child.answer_partial and child.answer
            print(
                f"  child ${budget}: {child.status.value}, {child.state.turns} turns, "
                f"${child.tree_cost_usd:.4f}: " + ("answered" if partial else "no answer")
            )
            if partial:
                print(f"    {child.answer[:72]!r}")
            if partial and child.answer not in (result.answer or ""):
                print("  ...but its parent's answer does not carry it")
                return []
        found += stopped
    return found


async def main(directory: Path) -> int:
    failures = []
    for wind in (None, WIND):
        name = "without wind-down" if wind is None else f"with wind-down ({wind} tokens)"
        print(f"research_runaway, {name}:")
        children = await runaway_children(directory, wind)
        answered = sum(bool(c.answer_partial and c.answer) for c in children)
        if not children or answered != (len(children) if wind else 0):
            failures.append(f"research_runaway {name}: {answered} of {len(children)} answered")
        tally = Tally()
        for tree in random_trees():
            tally.add(await run_tree(tree, directory, wind))
        print(
            f"{TREES} random trees, {name}:\n  {tally.stopped} runs stopped at a limit, "
            f"{tally.answered} handed back an answer;\n  {tally.over} over budget; "
            f"spent ${tally.spent:.4f}"
        )
        if tally.over:
            failures.append(f"{name}: {tally.over} runs over budget")
        if wind and tally.answered * 2 < tally.stopped:
            failures.append(f"{name}: only {tally.answered} of {tally.stopped} answered")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="wind-down-") as tmp:
        sys.exit(trio.run(main, make_sandbox(Path(tmp) / "sandbox")))
