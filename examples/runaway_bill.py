"""Claim: a runaway agent's bill grows with the square of its turn cap.

Runs the ``runaway`` scenario (the scripted model reads a different file every
turn and never answers) with no budget, only a turn cap of 8, 20, 50 and 100
turns, and prints what each cap lets it spend: the input tokens it sent, the
output tokens it got and the cost (at the default $2 / $12 per million
tokens). Every turn resends the whole transcript, so turn ``n`` pays for ``n``
earlier exchanges: doubling the cap from 50 to 100 turns about quadruples the
bill. A cap bounds the turns, not the money; a budget bounds the money (see
``examples/zero_overshoot.py``).

Exits 1 unless every run stopped at its cap and the 50 -> 100 cost ratio is
above 3 (quadratic growth; linear would be 2).

    python examples/runaway_bill.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs
import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, Status, catalog
from orchestra.testing import make_sandbox, scripted_server

CAPS = (8, 20, 50, 100)
INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."


@attrs.frozen
class Row:
    cap: int
    status: Status
    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


async def bill(directory: Path) -> list[Row]:
    rows = []
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for cap in CAPS:
            agent = Agent(
                name="assistant",
                model="runaway",
                instructions=INSTRUCTIONS,
                tools=catalog(directory),
                limits=Limits(max_turns=cap),
            )
            result = await runner.run(agent, "Look into the logs and tell me what went wrong.")
            own = result.state.own
            rows.append(
                Row(
                    cap,
                    result.status,
                    result.state.turns,
                    own.prompt_tokens,
                    own.completion_tokens,
                    result.tree_cost_usd,
                )
            )
        await provider.aclose()
    return rows


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="runaway-bill-") as tmp:
        rows = trio.run(bill, make_sandbox(tmp))
    print("runaway: no budget, only a turn cap ($2 / $12 per million tokens)")
    print(f"{'cap':>5} {'turns':>5} {'input tok':>10} {'output tok':>10} {'cost USD':>10}  status")
    for r in rows:
        print(
            f"{r.cap:>5} {r.turns:>5} {r.input_tokens:>10,} {r.output_tokens:>10,} "
            f"{r.cost_usd:>10.6f}  {r.status.value}"
        )
    by_cap = {r.cap: r for r in rows}
    tokens = by_cap[100].input_tokens / by_cap[50].input_tokens
    cost = by_cap[100].cost_usd / by_cap[50].cost_usd
    print(f"50 -> 100 turns: 2.0x turns, {tokens:.1f}x input tokens, {cost:.1f}x cost")
    print("(quadratic: every turn resends the whole transcript)")
    capped = all(r.turns == r.cap and r.status is Status.MAX_TURNS_EXCEEDED for r in rows)
    if not capped or cost <= 3.0:
        print("CLAIM FAILED: a run did not stop at its cap, or the bill grew less than 3x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
