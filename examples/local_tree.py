"""Claim: a tree on a real local model delegates, stays within every budget and answers right.

The root agent has one tool, ``research``: a researcher child run with the
file catalog (``orchestra run``'s instructions and tools). The root cannot
read the files itself, so to answer it must call ``research``; the child
reads, answers, and its answer (not its transcript) is the root's tool
result. Against the local llama.cpp server of ``tools/local_model.py``
(``$ORCHESTRA_LOCAL_MODEL_URL``, else http://127.0.0.1:8090/v1), priced at
the design's $2 / $12 per million tokens of the server's own counts::

    python tools/local_model.py start --size 1.5b
    python examples/local_tree.py

Prints the tree (status, turns, spend and budget per run), the child's
answer and the root's. Exits 1 unless the child was called, its answer
reached the root, every run spent within its budget, and the root's answer
is right by the sandbox's facts (worker 7, after 30000 ms).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import trio

from orchestra import (
    CATALOG_INSTRUCTIONS,
    Agent,
    Limits,
    OpenAIProvider,
    Price,
    PriceTable,
    Runner,
    RunResult,
    catalog,
)
from orchestra.testing import make_sandbox

DEFAULT_URL = "http://127.0.0.1:8090/v1"
QUESTION = "Which worker timed out, and after how long?"
ROOT_BUDGET = 0.1
CHILD_BUDGET = 0.04
ROOT_INSTRUCTIONS = (
    "You answer the user's question about the files in the working directory. You cannot "
    "read the files yourself: call the research tool with the question, and it reads them "
    "for you. Then answer from what research returned, in one or two plain sentences."
)


def root_agent(directory: Path) -> Agent:
    researcher = Agent(
        name="researcher",
        model="local",
        instructions=CATALOG_INSTRUCTIONS,
        tools=[t for t in catalog(directory) if t.read_only],
        limits=Limits(max_turns=6, max_budget_usd=CHILD_BUDGET),
        look_first=True,
    )
    research = researcher.as_tool(
        name="research", description="Research a question about the files with a sub-agent."
    )
    return Agent(
        name="assistant",
        model="local",
        instructions=ROOT_INSTRUCTIONS,
        tools=(research,),
        limits=Limits(max_turns=12, max_budget_usd=ROOT_BUDGET),
        look_first=True,
    )


def right(answer: str) -> bool:
    """Worker 7 (no other worker) after 30000 ms (or 30 s): what errors.log says."""
    workers = set(re.findall(r"worker\D{0,3}(\d+)", answer, re.IGNORECASE))
    took = re.search(r"30,?000\s*ms|30\s*(s\b|sec)", answer) is not None
    return workers == {"7"} and took


def problems(result: RunResult) -> list[str]:
    found = []
    if not result.children:
        found.append("the root never called research")
    for run in result.walk():
        state = run.state
        if state.tree.cost_pico > state.limits.budget_pico:
            found.append(f"{state.agent} spent past its budget")
    children = [c.state.answer or "" for c in result.children]
    results = [m.get("content") or "" for m in result.state.messages if m["role"] == "tool"]
    if children and not any(a and a in r for a in children for r in results):
        found.append("no child's answer reached the root")
    if not right(result.state.answer or ""):
        found.append("the root's answer is not right")
    return found


async def main(directory: Path, url: str) -> RunResult:
    provider = OpenAIProvider(base_url=url, api_key="local", timeout=600.0)
    prices = PriceTable(models={"local": Price()})  # the design's $2 / $12 per million
    try:
        return await Runner(provider=provider, prices=prices).run(root_agent(directory), QUESTION)
    finally:
        await provider.aclose()


def show(result: RunResult) -> None:
    for run in result.walk():
        state = run.state
        indent = "  " if state.parent_id else ""
        print(
            f"{indent}{state.agent:<11} {state.status.value:<10} turns={state.turns} "
            f"spent=${state.tree.cost_usd:.6f} of ${state.limits.max_budget_usd:.2f}"
        )
        print(f"{indent}  -> {' '.join((state.answer or state.reason or '').split())[:70]}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="local-tree-") as tmp:
        box = make_sandbox(Path(tmp) / "sandbox")
        url = os.environ.get("ORCHESTRA_LOCAL_MODEL_URL") or DEFAULT_URL
        result = trio.run(main, box, url)
    print(f"question: {QUESTION}")
    show(result)
    found = problems(result)
    print("OK: delegated, within budgets, answered right" if not found else "; ".join(found))
    sys.exit(1 if found else 0)
