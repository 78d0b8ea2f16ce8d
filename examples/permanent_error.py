"""Claim: an error no retry can fix fails the run at once, with no turns burned on retries.

Runs the ``permanent`` scenario: the scripted model asks to read
``../../var/secrets/payroll.db`` every turn, a path outside the sandbox that
``read_file`` refuses with ``PermanentToolError`` (nothing outside the
sandbox is ever opened). By default (``ToolPolicy.permanent_errors``) such an
error ends the run ``failed`` after one turn and one tool run. For contrast,
the same run with ``permanent_errors=()`` treats it as an error the model
might fix: the model retries the same call, and only the no-progress guard
(3 identical calls with identical results) stops it; without that guard it
retries until its turn cap (20), paying for every turn.

Prints per policy the status, turns, tool runs and cost. Exits 1 unless the
default policy failed the run after exactly one turn and one tool run.

    python examples/permanent_error.py
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, RunResult, Status, ToolPolicy, catalog
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
FIXABLE = ToolPolicy(permanent_errors=())
VARIANTS: dict[str, tuple[ToolPolicy, int | None]] = {  # policy, no_progress_after
    "default": (ToolPolicy(), 3),
    "permanent_errors=()": (FIXABLE, 3),
    "  + no_progress_after=None": (FIXABLE, None),
}


async def permanent(directory: Path) -> dict[str, RunResult]:
    results = {}
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for name, (policy, no_progress_after) in VARIANTS.items():
            agent = Agent(
                name="assistant",
                model="permanent",
                instructions=INSTRUCTIONS,
                tools=catalog(directory),
                limits=Limits(max_turns=20),
                policy=policy,
                no_progress_after=no_progress_after,
            )
            results[name] = await runner.run(agent, "What is in the payroll database?")
        await provider.aclose()
    return results


def how(result: RunResult) -> str:
    state = result.state
    return state.interruption.kind.value if state.interruption else state.status.value


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="permanent-") as tmp:
        results = trio.run(permanent, make_sandbox(tmp))
    print("permanent: read ../../var/secrets/payroll.db (outside the sandbox)")
    print(f"{'policy':<27} {'stopped':<19} {'turns':>5} {'tools':>5} {'cost USD':>10}")
    for name, result in results.items():
        state = result.state
        print(
            f"{name:<27} {how(result):<19} {state.turns:>5} {state.own.tool_runs:>5} "
            f"{result.tree_cost_usd:>10.6f}"
        )
    default = results["default"]
    print(textwrap.fill(f"default: {default.state.reason}", 80, subsequent_indent="  "))
    state = default.state
    if (state.status, state.turns, state.own.tool_runs) != (Status.FAILED, 1, 1):
        print("CLAIM FAILED: the permanent error did not fail the run at once")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
