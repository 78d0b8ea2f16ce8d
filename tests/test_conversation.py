"""Conversations: a stopped run continued with a new message, as a new linked run."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import (
    Agent,
    InterruptionKind,
    Limits,
    MemoryStore,
    Runner,
    RunNotFound,
    StateError,
    Status,
    tool,
)
from orchestra._conversation import NOT_RUN
from orchestra.testing import DONE, FakeProvider, tool_calls


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def _answers(*texts: str) -> FakeProvider:
    return FakeProvider(*({"role": "assistant", "content": t} for t in texts))


AGENT = Agent(name="a", model="m", instructions="Be brief.", limits=Limits(max_turns=2))


async def test_a_completed_run_is_continued_with_its_transcript_as_a_new_run() -> None:
    store = MemoryStore()
    runner = Runner(provider=_answers("Oslo.", "About 700 000."), store=store)
    first = await runner.run(AGENT, "Capital of Norway?")
    second = await runner.run(AGENT, "How many people?", continue_from=first.run_id)
    assert second.status is Status.COMPLETED and second.answer == "About 700 000."
    assert second.run_id != first.run_id and second.state.continues == first.run_id
    assert second.state.conversation == first.run_id == first.state.conversation
    roles = [(m["role"], m.get("content")) for m in second.state.messages]
    assert roles == [
        ("system", "Be brief."),
        ("user", "Capital of Norway?"),
        ("assistant", "Oslo."),
        ("user", "How many people?"),
        ("assistant", "About 700 000."),
    ]
    assert store.load(first.run_id).messages == first.state.messages  # left as it was
    saved = store.load(second.run_id)
    assert (saved.continues, saved.conversation_id) == (first.run_id, first.run_id)
    third = await runner.run(AGENT, "And Sweden?", continue_from=second.run_id)
    assert third.state.conversation == first.run_id  # one conversation id down the chain


async def test_limits_count_per_message() -> None:
    runner = Runner(provider=_answers("One.", "Two."), store=MemoryStore())
    first = await runner.run(AGENT, "First?")
    second = await runner.run(AGENT, "Second?", continue_from=first.run_id)
    assert second.state.turns == 1 and second.status is Status.COMPLETED
    assert second.state.limits.max_turns == 2  # afresh, not what the first left


async def test_a_run_stopped_for_approval_is_continued_with_its_call_answered_in_words() -> None:
    agent = Agent(name="a", model="m", tools=(delete,))
    provider = FakeProvider(tool_calls(("delete", {"path": "x"})), DONE)
    runner = Runner(provider=provider, store=MemoryStore())
    first = await runner.run(agent, "Clean up.")
    assert first.state.interruption is not None
    assert first.state.interruption.kind is InterruptionKind.APPROVAL
    second = await runner.run(agent, "Never mind, leave it.", continue_from=first.run_id)
    assert second.status is Status.COMPLETED
    messages = second.state.messages
    [call] = messages[-4]["tool_calls"]
    assert messages[-3] == {"role": "tool", "tool_call_id": call["id"], "content": NOT_RUN}
    assert messages[-2] == {"role": "user", "content": "Never mind, leave it."}
    assert second.state.own.tool_runs == 0  # nothing was run


@pytest.mark.parametrize(
    ("which", "error", "match"),
    [
        ("missing", RunNotFound, "no run"),
        ("child", StateError, "is a child of"),
        ("other agent", StateError, "cannot be continued by 'b'"),
    ],
)
async def test_what_cannot_be_continued_is_refused(
    which: str, error: type[Exception], match: str
) -> None:
    store = MemoryStore()
    child = Agent(name="child", model="m")
    parent = Agent(name="a", model="m", tools=(child.as_tool(),))
    provider = FakeProvider(tool_calls(("child", {"question": "q"})), DONE)
    runner = Runner(provider=provider, store=store)
    first = await runner.run(parent, "Ask.")
    target: dict[str, Any] = {
        "missing": ("run_nope", parent),
        "child": (first.children[0].run_id, child),
        "other agent": (first.run_id, Agent(name="b", model="m")),
    }
    run_id, agent = target[which]
    with pytest.raises(error, match=match):
        await runner.run(agent, "Again?", continue_from=run_id)


def test_a_running_run_is_not_continued() -> None:
    from orchestra._conversation import refuse_to_continue
    from orchestra._core.execute import new_state

    state = new_state(AGENT, "Go.", Limits())
    with pytest.raises(StateError, match="is running"):
        refuse_to_continue(state, "a")


async def test_a_continued_run_stopped_for_approval_resumes_with_its_links() -> None:
    agent = Agent(name="a", model="m", tools=(delete,))
    provider = FakeProvider(
        {"role": "assistant", "content": "Nothing to do."},
        tool_calls(("delete", {"path": "x"})),
        DONE,
    )
    runner = Runner(provider=provider, store=MemoryStore())
    first = await runner.run(agent, "Anything?")
    second = await runner.run(agent, "Delete x.", continue_from=first.run_id)
    assert second.status is Status.INTERRUPTED
    runner.approve(second.run_id)
    resumed = await runner.resume(second.run_id, agent)
    assert resumed.status is Status.COMPLETED and resumed.state.own.tool_runs == 1
    assert (resumed.state.continues, resumed.state.conversation) == (first.run_id, first.run_id)


async def test_a_call_cancelled_after_its_effect_is_told_it_started(autojump_clock: Any) -> None:
    """A write cancelled midway may have taken effect: the continuation says so,
    never "not run"; a read that ran before the cancel keeps its result."""
    import trio

    from orchestra._conversation import STARTED

    effects: list[str] = []

    @tool(read_only=True)
    def look(path: str) -> str:
        """Read a file."""
        return f"{path}: 3 lines"

    @tool
    async def archive(path: str) -> str:
        """Archive a file (slowly)."""
        effects.append(path)
        await trio.sleep(100)
        return "archived"

    agent = Agent(name="a", model="m", tools=(look, archive))
    provider = FakeProvider(tool_calls(("look", {"path": "x"}), ("archive", {"path": "x"})), DONE)
    runner = Runner(provider=provider, store=MemoryStore())
    with trio.move_on_after(1):
        await runner.run(agent, "Archive x.", run_id="first")
    first = runner.store.load("first")
    assert first.status is Status.INTERRUPTED and effects == ["x"]
    second = await runner.run(agent, "What happened?", continue_from="first")
    told = {m["tool_call_id"]: m["content"] for m in second.state.messages if m["role"] == "tool"}
    assert told == {"c0": "x: 3 lines", "c1": STARTED}
    assert STARTED.startswith("Started, outcome unknown") and NOT_RUN not in told.values()
