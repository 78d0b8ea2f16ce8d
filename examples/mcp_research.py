"""Claim: research children can work through MCP tools, each under its own budget.

The scripted ``research`` scenario: the root asks three questions at once;
each child run (a ``researcher``) lists the files and reads one, through the
tools of ``examples/mcp_files.py``, an MCP server started over stdio, with a
budget of $0.01 carved from the root's $0.05. Prints per child its status,
turns, MCP tool runs, spend against its budget and answer. Exits 1 unless
every run completed within its budget using the server's tools.

    pip install -e '.[mcp]'
    python examples/mcp_research.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, RunResult, Status
from orchestra.mcp import StdioServer, open_tools
from orchestra.testing import make_sandbox, scripted_server

SERVER = Path(__file__).with_name("mcp_files.py")
CHILD_BUDGET = 0.01


async def research(directory: Path) -> tuple[RunResult, list[str]]:
    server = StdioServer(command=sys.executable, args=(str(SERVER), str(directory)))
    async with scripted_server() as url, open_tools(server) as tools:
        researcher = Agent(
            name="researcher",
            model="researcher",
            instructions="You are a researcher. Answer the question using the tools.",
            tools=tools,
            limits=Limits(max_turns=8, max_budget_usd=CHILD_BUDGET),
        )
        root = Agent(
            name="lead",
            model="research",
            instructions="Split the question; ask researchers.",
            tools=(researcher.as_tool(name="research", description="Ask a researcher."),),
            limits=Limits(max_turns=20, max_budget_usd=0.05),
        )
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        result = await Runner(provider=provider).run(root, "Look into the logs.")
        await provider.aclose()
        return result, [t.name for t in tools]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mcp-research-") as tmp:
        result, names = trio.run(research, make_sandbox(Path(tmp)))
    print(f"research tree, children on MCP tools ({', '.join(names[:2])}, ...)")
    print(f"{'run':<28} {'status':<10} {'turns':>5} {'mcp tools':>9} {'spent':>9} {'budget':>7}")
    ok = result.status is Status.COMPLETED
    for child in result.ordered_children():
        s = child.state
        question = s.messages[1]["content"] if len(s.messages) > 1 else s.run_id
        within = s.tree.cost_usd <= CHILD_BUDGET
        ok = ok and s.status is Status.COMPLETED and within and s.own.tool_runs > 0
        print(
            f"{question[:28]:<28} {s.status.value:<10} {s.turns:>5} {s.own.tool_runs:>9} "
            f"{s.tree.cost_usd:>9.6f} {CHILD_BUDGET:>7.3f}"
        )
    print(f"tree: {result.status.value}, ${result.state.tree.cost_usd:.6f} of $0.050")
    print(f"answer: {(result.answer or '')[:72]}")
    if not ok:
        print("CLAIM FAILED: a child did not complete within its budget through MCP tools")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
