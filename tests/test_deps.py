"""Dependencies (``ctx.deps``) and instructions computed per run (issue 49, points 1-2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from orchestra import (
    Agent,
    ConfigError,
    Limits,
    OpenAIProvider,
    RunContext,
    Runner,
    SQLiteStore,
    Status,
    ToolContext,
    state_to_json,
    tool,
)
from orchestra.testing import ScriptedTransport

FILES = {"errors.log": "DEPS: worker 7 timed out", "access.log": "DEPS: 504", "notes.txt": "N"}


@attrs.frozen
class Files:
    """What the application hands its tools: here, the files of one incident."""

    texts: dict[str, str]
    user: str = "ada"
    token: str = "secret-token-1"


@tool(read_only=True)
def list_files(ctx: ToolContext[Files]) -> str:
    """The names of the incident's files."""
    return ", ".join(sorted(ctx.deps.texts))


@tool(read_only=True)
def read_file(path: str, ctx: ToolContext[Files]) -> str:
    """The text of one file of the incident."""
    return ctx.deps.texts.get(Path(path).name, f"Error: no file {path}")


def _provider() -> OpenAIProvider:
    return OpenAIProvider(base_url="http://scripted/v1", api_key="-", transport=ScriptedTransport())


def _tree(**lead: Any) -> Agent[Files, Any]:
    researcher = Agent(
        name="researcher",
        model="researcher",
        tools=[list_files, read_file],
        deps_type=Files,
        limits=Limits(max_turns=8, max_budget_usd=0.01),
    )
    return Agent(
        name="lead",
        model="research",
        tools=[researcher.as_tool(name="research", description="Research one question.")],
        deps_type=Files,
        limits=Limits(max_turns=10, max_budget_usd=0.05),
        **lead,
    )


async def test_the_tools_of_every_run_of_a_tree_read_the_roots_deps() -> None:
    result = await Runner(provider=_provider()).run(_tree(), "Why?", deps=Files(FILES))
    assert result.status is Status.COMPLETED
    assert len(result.children) == 3
    answers = [child.state.answer or "" for child in result.children]
    assert any("DEPS: worker 7 timed out" in answer for answer in answers), answers
    saved = "".join(state_to_json(run.state) for run in result.walk())
    assert "secret-token-1" not in saved  # never saved with the run


async def test_a_tool_gives_a_child_other_deps() -> None:
    child = Agent(name="researcher", model="researcher", tools=[list_files, read_file])

    @tool(read_only=True)
    async def research(question: str, ctx: ToolContext[Files]) -> str:
        """Research one question."""
        return await ctx.run_child(child, question, deps=Files({"errors.log": "OTHER"}))

    lead = Agent(name="lead", model="research", tools=[research])
    result = await Runner(provider=_provider()).run(lead, "Why?", deps=Files(FILES))
    answers = " ".join(c.state.answer or "" for c in result.children)
    assert "OTHER" in answers and "DEPS" not in answers, answers


@pytest.mark.parametrize(
    ("deps", "said"),
    [
        (None, "agent 'lead' needs its dependencies (Files) to start: pass deps=..."),
        ({"a": "b"}, "agent 'lead' needs dependencies of type Files, got dict"),
    ],
)
async def test_a_run_without_the_deps_its_agent_declares_is_refused_in_one_line(
    deps: object, said: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        await Runner(provider=_provider()).run(_tree(), "Why?", deps=deps)
    assert said in str(caught.value) and "\n" not in str(caught.value)


async def test_a_resume_is_given_the_deps_again_or_says_what_is_missing(tmp_path: Path) -> None:
    writer = Agent(
        name="lead",
        model="plan",
        tools=[list_files, attrs.evolve(read_file, needs_approval=True)],
        deps_type=Files,
    )
    with SQLiteStore(tmp_path / "runs.db") as store:
        first = await Runner(provider=_provider(), store=store).run(
            writer, "Why?", deps=Files(FILES)
        )
        assert first.status is Status.INTERRUPTED, first.state.reason
        again = Runner(provider=_provider(), store=store)
        again.approve(first.run_id)
        with pytest.raises(ConfigError, match=r"needs its dependencies \(Files\) to resume"):
            await again.resume(writer, first.run_id)
        done = await again.resume(writer, first.run_id, deps=Files(FILES))
    assert done.status is Status.COMPLETED, done.state.reason
    assert "DEPS: worker 7 timed out" in str(done.state.messages)


async def test_instructions_computed_per_run_are_saved_and_not_computed_again(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, int, float | None]] = []

    def instructions(ctx: RunContext[Files]) -> str:
        seen.append((ctx.agent, ctx.depth, ctx.limits.max_budget_usd))
        return f"Help {ctx.deps.user}; you are at depth {ctx.depth}."

    with SQLiteStore(tmp_path / "runs.db") as store:
        result = await Runner(provider=_provider(), store=store).run(
            _tree(instructions=instructions), "Why?", deps=Files(FILES, user="grace")
        )
        saved = store.load(result.run_id)
    assert saved.messages[0] == {"role": "system", "content": "Help grace; you are at depth 0."}
    assert seen == [("lead", 0, 0.05)]  # the children's agent has static instructions


async def test_a_childs_instructions_see_its_carved_limits() -> None:
    seen: list[float | None] = []

    def instructions(ctx: RunContext[Files]) -> str:
        seen.append(ctx.limits.max_budget_usd)
        return f"You may spend ${ctx.limits.max_budget_usd}."

    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions=instructions,
        tools=[list_files, read_file],
        limits=Limits(max_turns=8, max_budget_usd=0.04),
    )
    lead = Agent(
        name="lead",
        model="research",
        tools=[researcher.as_tool(name="research")],
        limits=Limits(max_turns=10, max_budget_usd=0.03),
    )
    result = await Runner(provider=_provider()).run(lead, "Why?", deps=Files(FILES))
    assert len(seen) == 3 and all(s is not None and s < 0.03 for s in seen), seen
    first = result.children[0].state.messages[0]
    assert first["role"] == "system" and first["content"].startswith("You may spend $")


async def test_instructions_that_fail_refuse_the_run() -> None:
    def broken(ctx: RunContext[Any]) -> str:
        raise KeyError("user")

    agent = Agent(name="a", model="plan", instructions=broken)
    with pytest.raises(ConfigError, match="agent a: its instructions failed: 'user'"):
        await Runner(provider=_provider()).run(agent, "Why?")


async def test_resume_takes_agent_and_id_in_either_order_and_says_when_neither_fits(
    tmp_path: Path,
) -> None:
    agent = Agent(name="a", model="runaway", tools=[list_files, read_file])
    with SQLiteStore(tmp_path / "runs.db") as store:
        runner = Runner(provider=_provider(), store=store)
        first = await runner.run(agent, "Go", limits=Limits(max_turns=1), deps=Files(FILES))
        more = Limits(max_turns=2)
        second = await runner.resume(agent, first.run_id, limits=more, deps=Files(FILES))
        third = await runner.resume(first.run_id, agent, limits=Limits(max_turns=3))
        with pytest.raises(TypeError, match=r"resume takes an Agent and a run id .* got \(dict"):
            await runner.resume({"a": 1}, agent)  # type: ignore[arg-type]
    assert (second.state.turns, third.state.turns) == (2, 3)
