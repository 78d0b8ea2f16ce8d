"""Spans for the run tree (GenAI conventions), read back in memory from both pipelines."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from orchestra import (
    ConfigError,
    Limits,
    MemoryStore,
    OpenAIProvider,
    RecordingTracerProvider,
    Runner,
    TopUp,
    TopUps,
)
from orchestra._model.provider import parse_reply, provider_name_for
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._redact import REDACTED
from orchestra._telemetry.otel import (
    SCHEMA_URL,
    OTelTracer,
    agent_id,
    configure_otlp,
    package_version,
)
from orchestra._telemetry.otel_content import CAPTURE_ENV, MAX_TEXT
from orchestra.testing import InMemorySpanSink, ScriptedTransport

Exporter = InMemorySpanExporter | InMemorySpanSink
SECRET = "sk-test0123456789abcdefXYZ"


@pytest.fixture(params=["sdk", "recording"])
def exporter(request: pytest.FixtureRequest) -> Exporter:
    """Finished spans from the SDK's pipeline, or from ours (as its export process sees them)."""
    return InMemorySpanExporter() if request.param == "sdk" else InMemorySpanSink()


@pytest.fixture
def tracer_for(exporter: Exporter) -> Callable[..., OTelTracer]:
    """An ``OTelTracer`` (with these options) whose spans ``exporter`` keeps."""

    def make(**options: Any) -> OTelTracer:
        if isinstance(exporter, InMemorySpanSink):
            tracer_provider: Any = RecordingTracerProvider(sink=exporter)
        else:
            tracer_provider = TracerProvider()
            tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        return OTelTracer(tracer_provider=tracer_provider, **options)

    return make


@pytest.fixture
def traced(provider, tracer_for) -> Runner:
    return Runner(provider=provider, tracer=tracer_for())


@pytest.fixture
def capturing(provider, tracer_for) -> Runner:
    return Runner(provider=provider, tracer=tracer_for(capture_content=True))


def by_name(spans, prefix):
    return [s for s in spans if s.name.startswith(prefix)]


def agents_by_run(spans) -> dict[str, Any]:
    return {s.attributes["orchestra.run.id"]: s for s in by_name(spans, "invoke_agent ")}


# -- the tree -----------------------------------------------------------------------------


def segments_by_run(spans) -> dict[str, Any]:
    return {s.attributes["orchestra.run.id"]: s for s in by_name(spans, "orchestra.segment ")}


def assert_one_root_no_orphans(spans) -> Any:
    """One root; every parent span id is a span of the trace. Returns the root."""
    ids = {s.context.span_id for s in spans}
    assert len({s.context.trace_id for s in spans}) == 1
    orphans = [s.name for s in spans if s.parent is not None and s.parent.span_id not in ids]
    assert orphans == []
    [root] = [s for s in spans if s.parent is None]
    return root


async def test_research_tree_is_one_trace_with_parent_links(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("research"), "go")
    spans = exporter.get_finished_spans()
    root = assert_one_root_no_orphans(spans)
    agents, segments = agents_by_run(spans), segments_by_run(spans)
    assert set(agents) == set(segments) == {r.run_id for r in result.walk()}
    assert root is segments[result.run_id] and root.name == "orchestra.segment assistant"
    assert root.end_time <= agents[result.run_id].start_time  # ended first: exported first
    for run in result.walk():  # a segment's spans hang under its segment span
        segment = segments[run.run_id].context.span_id
        for span in spans:
            if span.attributes.get("orchestra.run.id") == run.run_id and span.parent is not None:
                assert span.parent.span_id == segment or span.name.startswith("orchestra.segment")
    tools = {s.context.span_id: s for s in by_name(spans, "execute_tool research")}
    for child in result.children:
        span = segments[child.run_id]  # the child's segment hangs under the parent's segment
        assert span.parent.span_id == root.context.span_id
        assert span.attributes["gen_ai.tool.call.id"] == child.state.parent_call_id
        [link] = span.links  # ... and links to the spawning tool call
        tool = tools[link.context.span_id]
        assert tool.attributes["gen_ai.tool.call.id"] == child.state.parent_call_id
        assert tool.parent.span_id == root.context.span_id
        assert agents[child.run_id].parent.span_id == span.context.span_id
        assert span.attributes["orchestra.parent_run.id"] == result.run_id
        assert span.attributes["orchestra.root_run.id"] == result.run_id


# -- costs and tokens: each counted once ----------------------------------------------------


async def test_costs_are_own_and_tree_and_never_double_counted(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("research"), "go")
    spans = exporter.get_finished_spans()
    agents = agents_by_run(spans)
    root = agents[result.run_id]
    children_tree = sum(
        agents[c.run_id].attributes["orchestra.tree.cost_usd"] for c in result.children
    )
    assert root.attributes["orchestra.tree.cost_usd"] == pytest.approx(
        root.attributes["orchestra.run.cost_usd"] + children_tree, abs=1e-9
    )
    assert root.attributes["orchestra.tree.cost_usd_total"] == pytest.approx(result.tree_cost_usd)
    for span in agents.values():  # own and inclusive, on every agent span
        a = span.attributes
        assert a["orchestra.usage.cost.own_usd"] == a["orchestra.run.cost_usd"]
        assert a["orchestra.usage.cost.tree_usd"] == a["orchestra.tree.cost_usd"]
    chats = by_name(spans, "chat ")
    for key in ("orchestra.call.cost_usd", "llm.cost.total"):
        assert sum(s.attributes[key] for s in chats) == pytest.approx(
            root.attributes["orchestra.tree.cost_usd"], abs=1e-9
        )  # each call counted once, on its chat span, under every key a backend sums
    assert len(chats) == sum(r.state.turns for r in result.walk())
    input_tokens = sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats)
    assert input_tokens == root.attributes["orchestra.tree.input_tokens"] > 0
    for span in spans:  # nothing else carries a key a backend would add up again
        if not span.name.startswith("chat "):
            assert not any(k.startswith(("gen_ai.usage.", "llm.cost.")) for k in span.attributes)
        assert "orchestra.cost_usd" not in span.attributes


# -- attributes ---------------------------------------------------------------------------


async def test_chat_and_tool_spans_follow_the_conventions(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("plan"), "go")
    spans = exporter.get_finished_spans()
    chat = by_name(spans, "chat plan")[0]
    a = chat.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "scripted.test"  # the host: no vendor known for it
    assert (a["server.address"], a["server.port"]) == ("scripted.test", 80)
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "plan"
    assert a["gen_ai.response.id"].startswith("chatcmpl-")
    assert a["gen_ai.request.max_tokens"] == 1024
    assert a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ("tool_calls",)
    tool = by_name(spans, "execute_tool read_file")[0]
    assert tool.attributes["gen_ai.tool.name"] == "read_file"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    for span in (chat, tool):
        assert span.attributes["gen_ai.conversation.id"] == result.run_id  # the root run
        assert span.attributes["orchestra.run.id"] == result.run_id
    assert tool.attributes["gen_ai.agent.name"] == "assistant"
    assert "gen_ai.agent.name" not in a  # not an inference span's attribute
    agent = by_name(spans, "invoke_agent")[0]
    assert agent.attributes["orchestra.status"] == "completed"
    assert agent.status.status_code is StatusCode.UNSET
    assert agent.attributes["gen_ai.agent.name"] == "assistant"
    assert "gen_ai.agent.id" not in agent.attributes  # hosted agents' only, since PR #242
    assert "gen_ai.usage.input_tokens" not in agent.attributes
    for span in spans:
        assert span.instrumentation_scope.name == "orchestra"
        assert span.instrumentation_scope.version == package_version()
        assert span.instrumentation_scope.schema_url == SCHEMA_URL


async def test_the_legacy_agent_id_is_the_agents_not_the_runs(
    provider, tracer_for, exporter, scenario_agent
):
    traced = Runner(provider=provider, tracer=tracer_for(semconv="gen_ai_legacy"))
    first = await traced.run(scenario_agent("plan"), "go")
    second = await traced.run(scenario_agent("plan"), "go")
    agents = agents_by_run(exporter.get_finished_spans())
    ids = {agents[r.run_id].attributes["gen_ai.agent.id"] for r in (first, second)}
    assert ids == {agent_id("assistant", "plan")} and first.run_id != second.run_id


async def test_the_provider_names_itself_and_the_tracer_may_override(
    sandbox, tracer_for, exporter, scenario_agent
):
    provider = OpenAIProvider(
        base_url="https://llm.example.com:8443/v1",
        api_key="k",
        transport=ScriptedTransport(),
        provider_name="acme",
    )
    try:
        await Runner(provider=provider, tracer=tracer_for()).run(scenario_agent("plan"), "go")
        override = Runner(provider=provider, tracer=tracer_for(provider_name="azure.ai.openai"))
        await override.run(scenario_agent("plan"), "go")
    finally:
        await provider.aclose()
    spans = exporter.get_finished_spans()
    names = [s.attributes["gen_ai.provider.name"] for s in by_name(spans, "chat ")]
    assert set(names) == {"acme", "azure.ai.openai"}
    chat = by_name(spans, "chat ")[0]
    assert (chat.attributes["server.address"], chat.attributes["server.port"]) == (
        "llm.example.com",
        8443,
    )
    agent = by_name(spans, "invoke_agent")[0]
    assert "gen_ai.provider.name" not in agent.attributes  # not an invocation span attribute


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://myco.openai.azure.com/openai", "azure.ai.openai"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "gcp.gemini"),
        ("http://127.0.0.1:8080/v1", "127.0.0.1"),
        ("https://openrouter.ai/api/v1", "openrouter.ai"),
    ],
)
def test_the_default_provider_name_comes_from_the_base_url(url, name):
    assert provider_name_for(url) == name
    assert OpenAIProvider(base_url=url, api_key="k").provider_name == name


@pytest.mark.parametrize(
    ("extra", "model", "reply_id"),
    [
        ({"model": "gpt-x-0613", "id": "chatcmpl-1"}, "gpt-x-0613", "chatcmpl-1"),
        ({}, None, None),
        ({"model": 7, "id": "x" * 1000}, None, None),  # odd labels are dropped, not refused
    ],
)
def test_a_reply_keeps_the_model_and_id_the_server_gave(extra, model, reply_id):
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], **extra}
    reply = parse_reply(httpx.Response(200, json=body))
    assert (reply.model, reply.id) == (model, reply_id)


# -- runs that did not complete -------------------------------------------------------------


async def test_a_child_stopped_by_its_budget_is_an_error_with_the_reason(
    traced, exporter, scenario_agent
):
    agent = scenario_agent("research_runaway", child_limits=Limits(max_budget_usd=0.005))
    result = await traced.run(agent, "go")
    [stopped] = [r for r in result.walk() if r.state.status.value == "budget_exceeded"]
    spans = exporter.get_finished_spans()
    agents = agents_by_run(spans)
    span = agents[stopped.run_id]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "budget_exceeded"
    assert span.status.description == stopped.state.reason != ""
    healthy = [agents[r.run_id] for r in result.walk() if r.run_id != stopped.run_id]
    assert all(s.status.status_code is StatusCode.UNSET for s in healthy)
    assert all("error.type" not in s.attributes for s in healthy)


async def test_a_parents_top_ups_are_events_and_an_attribute_of_its_span(
    traced, exporter, scenario_agent
):
    agent = attrs.evolve(
        scenario_agent(
            "research_runaway",
            limits=Limits(max_turns=20, max_budget_usd=0.05, on_limit="ask"),
            child_limits=Limits(max_budget_usd=0.004),
        ),
        top_ups=TopUps(grant=TopUp(usd=0.002), times=1),
    )
    result = await traced.run(agent, "go")
    root = agents_by_run(exporter.get_finished_spans())[result.run_id]
    answers = [e for e in root.events if e.name == "top_up"]
    assert [e.attributes["orchestra.top_up.granted"] for e in answers] == [True, False]
    assert root.attributes["orchestra.top_ups_granted_usd"] == pytest.approx(0.002)
    assert "granted it 1 time(s) already" in answers[1].attributes["orchestra.top_up.reason"]


@pytest.mark.parametrize(
    ("scenario", "limits", "error_type"),
    [
        ("runaway", Limits(max_turns=2), "max_turns_exceeded"),
        ("runaway", Limits(max_budget_usd=0.002), "budget_exceeded"),
        ("permanent", Limits(max_turns=5), "failed"),
        ("stuck", Limits(max_turns=10), "no_progress"),
        ("destructive", Limits(max_turns=10), "approval"),
    ],
)
async def test_every_run_that_did_not_complete_is_an_error(
    traced, exporter, scenario_agent, scenario, limits, error_type
):
    result = await traced.run(scenario_agent(scenario, limits=limits), "go")
    [span] = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == error_type
    assert span.status.description == result.state.reason
    assert span.attributes["orchestra.stop_reason"] == result.state.reason


async def test_a_run_past_its_deadline_is_an_error(
    traced, exporter, scenario_agent, autojump_clock
):
    result = await traced.run(scenario_agent("slow", limits=Limits(timeout_s=0.5)), "go")
    assert result.state.status.value == "deadline_exceeded"
    spans = exporter.get_finished_spans()
    [agent] = by_name(spans, "invoke_agent")
    assert agent.attributes["error.type"] == "deadline_exceeded"
    assert agent.status.description == result.state.reason
    [tool] = by_name(spans, "execute_tool scan_archive")  # stopped with its run
    assert tool.attributes["error.type"] == "deadline_exceeded"


async def test_cancelled_runs_are_marked(traced, exporter, scenario_agent, autojump_clock):
    async with trio.open_nursery() as nursery:
        handle = await traced.start(nursery, scenario_agent("slow"), "go")
        await trio.sleep(1.2)
        handle.cancel("user pressed Stop")
    spans = exporter.get_finished_spans()
    agent = by_name(spans, "invoke_agent")[0]
    assert agent.status.status_code is StatusCode.ERROR
    assert agent.attributes["error.type"] == "cancelled"
    assert agent.attributes["orchestra.stop_reason"] == "user pressed Stop"
    assert agent.status.description == "user pressed Stop"
    tool = by_name(spans, "execute_tool scan_archive")[0]
    assert tool.attributes["error.type"] == "cancelled"
    assert [e.name for e in tool.events].count("progress") >= 5


async def test_a_failed_tool_records_its_exception_type_and_no_message(
    traced, exporter, scenario_agent
):
    await traced.run(scenario_agent("recover"), "go")
    failed = [
        s
        for s in by_name(exporter.get_finished_spans(), "execute_tool read_file")
        if s.status.status_code is StatusCode.ERROR
    ]
    [span] = failed
    assert span.attributes["error.type"] == "orchestra._exceptions.ToolError"
    [exception] = [e for e in span.events if e.name == "exception"]
    assert exception.attributes["exception.type"] == "orchestra._exceptions.ToolError"
    assert "exception.message" not in exception.attributes  # contents are opt-in
    assert "timeout.log" not in (span.status.description or "")


async def test_with_capture_a_failed_tool_records_its_message(capturing, exporter, scenario_agent):
    await capturing.run(scenario_agent("recover"), "go")
    spans = by_name(exporter.get_finished_spans(), "execute_tool read_file")
    [span] = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    [exception] = [e for e in span.events if e.name == "exception"]
    assert "no such file: timeout.log" in exception.attributes["exception.message"]
    assert "gen_ai.tool.call.result" not in span.attributes  # results of successes only


# -- resumes ----------------------------------------------------------------------------------


async def test_a_resumed_run_continues_the_same_trace(traced, exporter, scenario_agent):
    agent = scenario_agent("destructive", limits=Limits(max_turns=10))
    stopped = await traced.run(agent, "go")
    assert "traceparent" in stopped.state.trace_context
    traced.approve(stopped.run_id)
    other_process = Runner(provider=traced.provider, store=traced.store, tracer=traced.tracer)
    await other_process.resume(stopped.run_id, agent)
    spans = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert len(spans) == 2 and len({s.context.trace_id for s in spans}) == 1
    first, second = sorted(spans, key=lambda s: s.start_time)
    segments = sorted(
        by_name(exporter.get_finished_spans(), "orchestra.segment"), key=lambda s: s.start_time
    )
    assert [s.context.span_id for s in segments] == [first.parent.span_id, second.parent.span_id]
    assert segments[1].parent.span_id == segments[0].context.span_id  # one trace, one root
    assert_one_root_no_orphans(exporter.get_finished_spans())
    assert second.attributes["orchestra.resumed"] is True
    assert [e.name for e in first.events] == ["approval_required", "run_stopped"]
    assert first.attributes["error.type"] == "approval"
    assert second.status.status_code is StatusCode.UNSET
    [decision] = [e for e in second.events if e.name == "orchestra.decision"]
    assert decision.attributes["orchestra.decision"] == "approved"
    assert decision.attributes["gen_ai.tool.name"] == "delete_file"
    total = traced.store.load(stopped.run_id).own.cost_usd
    spent = first.attributes["orchestra.run.cost_usd"] + second.attributes["orchestra.run.cost_usd"]
    assert spent == pytest.approx(total, abs=1e-12)  # agent spans of one run add up
    assert second.attributes["orchestra.run.cost_usd_total"] == pytest.approx(total)


async def test_a_crash_loses_only_the_spans_in_flight(
    provider, tracer_for, exporter, scenario_agent
):
    """``kill -9`` mid-tree, simulated: at the crash the store is what was saved and the
    exporter what was exported; nothing after reaches either. The resumed tree is one
    trace with one root and no orphan span: every parent id is an exported span."""
    agent = scenario_agent("research")
    store, crashed_tracer = MemoryStore(), tracer_for()
    crash: dict[str, Any] = {}

    def until_killed(run, event) -> None:
        if crash:
            return  # the process is gone: nothing more is exported
        crashed_tracer(run, event)
        if event.type == "turn" and run.parent is not None:  # a child's call is exported...
            crash.update(store=copy.deepcopy(store), root_id=run.state.root_id)
            scope.cancel()  # ...its agent span, its parent's tool span are in flight

    with trio.CancelScope() as scope:
        await Runner(provider=provider, store=store, tracer=until_killed).run(
            agent, demo_task("research")
        )
    lost = exporter.get_finished_spans()
    assert lost and not by_name(lost, "invoke_agent")  # agent spans end only at the stop
    resumed = Runner(provider=provider, store=crash["store"], tracer=tracer_for())
    result = await resumed.resume(crash["root_id"], agent)
    assert result.status.value == "completed"

    spans = exporter.get_finished_spans()
    root = assert_one_root_no_orphans(spans)
    first, second = sorted(
        (
            s
            for s in by_name(spans, "orchestra.segment ")
            if s.attributes["orchestra.run.id"] == result.run_id
        ),
        key=lambda s: s.start_time,
    )
    assert root is first and second.parent.span_id == first.context.span_id
    assert second.attributes["orchestra.resumed"] is True
    assert result.state.trace_context == crash["store"].load(result.run_id).trace_context


async def test_a_rejection_is_recorded_with_its_reason(traced, exporter, scenario_agent):
    agent = scenario_agent("destructive", limits=Limits(max_turns=10))
    stopped = await traced.run(agent, "go")
    traced.reject(stopped.run_id, reason=f"not today, key {SECRET}")
    await traced.resume(stopped.run_id, agent)
    spans = by_name(exporter.get_finished_spans(), "invoke_agent")
    second = max(spans, key=lambda s: s.start_time)
    [decision] = [e for e in second.events if e.name == "orchestra.decision"]
    assert decision.attributes["orchestra.decision"] == "rejected"
    assert decision.attributes["orchestra.decision.reason"] == f"not today, key {REDACTED}"


# -- content capture ----------------------------------------------------------------------------


async def test_contents_are_off_by_default(traced, exporter, scenario_agent, monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    await traced.run(scenario_agent("plan"), "go")
    content_keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    for span in exporter.get_finished_spans():
        assert not content_keys & set(span.attributes)


async def test_captured_contents_follow_the_conventions(capturing, exporter, scenario_agent):
    result = await capturing.run(scenario_agent("plan"), f"go; my key is {SECRET}")
    spans = exporter.get_finished_spans()
    first, *_, last = sorted(by_name(spans, "chat plan"), key=lambda s: s.start_time)
    system = json.loads(first.attributes["gen_ai.system_instructions"])
    assert system[0]["type"] == "text" and system[0]["content"]
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert sent == [
        {"role": "user", "parts": [{"type": "text", "content": f"go; my key is {REDACTED}"}]}
    ]
    [reply] = json.loads(first.attributes["gen_ai.output.messages"])
    assert reply["role"] == "assistant" and reply["finish_reason"] == "tool_calls"
    call = next(p for p in reply["parts"] if p["type"] == "tool_call")
    assert isinstance(call["arguments"], dict) and call["id"] and call["name"]
    history = json.loads(last.attributes["gen_ai.input.messages"])
    responses = [p for m in history for p in m["parts"] if p["type"] == "tool_call_response"]
    assert responses and all(isinstance(p["response"], str) for p in responses)
    [answer] = json.loads(last.attributes["gen_ai.output.messages"])
    assert answer["parts"][0]["content"] == result.answer
    tool = by_name(spans, "execute_tool read_file")[0]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"path": "errors.log"}
    assert "worker 7 timed out" in tool.attributes["gen_ai.tool.call.result"]
    agent = by_name(spans, "invoke_agent")[0]
    assert (
        agent.attributes["gen_ai.system_instructions"]
        == first.attributes["gen_ai.system_instructions"]
    )
    assert tool.end_time >= tool.start_time


@pytest.mark.parametrize(("value", "on"), [("true", True), ("TRUE", True), ("false", False)])
async def test_the_standard_variable_switches_capture(
    provider, tracer_for, exporter, scenario_agent, monkeypatch, value, on
):
    monkeypatch.setenv(CAPTURE_ENV, value)
    tracer = tracer_for()
    assert tracer.capture_content is on
    await Runner(provider=provider, tracer=tracer).run(scenario_agent("plan"), "go")
    chat = by_name(exporter.get_finished_spans(), "chat ")[0]
    assert ("gen_ai.input.messages" in chat.attributes) is on


async def test_an_argument_overrides_the_variable(tracer_for, monkeypatch):
    monkeypatch.setenv(CAPTURE_ENV, "true")
    assert tracer_for(capture_content=False).capture_content is False


async def test_captured_contents_are_bounded(capturing, exporter, scenario_agent):
    await capturing.run(scenario_agent("plan"), "x" * (MAX_TEXT * 3))
    chat = by_name(exporter.get_finished_spans(), "chat ")[0]
    [message] = json.loads(chat.attributes["gen_ai.input.messages"])
    text = message["parts"][0]["content"]
    assert len(text) == MAX_TEXT + 1 and text.endswith("…")


# -- export ---------------------------------------------------------------------------------


def test_configure_otlp_refuses_an_unknown_protocol_before_starting_anything(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="http/json"):
        configure_otlp()


def test_configure_otlp_follows_the_standard_variables(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http")  # an alias of http/protobuf
    spans = configure_otlp(endpoint="http://127.0.0.1:9")
    try:
        assert isinstance(spans, RecordingTracerProvider)
        assert spans.sink.resource.attributes["service.name"] == "from-env"
        assert spans.sink.resource.attributes["deployment.environment"] == "test"
        assert spans.sink.resource.attributes["service.version"] == package_version()
    finally:
        spans.shutdown(timeout_millis=5000)  # nothing was traced: nothing to send


def test_a_service_version_from_the_environment_is_kept(monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=9.9")
    spans = configure_otlp(endpoint="http://127.0.0.1:9")
    try:
        assert spans.sink.resource.attributes["service.version"] == "9.9"
    finally:
        spans.shutdown(timeout_millis=5000)


async def test_chat_spans_say_cached_and_reasoning_tokens(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("reasoning"), "go")
    chats = by_name(exporter.get_finished_spans(), "chat ")
    assert len(chats) == result.state.own.model_calls == 3
    reasoning = [s.attributes["gen_ai.usage.reasoning.output_tokens"] for s in chats]
    assert reasoning == [300, 300, 300]
    cached = [s.attributes.get("gen_ai.usage.cache_read.input_tokens", 0) for s in chats]
    assert cached == sorted(cached) and sum(cached) == result.state.own.cached_input_tokens > 0
    for span in chats:  # subsets of the totals, as the conventions say
        assert (
            span.attributes["gen_ai.usage.reasoning.output_tokens"]
            <= span.attributes["gen_ai.usage.output_tokens"]
        )


async def test_streamed_calls_say_their_time_to_first_chunk(
    tracer_for, exporter, sandbox, autojump_clock
):
    provider = OpenAIProvider(
        base_url="http://s/v1", api_key="k", transport=ScriptedTransport(latency=0.5, chunk_s=0.25)
    )
    runner = Runner(provider=provider, tracer=tracer_for())
    result = await runner.run(demo_agent("plan", sandbox), "go")
    chats = by_name(exporter.get_finished_spans(), "chat ")
    assert len(chats) == result.state.own.model_calls == 3
    for span in chats:  # the reply's latency, then the first chunk's wait
        assert span.attributes["orchestra.streamed"] is True
        assert span.attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.75)


async def test_a_wound_down_child_says_its_answer_is_partial_on_its_span(
    traced, exporter, scenario_agent
):
    limits = Limits(max_budget_usd=0.004, wind_down_tokens=128)
    agent = scenario_agent("research_runaway", child_limits=limits)
    result = await traced.run(agent, "go")
    agents = agents_by_run(exporter.get_finished_spans())
    partial = [r for r in result.walk() if r.answer_partial]
    assert partial
    for run in result.walk():
        assert agents[run.run_id].attributes["orchestra.answer_partial"] is run.answer_partial


async def test_a_continued_run_keeps_its_conversations_id(
    provider, tracer_for, exporter, scenario_agent
):
    runner = Runner(provider=provider, tracer=tracer_for(), store=MemoryStore())
    agent = scenario_agent("plan")
    first = await runner.run(agent, "go")
    second = await runner.run(agent, "And now?", continue_from=first.run_id)
    spans = exporter.get_finished_spans()
    agents = agents_by_run(spans)
    assert agents[second.run_id].attributes["orchestra.continues"] == first.run_id
    mine = [s for s in spans if s.attributes.get("orchestra.run.id") == second.run_id]
    assert mine and {s.attributes["gen_ai.conversation.id"] for s in mine} == {first.run_id}
