"""``orchestra.agui``: a tree's events as an AG-UI stream, each event read back with the
protocol's own types (``ag_ui.core``, the ``ag-ui-protocol`` package)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("ag_ui")
from ag_ui.core import PROTOCOL_VERSION, BaseEvent, EventType
from ag_ui.core import Event as AguiEvent
from pydantic import TypeAdapter

from orchestra import Event, Limits, MemoryStore, OpenAIProvider, Runner, RunResult, agui
from orchestra.testing import ScriptedTransport, demo_agent, demo_task

READ = TypeAdapter(AguiEvent)


def parsed(lines: list[str]) -> list[BaseEvent]:
    """The AG-UI events of an SSE stream's ``data:`` lines, each validated as the
    protocol's type it says it is, with no field the protocol does not define."""
    events: list[BaseEvent] = []
    for line in lines:
        assert line.startswith("data: ")
        said = line.removeprefix("data: ")
        event = READ.validate_json(said)
        assert not event.model_extra, f"fields AG-UI does not define: {event.model_extra}"
        assert json.loads(event.model_dump_json(by_alias=True)) == json.loads(said)
        events.append(event)
    return events


def of(events: list[BaseEvent], *types: EventType) -> list[Any]:
    return [e for e in events if e.type in types]


async def streamed(sandbox: Path, scenario: str, **limits: Any) -> tuple[list[str], RunResult]:
    """A scripted ``scenario`` tree's AG-UI stream, read as it runs; its result."""
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    runner = Runner(provider=provider, store=MemoryStore())
    agent = demo_agent(scenario, sandbox, **limits)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task(scenario))
        lines = [line async for line in agui.sse(handle.events())]
    assert all(line.endswith("\n\n") and line.count("\n") == 2 for line in lines)  # SSE
    return lines, await handle.wait()


def assert_research_tree(events: list[BaseEvent], result: RunResult) -> None:
    """The research tree's AG-UI stream: the run's lifecycle around it, its three
    children as subagents started in order and finished, every child's work
    attributed to it and inside its start and finish."""
    first, last = events[0], events[-1]
    assert first.type == EventType.RUN_STARTED and last.type == EventType.RUN_FINISHED
    assert first.run_id == last.run_id == first.thread_id == result.run_id  # type: ignore[attr-defined]
    assert first.protocol_version == PROTOCOL_VERSION  # type: ignore[attr-defined]
    assert last.outcome is None  # type: ignore[attr-defined]  # a success
    children = {c.run_id: c.state.parent_call_id for c in result.children}
    assert_children_in_order(events, result.run_id, children)
    started = of(events, EventType.SUBAGENT_STARTED)
    assert len(children) == 3 and {s.name for s in started} == {"researcher"}
    assert all(s.parent_subagent_run_id is None for s in started)  # the root's own
    assert all(f.outcome is None for f in of(events, EventType.SUBAGENT_FINISHED))


def assert_children_in_order(events: list[BaseEvent], root: str, calls: dict[str, Any]) -> None:
    """Each child (``calls``: its run id to the root's call that started it) is one
    subagent, started and finished once, in order: after its call started and
    before its call's result, with all its work attributed to it in between."""
    started = [e.subagent_run_id for e in of(events, EventType.SUBAGENT_STARTED)]
    finished = [e.subagent_run_id for e in of(events, EventType.SUBAGENT_FINISHED)]
    assert sorted(started) == sorted(finished) == sorted(calls)
    for child, call in calls.items():
        by_call = [
            i for i, e in enumerate(events) if getattr(e, "tool_call_id", "") == f"{root}:{call}"
        ]
        mine = [i for i, e in enumerate(events) if getattr(e, "subagent_run_id", None) == child]
        assert events[by_call[0]].type == EventType.TOOL_CALL_START
        assert events[by_call[-1]].type == EventType.TOOL_CALL_RESULT
        assert events[mine[0]].type == EventType.SUBAGENT_STARTED
        assert events[mine[0]].parent_tool_call_id == f"{root}:{call}"  # type: ignore[attr-defined]
        assert events[mine[-1]].type == EventType.SUBAGENT_FINISHED
        assert by_call[0] < mine[0] < mine[-1] < by_call[-1] and len(mine) > 5


def assert_messages_well_formed(events: list[BaseEvent], result: RunResult | None) -> None:
    """Each text message: one start, its content, one end, in that order, all
    attributed alike; each run's last message says its answer."""
    kinds = (EventType.TEXT_MESSAGE_START, EventType.TEXT_MESSAGE_CONTENT)
    messages: dict[str, list[Any]] = defaultdict(list)
    for event in of(events, *kinds, EventType.TEXT_MESSAGE_END):
        messages[event.message_id].append(event)
    assert messages
    for parts in messages.values():
        assert [p.type for p in parts] == [
            EventType.TEXT_MESSAGE_START,
            *[EventType.TEXT_MESSAGE_CONTENT] * (len(parts) - 2),
            EventType.TEXT_MESSAGE_END,
        ]
        assert parts[0].role == "assistant"
        assert len({p.subagent_run_id for p in parts}) == 1
    for run in result.walk() if result else ():
        mine = [m for m in messages.values() if m[0].message_id.startswith(f"{run.run_id}:")]
        assert "".join(p.delta for p in mine[-1][1:-1]).endswith(run.answer)


def assert_tool_calls_well_formed(events: list[BaseEvent]) -> None:
    """Each tool call: start, its arguments (JSON), end, then its result."""
    calls: dict[str, list[Any]] = defaultdict(list)
    for event in events:
        if event.type.value.startswith("TOOL_CALL_"):
            calls[event.tool_call_id].append(event)  # type: ignore[attr-defined]
    assert calls
    for parts in calls.values():
        assert [p.type.value for p in parts] == [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
        ]
        assert isinstance(json.loads(parts[1].delta), dict)
        assert isinstance(json.loads(parts[3].content)["ok"], bool)


async def test_a_research_tree_streams_as_ag_ui_with_its_children_as_subagents(sandbox) -> None:
    lines, result = await streamed(sandbox, "research")
    events = parsed(lines)
    assert_research_tree(events, result)
    assert_messages_well_formed(events, result)
    assert_tool_calls_well_formed(events)
    assert all(json.loads(e.content)["ok"] for e in of(events, EventType.TOOL_CALL_RESULT))
    # the root's three research calls, made before the children they started
    research = [e for e in of(events, EventType.TOOL_CALL_START) if e.tool_call_name == "research"]
    assert len(research) == 3 and all(e.subagent_run_id is None for e in research)
    assert events.index(research[0]) < events.index(of(events, EventType.SUBAGENT_STARTED)[0])


async def test_a_run_s_spend_and_prices_are_custom_events_with_orchestra_s_names(sandbox) -> None:
    lines, result = await streamed(sandbox, "research")
    custom = of(parsed(lines), EventType.CUSTOM)
    assert {c.name for c in custom} == {"turn", "price_warning"}
    turns = [c for c in custom if c.name == "turn"]
    assert sum(t.value["call_cost_usd"] for t in turns) == pytest.approx(result.tree_cost_usd)
    assert turns[-1].value["tree_cost_usd"] == pytest.approx(result.tree_cost_usd)
    assert {t.subagent_run_id for t in turns} == {None, *(c.run_id for c in result.children)}


async def test_a_child_stopped_at_its_budget_is_said_as_a_custom_event_then_finished(
    sandbox,
) -> None:
    child_limits = Limits(max_turns=8, max_budget_usd=0.004)
    lines, result = await streamed(sandbox, "research_runaway", child_limits=child_limits)
    events = parsed(lines)
    runaway = next(c.run_id for c in result.children if c.status.value == "budget_exceeded")
    limit = next(e for e in of(events, EventType.CUSTOM) if e.name == "budget_exceeded")
    assert limit.subagent_run_id == limit.value["run_id"] == runaway
    end = events[events.index(limit) + 1]
    assert end.type == EventType.SUBAGENT_FINISHED and end.subagent_run_id == runaway
    assert end.metadata["orchestra"]["status"] == "budget_exceeded"
    assert events[-1].type == EventType.RUN_FINISHED


async def test_a_child_asking_for_budget_suspends_it_and_interrupts_the_run(sandbox) -> None:
    child_limits = Limits(max_turns=8, max_budget_usd=0.004)
    limits = Limits(max_turns=20, on_limit="ask")
    lines, result = await streamed(
        sandbox, "research_runaway", limits=limits, child_limits=child_limits
    )
    events = parsed(lines)
    asking = result.state.interruption.run_id  # type: ignore[union-attr]
    suspended = next(e for e in of(events, EventType.SUBAGENT_FINISHED) if e.outcome)
    assert suspended.subagent_run_id == asking and suspended.outcome.type == "suspended"
    assert "budget_request" in {e.name for e in of(events, EventType.CUSTOM)}
    interrupt = events[-1].outcome.interrupts[0]  # type: ignore[attr-defined]
    assert events[-1].outcome.type == "interrupt"  # type: ignore[attr-defined]
    assert interrupt.reason == "budget_request" and interrupt.subagent_run_id == asking
    assert suspended.outcome.interrupt_ids == [interrupt.id]


async def test_nested_children_name_the_subagent_that_started_them(sandbox) -> None:
    lines, result = await streamed(sandbox, "deep")
    started = of(parsed(lines), EventType.SUBAGENT_STARTED)
    assert len(started) == len(list(result.walk())) - 1 >= 2
    assert started[0].parent_subagent_run_id is None
    for parent, child in itertools.pairwise(started):
        assert child.parent_subagent_run_id == parent.subagent_run_id


async def test_a_cancelled_tree_finishes_cancelled_its_children_suspended(
    sandbox, autojump_clock
) -> None:
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    runner = Runner(provider=provider, store=MemoryStore())
    agent = demo_agent("slow_tree", sandbox)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("slow_tree", 3))
        lines = []
        async for line in agui.sse(handle.events()):
            lines.append(line)
            if "SUBAGENT_STARTED" in line and sum("SUBAGENT_STARTED" in x for x in lines) == 3:
                handle.cancel("enough")
    events = parsed(lines)
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].outcome.type == "cancelled"  # type: ignore[attr-defined]
    finished = of(events, EventType.SUBAGENT_FINISHED)
    assert len(finished) == 3 and {f.outcome.type for f in finished} == {"suspended"}


# -- the translator alone, over events written by hand ------------------------------------


def event(type_: str, run_id: str = "run_root", parent: str | None = None, **data: Any) -> Event:
    return Event(type=type_, run_id=run_id, root_id="run_root", parent_id=parent, at=1.5, data=data)


def translated(*events: Event) -> list[BaseEvent]:
    lines = [f"data: {e.model_dump_json(by_alias=True)}\n\n" for e in agui.translate(events)]
    return parsed(lines)


def test_failures_are_subagent_and_run_errors() -> None:
    out = translated(
        event("run_started", agent="lead"),
        event("run_started", "run_kid", "run_root", agent="researcher"),
        event("run_stopped", "run_kid", "run_root", status="failed", reason="tool broke"),
        event("run_stopped", status="failed", reason="gave up"),
    )
    assert [e.type.value for e in out] == [
        "RUN_STARTED",
        "SUBAGENT_STARTED",
        "SUBAGENT_ERROR",
        "RUN_ERROR",
    ]
    assert out[2].subagent_run_id == "run_kid" and out[2].message == "tool broke"  # type: ignore[attr-defined]
    assert out[3].message == "gave up" and out[3].code == "failed"  # type: ignore[attr-defined]
    assert {e.timestamp for e in out} == {1500}


def test_a_reply_cut_and_asked_again_is_a_second_message() -> None:
    out = translated(
        event("run_started", agent="lead"),
        event("model_request", turn=1),
        event("text_delta", text="Half"),
        event("reply_cut", turn=1, tokens=1, text="Half"),
        event("model_request", turn=1),
        event("text_delta", text="Whole"),
        event("turn", turn=1),
        event("run_stopped", status="completed", reason="answered"),
    )
    assert_messages_well_formed(out, None)
    ids = [e.message_id for e in of(out, EventType.TEXT_MESSAGE_START)]
    assert ids == ["run_root:1", "run_root:1.2"]
    assert of(out, EventType.CUSTOM)[0].name == "reply_cut"


def test_a_tool_s_error_is_in_its_result() -> None:
    out = translated(
        event("run_started", agent="lead"),
        event("tool_start", tool="read_file", call_id="c1", args={"path": "x"}),
        event("tool_error", tool="read_file", call_id="c1", error_type="OSError", error="no x"),
        event("tool_result", tool="read_file", call_id="c1", ms=1.0, ok=False),
        event("run_stopped", status="completed", reason="answered"),
    )
    result = of(out, EventType.TOOL_CALL_RESULT)[0]
    assert result.tool_call_id == "run_root:c1"
    assert json.loads(result.content) == {"ms": 1.0, "ok": False, "error": "no x"}


def test_a_stream_that_ends_before_its_root_stopped_ends_with_a_run_error() -> None:
    out = translated(
        event("run_started", agent="lead"),
        event("run_started", "run_kid", "run_root", agent="researcher"),
        event("model_request", "run_kid", "run_root", turn=1),
        event("text_delta", "run_kid", "run_root", text="Hal"),
    )
    assert [e.type.value for e in out[-2:]] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert out[-2].subagent_run_id == "run_kid"  # type: ignore[attr-defined]
    assert translated() == []
