"""Claim: with ``dedupe``, a repeated read-only call is answered from the transcript.

Runs the ``repeat`` scenario (the scripted model reads errors.log twice in a
row, then answers) without and with ``ToolPolicy(dedupe=True)``. With dedupe
the second, identical read is not run: its result is the first one's, with a
note saying so, and the answer is the same. Prints per setting the status,
turns, tool runs (counted by the tool itself and by the run) and what the
model saw for the second call. The note costs a few prompt tokens: what
dedupe saves is the tool run (a slow, rate-limited or paid read), not model
spend.

Exits 1 unless the deduplicated run ran the tool once less and answered the same.

    python examples/dedupe.py
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import trio

from orchestra import (
    Agent,
    Limits,
    OpenAIProvider,
    Runner,
    RunResult,
    Tool,
    ToolPolicy,
    catalog,
    tool,
)
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
WIDTH = 80


def counted_read(directory: Path, runs: Counter[str]) -> tuple[Tool, ...]:
    """The catalog's tools, with a ``read_file`` that counts how often it really runs."""
    tools = {t.name: t for t in catalog(directory)}
    read = tools["read_file"]

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file from the working directory.

        Args:
            path: the file's name, as list_files gives it.
        """
        runs[path] += 1
        return str(read.function(path=path))

    return (tools["list_files"], read_file)


async def repeat(directory: Path) -> dict[bool, tuple[RunResult, int]]:
    results = {}
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for dedupe in (False, True):
            runs: Counter[str] = Counter()
            agent = Agent(
                name="assistant",
                model="repeat",
                instructions=INSTRUCTIONS,
                tools=counted_read(directory, runs),
                limits=Limits(max_turns=10),
                policy=ToolPolicy(dedupe=dedupe),
            )
            result = await runner.run(agent, "Why did the nightly job fail?")
            results[dedupe] = (result, runs["errors.log"])
        await provider.aclose()
    return results


def second_result(result: RunResult) -> str:
    """What the model saw for the second read: the file again, or the file and a note."""
    tools = [m for m in result.state.messages if m.get("role") == "tool"]
    text = str(tools[1].get("content")) if len(tools) > 1 else ""
    lines = text.splitlines()
    if lines and lines[-1].startswith("[Same call"):
        return "the file's text + " + lines[-1]
    return "the file's text (read_file ran again)"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dedupe-") as tmp:
        results = trio.run(repeat, make_sandbox(tmp))
    print("repeat: the model reads errors.log twice in a row, then answers")
    print(
        f"{'dedupe':<6} {'status':<10} {'turns':>5} {'reads':>5} {'tool runs':>9} {'cost USD':>10}"
    )
    for dedupe, (result, reads) in results.items():
        state = result.state
        print(
            f"{'on' if dedupe else 'off':<6} {state.status.value:<10} {state.turns:>5} "
            f"{reads:>5} {state.own.tool_runs:>9} {result.tree_cost_usd:>10.6f}"
        )
    for dedupe, (result, _) in results.items():
        seen = f"2nd read, dedupe {'on: ' if dedupe else 'off:'} {second_result(result)}"
        print(textwrap.fill(seen, WIDTH, subsequent_indent=" " * 22))
    (off, reads_off), (on, reads_on) = results[False], results[True]
    same = on.answer == off.answer and on.answer is not None
    print(f"same answer: {'yes' if same else 'NO'}")
    fewer = on.state.own.tool_runs == off.state.own.tool_runs - 1 and reads_on == reads_off - 1
    if not (same and fewer):
        print("CLAIM FAILED: dedupe did not save exactly one tool run with the same answer")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
