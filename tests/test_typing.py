"""A type checker follows an agent's dependencies and output into the caller's code
(issue 49, point 3): mypy, strict, on a user's script."""

from __future__ import annotations

from pathlib import Path

import pytest

SCRIPT = '''
import attrs
from orchestra import Agent, RunContext, Runner, ToolContext, tool

@attrs.frozen
class Deps:
    user: str

@attrs.frozen
class Report:
    cause: str

def instructions(ctx: RunContext[Deps]) -> str:
    return f"Help {ctx.deps.user}."

@tool(read_only=True)
def whoami(ctx: ToolContext[Deps]) -> str:
    """Who the run acts for."""
    reveal_type(ctx.deps)
    return ctx.deps.user

agent = Agent(name="a", model="m", instructions=instructions, tools=[whoami],
              deps_type=Deps, output_type=Report)
reveal_type(agent)

async def main(runner: Runner) -> None:
    result = await runner.run(agent, "Why?", deps=Deps("ada"))
    reveal_type(result.output)
    again = await runner.resume(agent, result.run_id, deps=Deps("ada"))
    reveal_type(again.output)
    plain = runner.run_sync(Agent(name="b", model="m"), "Why?")
    reveal_type(plain.output)
'''


def test_mypy_follows_deps_and_output_types(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    out, err, _ = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(script)]
    )
    revealed = [
        line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed" in line
    ]
    assert revealed == [
        '"user_script.Deps"',
        '"orchestra._agent.Agent[user_script.Deps, user_script.Report]"',
        '"user_script.Report | None"',
        '"user_script.Report | None"',
        '"Any | None"',
    ], out + err
    assert out.count("error:") == 0, out
