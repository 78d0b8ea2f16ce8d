"""Claim: a child that runs out of budget asks for more instead of stopping; its
parent's policy grants once, a person the rest, and the tree completes within
what the root was given, across a restart.

The ``research`` demo tree (a root and three researcher children, on the
embedded scripted provider), each child limited to $0.0025 (about two of the
three calls a researcher makes) and every limit marked ``on_limit="ask"``.
The root's agent answers its children's requests itself, once each:
``TopUps(grant=TopUp(usd=0.0004), times=1)``. A child still short after that
pauses the tree (``interrupted``, ``budget_request``, with its estimate and
its answer so far). Each pause is left in a SQLite file and this process's
runner is dropped; a new runner on the same file (as another process
would) grants the estimate and resumes, until the tree completes.

Prints the policy's answers, each person's grant, and the tree's spend
against the root's budget. Exits 1 unless every child asked, the policy
granted each once, people granted the rest, the tree completed with every
child's answer, and the tree spent no more than the root's budget.

    python examples/top_up.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs
import trio

from orchestra import (
    Event,
    InterruptionKind,
    Limits,
    OpenAIProvider,
    Runner,
    SQLiteStore,
    Status,
    TopUp,
    TopUps,
)
from orchestra.testing import ScriptedTransport, demo_agent, make_sandbox

ROOT = Limits(max_turns=20, max_budget_usd=0.05, on_limit="ask")
CHILD = Limits(max_turns=8, max_budget_usd=0.0025)
POLICY = TopUps(grant=TopUp(usd=0.0004), times=1)
MOST_ROUNDS = 10


async def one_round(db: Path, box: Path, run_id: str | None, events: list[Event]) -> str:
    """Run (or grant and resume) the tree with a runner of its own; its root id."""
    agent = attrs.evolve(
        demo_agent("research", box, limits=ROOT, child_limits=CHILD), top_ups=POLICY
    )
    transport = ScriptedTransport()
    provider = OpenAIProvider(base_url="http://scripted.test/v1", api_key="k", transport=transport)
    try:
        runner = Runner(provider=provider, store=SQLiteStore(db), sink=events.append)
        if run_id is None:
            return (await runner.run(agent, "Summarise the incident.")).run_id
        request = runner.store.load(run_id).interruption
        assert request is not None and request.estimate_usd is not None
        runner.grant(run_id, usd=request.estimate_usd)
        print(f"  a person grants ${request.estimate_usd:.6f} to {request.run_id}")
        await runner.resume(run_id, agent)
        return run_id
    finally:
        await provider.aclose()


async def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="orchestra-top-up."))
    db, box = work / "runs.db", make_sandbox(work / "box")
    events: list[Event] = []
    root = await one_round(db, box, None, events)
    store = SQLiteStore(db)
    rounds = 0
    while store.load(root).status is Status.INTERRUPTED and rounds < MOST_ROUNDS:
        waiting = store.load(root).interruption
        assert waiting is not None and waiting.kind is InterruptionKind.BUDGET_REQUEST
        rounds += 1
        await one_round(db, box, root, events)
    tree = store.tree(root)
    top = next(s for s in tree if s.run_id == root)
    children = [s for s in tree if s.parent_id == root]
    by_policy = [e for e in events if e.type == "top_up" and e.data["granted"]]
    by_people = sum(r.note.startswith("granted ") for s in children for r in s.limit_raises)
    completed = sum(s.status is Status.COMPLETED for s in children)
    rows = [
        ("claim", "measured"),
        ("children that asked for more", sum(bool(s.limit_raises) for s in children)),
        ("  granted by the root policy (once each)", len(by_policy)),
        ("  granted by a person (new runner each time)", by_people),
        ("tree", top.status.value),
        ("  children completed", f"{completed}/3"),
        ("  tree spend / root budget (USD)", f"{top.tree.cost_usd:.6f} / {ROOT.max_budget_usd}"),
    ]
    for label, value in rows:
        print(f"{label:<46} {value!s:>20}")
    ok = (
        top.status is Status.COMPLETED
        and len(children) == 3
        and all(s.status is Status.COMPLETED for s in children)
        and len(by_policy) == 3
        and by_people >= 1
        and top.tree.cost_pico <= (top.limits.budget_pico or 0)
    )
    if not ok:
        print("CLAIM FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
