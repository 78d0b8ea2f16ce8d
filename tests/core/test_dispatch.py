"""Tool dispatch: bad model input, error policies, dedupe, ordering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from orchestra import (
    Agent,
    Limits,
    MemoryStore,
    PermanentToolError,
    Runner,
    Status,
    ToolContext,
    ToolPolicy,
    generic_errors,
    tool,
)
from orchestra.testing import DONE, tool_calls
from orchestra.testing import FakeProvider as Script


def calls(*specs: tuple[str, str]) -> dict[str, Any]:
    return tool_calls(*specs)


@tool(read_only=True)
def echo(text: str) -> str:
    """Echo text."""
    return text


@tool
def boom(text: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot {text}")


@tool
def forbidden() -> str:
    """Never allowed."""
    raise PermanentToolError("permission denied")


def tool_messages(result: Any) -> list[str]:
    return [m["content"] for m in result.state.messages if m["role"] == "tool"]


async def run(script: Script, policy: ToolPolicy | None = None, tools=(echo, boom, forbidden)):
    agent = Agent(
        name="a", model="m", tools=tools, policy=policy or ToolPolicy(), limits=Limits(max_turns=10)
    )
    return await Runner(provider=script).run(agent, "go")


async def test_malformed_json_becomes_a_tool_result():
    result = await run(Script(calls(("echo", "{not json")), DONE))
    assert result.status is Status.COMPLETED
    [text] = tool_messages(result)
    assert text.startswith("Error: invalid arguments for echo") and "Nothing was run" in text


async def test_unknown_tool_lists_the_real_ones():
    result = await run(Script(calls(("nope", "{}")), DONE))
    [text] = tool_messages(result)
    assert "no tool named 'nope'" in text and "echo" in text


async def test_schema_violation_is_reported():
    result = await run(Script(calls(("echo", '{"text": 3}')), DONE))
    [text] = tool_messages(result)
    assert "text: 3 is not of type 'string'" in text


async def test_tool_error_default_wording():
    result = await run(Script(calls(("boom", '{"text": "fly"}')), DONE))
    assert tool_messages(result) == ["Error: cannot fly"]
    assert result.status is Status.COMPLETED


async def test_tool_error_custom_wording():
    result = await run(
        Script(calls(("boom", '{"text": "fly"}')), DONE), ToolPolicy(error_text=generic_errors)
    )
    assert tool_messages(result) == ["Error: something failed."]


async def test_fatal_errors_fail_the_run():
    result = await run(
        Script(calls(("boom", '{"text": "fly"}')), DONE), ToolPolicy(fatal_errors=True)
    )
    assert result.status is Status.FAILED
    assert "cannot fly" in result.state.reason and result.state.turns == 1


async def test_permanent_error_stops_instead_of_looping():
    script = Script(calls(("forbidden", "{}")))
    result = await run(script)
    assert result.status is Status.FAILED
    assert "permission denied" in result.state.reason
    assert result.state.own.tool_runs == 1 and len(script.requests) == 1


async def test_dedupe_reuses_read_only_results_and_says_so():
    ran: list[str] = []

    @tool(read_only=True)
    def look(text: str) -> str:
        """Look."""
        ran.append(text)
        return f"saw {text}"

    script = Script(calls(("look", '{"text":"a"}')), calls(("look", '{ "text": "a" }')), DONE)
    result = await run(script, ToolPolicy(dedupe=True), tools=(look,))
    assert ran == ["a"]
    first, second = tool_messages(result)
    assert first == "saw a" and second.startswith("saw a\n[Same call as c0")


async def test_dedupe_never_skips_writes():
    ran: list[str] = []

    @tool
    def write(text: str) -> str:
        """Write."""
        ran.append(text)
        return "ok"

    script = Script(calls(("write", '{"text":"a"}')), calls(("write", '{"text":"a"}')), DONE)
    await run(script, ToolPolicy(dedupe=True), tools=(write,))
    assert ran == ["a", "a"]


async def test_parallel_reads_run_concurrently_and_results_keep_call_order(autojump_clock):
    @tool(read_only=True)
    async def wait(seconds: float) -> str:
        """Wait."""
        await trio.sleep(seconds)
        return f"waited {seconds}"

    script = Script(calls(("wait", '{"seconds": 2}'), ("wait", '{"seconds": 1}')), DONE)
    start = trio.current_time()
    result = await run(script, tools=(wait,))
    assert trio.current_time() - start == 2
    assert tool_messages(result) == ["waited 2", "waited 1"]


async def test_writes_run_in_order_after_reads(autojump_clock):
    order: list[str] = []

    @tool
    async def write(name: str) -> str:
        """Write."""
        await trio.sleep(1 if name == "w1" else 0)
        order.append(name)
        return name

    @tool(read_only=True)
    async def read(name: str) -> str:
        """Read."""
        order.append(name)
        return name

    script = Script(
        calls(("write", '{"name":"w1"}'), ("read", '{"name":"r"}'), ("write", '{"name":"w2"}')),
        DONE,
    )
    result = await run(script, tools=(write, read))
    assert order == ["r", "w1", "w2"]
    assert tool_messages(result) == ["w1", "r", "w2"]


async def test_repeated_or_missing_call_ids_still_get_one_result_each():
    from orchestra._model.reply import _clean_message

    message = _clean_message(
        {
            "content": None,
            "tool_calls": [
                {"id": "x", "function": {"name": "echo", "arguments": '{"text": "a"}'}},
                {"id": "x", "function": {"name": "echo", "arguments": '{"text": "b"}'}},
                {"function": {"name": "echo", "arguments": '{"text": "c"}'}},
            ],
        }
    )
    ids = [c["id"] for c in message["tool_calls"]]
    assert len(set(ids)) == 3 and ids[0] == "x"
    result = await run(Script(message, DONE))
    assert result.status is Status.COMPLETED
    assert tool_messages(result) == ["a", "b", "c"]


class CountingStore(MemoryStore):
    saves = 0

    def save(self, state: Any, events: Any = (), **fence: Any) -> None:
        self.saves += 1
        super().save(state, events, **fence)


async def test_a_reply_with_2000_calls_runs_at_most_the_cap_and_answers_the_rest_in_words():
    from orchestra._core.dispatch import MAX_CALLS_PER_REPLY

    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        """Note a text (a write)."""
        ran.append(text)
        return "noted"

    store = CountingStore()
    many = calls(*[("note", f'{{"text": "{i}"}}') for i in range(2000)])
    agent = Agent(name="a", model="m", tools=(note,), limits=Limits(max_turns=3))
    result = await Runner(provider=Script(many, DONE), store=store).run(agent, "go")
    assert result.status is Status.COMPLETED
    assert ran == [str(i) for i in range(MAX_CALLS_PER_REPLY)]
    tool_messages = [m for m in result.state.messages if m["role"] == "tool"]
    assert len(tool_messages) == 2000  # every call has exactly one result
    refused = tool_messages[MAX_CALLS_PER_REPLY:]
    assert all(f"more than {MAX_CALLS_PER_REPLY} tool calls" in m["content"] for m in refused)
    # a write saves its start and its result; the refusals are saved together, once
    assert store.saves <= 2 * MAX_CALLS_PER_REPLY + 10


async def test_policy_bounds_what_the_model_sees_of_results_and_errors() -> None:
    big = "x" * 5000
    script = Script(calls(("echo", f'{{"text": "{big}"}}'), ("boom", f'{{"text": "{big}"}}')), DONE)
    result = await run(script, ToolPolicy(max_result_bytes=1024))
    assert result.status is Status.COMPLETED
    shown = tool_messages(result)
    assert len(shown) == 2
    for text in shown:
        assert len(text.encode()) <= 1024
        assert "truncated" in text
    assert shown[1].startswith("Error")


async def test_dedupe_never_reuses_a_read_from_before_a_write(tmp_path):
    from orchestra import Agent, Limits, Runner, ToolPolicy, catalog, tool
    from orchestra.testing import DONE, FakeProvider, tool_calls

    @tool()
    def write_file(path: str, content: str) -> str:
        """Write a file.

        Args:
            path: its name.
            content: its text.
        """
        (tmp_path / path).write_text(content)
        return "written"

    (tmp_path / "a.txt").write_text("old")
    read = tool_calls(("read_file", {"path": "a.txt"}))
    write = tool_calls(("write_file", {"path": "a.txt", "content": "new"}))
    provider = FakeProvider(read, write, read, read, DONE)
    agent = Agent(
        name="a",
        model="m",
        instructions="",
        tools=(*catalog(tmp_path), write_file),
        limits=Limits(max_turns=10),
        policy=ToolPolicy(dedupe=True),
    )
    result = await Runner(provider=provider).run(agent, "go")
    results = [m["content"] for m in result.state.messages if m.get("role") == "tool"]
    assert results[0] == "The text of a.txt (3 bytes):\nold"
    # read again after the write: not the cached "old"
    assert results[2] == "The text of a.txt (3 bytes):\nnew"
    assert results[3].startswith("The text of a.txt (3 bytes):\nnew\n[Same call as")  # reused
    assert result.state.own.tool_runs == 3


def test_a_rejection_must_be_in_words():
    from orchestra import ConfigError, ToolPolicy

    for silent in ("", "   "):
        with pytest.raises(ConfigError, match="rejection_text"):
            ToolPolicy(rejection_text=silent)


class Steps(trio.abc.Instrument):
    """Notes where the loop's task steps end, in the same log as saves and tools."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.log.append("step ends")


class NotingStore(MemoryStore):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def save_many(self, states: Any, events: Any = (), **fence: Any) -> None:
        super().save_many(states, events, **fence)
        self.log.append("saved: " + ",".join(c for s in states for c in s.started))


@pytest.mark.parametrize("read_only", [False, True])
async def test_a_write_starts_in_a_task_step_of_its_own(read_only: bool) -> None:
    """A process frozen while a write's started marker is saved must not go on into
    the write when it wakes before the loop looked (a worker's stall watch)."""
    log: list[str] = []

    @tool(name="write", read_only=read_only)
    def write() -> str:
        """Write."""
        log.append("effect")
        return "written"

    agent = Agent(name="a", model="m", tools=(write,), limits=Limits(max_turns=3))
    runner = Runner(provider=Script(calls(("write", "{}")), DONE), store=NotingStore(log))
    steps = Steps(log)
    trio.lowlevel.add_instrument(steps)
    try:
        assert (await runner.run(agent, "go")).status is Status.COMPLETED
    finally:
        trio.lowlevel.remove_instrument(steps)
    before = log[: log.index("effect")]
    markers = [i for i, line in enumerate(before) if line.startswith("saved: c")]
    if read_only:  # no marker for a read: nothing to pause after
        assert not markers
    else:
        assert "step ends" in before[markers[0] :], before


async def test_a_call_waiting_for_a_child_elsewhere_parks_the_run() -> None:
    """On workers a child's call raises ChildPending: no result, no tool run counted,
    the calls after it wait too, a write's started marker is taken back, and the
    step ends with the run still running (to be woken when its children end)."""
    from orchestra._core.execute import new_state
    from orchestra._core.loop import drive
    from orchestra._core.run import ChildPending, LiveRun

    ran: list[str] = []

    @tool(name="ask", idempotent=True)
    def ask(question: str) -> str:
        """Ask a child run (here: one still executing elsewhere)."""
        ran.append(question)
        raise ChildPending(f"child-{question}")

    @tool(name="note")
    def note() -> str:
        """A write after the child's call."""
        ran.append("note")
        return "noted"

    agent = Agent(name="a", model="m", tools=(echo, ask, note), limits=Limits(max_turns=5))
    events: list[Any] = []
    runner = Runner(provider=Script(DONE), store=MemoryStore(), sink=events.append)
    state = new_state(agent, "go", agent.limits)
    reply = calls(("echo", '{"text": "hi"}'), ("ask", '{"question": "q1"}'), ("note", "{}"))
    state.messages.append(reply)
    run = LiveRun(state=state, agent=agent, runner=runner)
    await drive(run, one_step=True)
    assert run.parked and run.state.status is Status.RUNNING
    assert ran == ["q1"]  # the write after it did not run
    assert list(run.state.results.values()) == ["hi"]  # the read's result is kept
    assert run.state.started == [] and run.state.own.tool_runs == 1
    assert run.state.awaiting == ["child-q1"]  # its end will answer the call as it stands
    waiting = [e.data for e in events if e.type == "tool_waiting"]
    assert waiting == [{"tool": "ask", "call_id": "c1", "child_id": "child-q1"}]


async def test_run_child_of_something_not_an_agent_is_refused_in_words():
    @tool(read_only=True)
    async def delegate(question: str, ctx: ToolContext) -> str:
        """Ask a helper."""
        return await ctx.run_child("researcher", question)  # type: ignore[arg-type]

    result = await run(Script(calls(("delegate", '{"question": "why"}')), DONE), tools=(delegate,))
    assert result.status is Status.COMPLETED
    assert result.state.children == {}
    assert "run_child starts an Agent, not str" in tool_messages(result)[0]


async def test_a_run_stopped_by_one_of_its_concurrent_calls_is_saved_again_when_the_rest_end(
    autojump_clock: Any, sandbox: Path, tmp_path: Path
) -> None:
    """Of two children started at once, one asks a person for more budget (the parent
    stops, saved, at once) while the other is still in a 3 s scan: once the scan's
    child ends, its spend is in the parent's saved tree cost too."""
    from orchestra import Agent, Limits, OpenAIProvider, Runner, SQLiteStore, tool
    from orchestra.testing import ScriptedTransport, demo_tools, scan_archive

    asking = Agent(
        name="researcher",
        model="runaway",
        tools=demo_tools(sandbox),
        limits=Limits(max_turns=8, max_budget_usd=0.004, on_limit="ask"),
    )
    scanning = Agent(name="scanner", model="slow", tools=[scan_archive])

    @tool(read_only=True)
    async def research(question: str, ctx: ToolContext) -> str:
        """Research one question."""
        child = asking if "[runaway]" in question else scanning
        return await ctx.run_child(child, question)

    lead = Agent(name="lead", model="research_runaway", tools=[research], limits=Limits())
    provider = OpenAIProvider(base_url="http://s/v1", api_key="-", transport=ScriptedTransport())
    with SQLiteStore(tmp_path / "runs.db") as store:
        result = await Runner(provider=provider, store=store).run(lead, "Why?")
        saved = {s.run_id: s for s in (store.load(r.run_id) for r in result.walk())}
    root = saved[result.run_id]
    assert root.status is Status.INTERRUPTED, root.reason
    kinds = {s.agent: s.status for s in saved.values()}
    assert kinds == {"lead": Status.INTERRUPTED, "researcher": Status.INTERRUPTED,
                     "scanner": Status.COMPLETED}  # fmt: skip
    assert root.tree.cost_pico == sum(s.own.cost_pico for s in saved.values())
