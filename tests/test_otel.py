"""Spans for the run tree (GenAI conventions), read back in memory from both pipelines."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from orchestra import ConfigError, Limits, RecordingTracerProvider, Runner
from orchestra._otel import OTelTracer, configure_otlp
from orchestra.testing import InMemorySpanSink


@pytest.fixture(params=["sdk", "recording"])
def exporter(request: pytest.FixtureRequest) -> InMemorySpanExporter | InMemorySpanSink:
    """Finished spans from the SDK's pipeline, or from ours (as its export process sees them)."""
    return InMemorySpanExporter() if request.param == "sdk" else InMemorySpanSink()


@pytest.fixture
def traced(provider, exporter) -> Runner:
    if isinstance(exporter, InMemorySpanSink):
        tracer_provider: Any = RecordingTracerProvider(sink=exporter)
    else:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Runner(provider=provider, tracer=OTelTracer(tracer_provider=tracer_provider))


def by_name(spans, prefix):
    return [s for s in spans if s.name.startswith(prefix)]


async def test_research_tree_is_one_trace_with_parent_links(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("research"), "go")
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    agents = {s.attributes["orchestra.run.id"]: s for s in by_name(spans, "invoke_agent ")}
    assert set(agents) == {r.run_id for r in result.walk()}
    root = agents[result.run_id]
    assert root.parent is None and root.name == "invoke_agent assistant"
    tools = {s.context.span_id: s for s in by_name(spans, "execute_tool research")}
    for child in result.children:
        span = agents[child.run_id]
        tool = tools[span.parent.span_id]  # the child's span hangs under the parent's tool call
        assert tool.attributes["gen_ai.tool.call.id"] == child.state.parent_call_id
        assert tool.parent.span_id == root.context.span_id
        assert span.attributes["orchestra.parent_run.id"] == result.run_id
        assert span.attributes["orchestra.root_run.id"] == result.run_id


async def test_costs_are_own_and_tree_and_never_double_counted(traced, exporter, scenario_agent):
    result = await traced.run(scenario_agent("research"), "go")
    spans = exporter.get_finished_spans()
    agents = {s.attributes["orchestra.run.id"]: s for s in by_name(spans, "invoke_agent ")}
    root = agents[result.run_id]
    children_tree = sum(
        agents[c.run_id].attributes["orchestra.tree_cost_usd"] for c in result.children
    )
    assert root.attributes["orchestra.tree_cost_usd"] == pytest.approx(
        root.attributes["orchestra.cost_usd"] + children_tree, abs=1e-9
    )
    chats = by_name(spans, "chat ")
    assert sum(s.attributes["orchestra.cost_usd"] for s in chats) == pytest.approx(
        result.tree_cost_usd, abs=1e-9
    )  # each call counted once, on its chat span
    assert len(chats) == sum(r.state.turns for r in result.walk())


async def test_chat_and_tool_spans_follow_the_conventions(traced, exporter, scenario_agent):
    await traced.run(scenario_agent("plan"), "go")
    spans = exporter.get_finished_spans()
    chat = by_name(spans, "chat plan")[0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.max_tokens"] == 1024
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    tool = by_name(spans, "execute_tool read_file")[0]
    assert tool.attributes["gen_ai.tool.name"] == "read_file"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # contents are opt-in
    agent = by_name(spans, "invoke_agent")[0]
    assert agent.attributes["orchestra.status"] == "completed"


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
    tool = by_name(spans, "execute_tool scan_archive")[0]
    assert tool.attributes["error.type"] == "cancelled"
    assert [e.name for e in tool.events].count("progress") >= 5


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
    assert second.parent.span_id == first.context.span_id
    assert second.attributes["orchestra.resumed"] is True
    assert [e.name for e in first.events] == ["approval_required", "run_stopped"]
    total = traced.store.load(stopped.run_id).own.cost_usd
    spent = first.attributes["orchestra.cost_usd"] + second.attributes["orchestra.cost_usd"]
    assert spent == pytest.approx(total, abs=1e-12)  # agent spans of one run add up
    assert second.attributes["orchestra.run.cost_usd_total"] == pytest.approx(total)


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
    finally:
        spans.shutdown(timeout_millis=5000)  # nothing was traced: nothing to send
