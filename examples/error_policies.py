"""Claim: how a tool failure is worded decides whether the model can recover from it.

Runs the ``recover`` scenario (the scripted model first reads a file that does
not exist, ``timeout.log``; it recovers, by listing the files and reading
errors.log, only if the error says how) under the three error policies
Orchestra offers (``ToolPolicy``):

* ``detailed_errors`` (the default): the model sees the error's message and
  recovers: the run completes with the right answer;
* ``generic_errors``: the model sees only "Error: something failed." and
  gives up politely: the run completes, without an answer worth having;
* ``fatal_errors=True``: the first tool error ends the run ``failed``.

Prints per policy the run's status, turns, tool runs, what the model saw and
what it answered. Exits 1 if any policy does something else.

    python examples/error_policies.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from orchestra import (
    Agent,
    Limits,
    OpenAIProvider,
    Runner,
    RunResult,
    Status,
    ToolPolicy,
    catalog,
    detailed_errors,
    generic_errors,
)
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
POLICIES = {
    "detailed (default)": ToolPolicy(error_text=detailed_errors),
    "generic": ToolPolicy(error_text=generic_errors),
    "fatal_errors": ToolPolicy(fatal_errors=True),
}
EXPECTED = {  # status, and the start of the answer (or of the reason it stopped)
    "detailed (default)": (Status.COMPLETED, "errors.log mentions a timeout"),
    "generic": (Status.COMPLETED, "I could not find the log"),
    "fatal_errors": (Status.FAILED, "read_file failed"),
}
WIDTH = 80


async def recover(directory: Path) -> dict[str, RunResult]:
    results = {}
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for name, policy in POLICIES.items():
            agent = Agent(
                name="assistant",
                model="recover",
                instructions=INSTRUCTIONS,
                tools=catalog(directory),
                limits=Limits(max_turns=10),
                policy=policy,
            )
            results[name] = await runner.run(agent, "Why did the nightly job fail?")
        await provider.aclose()
    return results


def first_tool_result(result: RunResult) -> str:
    """The first tool message of the transcript: what the model saw of the failure."""
    tools = (m for m in result.state.messages if m.get("role") == "tool")
    return str(next(tools, {}).get("content") or "(nothing: the run stopped first)")


def outcome(result: RunResult) -> str:
    if result.status is Status.COMPLETED:
        return result.answer or ""
    return f"[{result.status.value}: {result.state.reason}]"


def cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="error-policies-") as tmp:
        results = trio.run(recover, make_sandbox(tmp))
    print("recover: the first read fails (no such file: timeout.log)")
    print(f"{'policy':<19} {'status':<10} {'turns':>5} {'tools':>5} {'cost USD':>10}")
    ok = True
    for name, result in results.items():
        state = result.state
        print(
            f"{name:<19} {state.status.value:<10} {state.turns:>5} {state.own.tool_runs:>5} "
            f"{result.tree_cost_usd:>10.6f}"
        )
        print("  saw: " + cut(first_tool_result(result), WIDTH - 7))
        print("  ->   " + cut(outcome(result), WIDTH - 7))
        status, start = EXPECTED[name]
        ok = ok and state.status is status and start in outcome(result)
    if not ok:
        print("CLAIM FAILED: a policy did not end as described")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
