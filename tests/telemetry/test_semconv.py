"""Every emitted GenAI name is the vendored registry's; the previous names only on request.

The registry (``data/gen_ai_registry.yaml``) is an extract of
open-telemetry/semantic-conventions-genai: see its header for where it came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestra import OpenAIProvider, RecordingTracerProvider, Runner
from orchestra._recipes.demo import demo_agent
from orchestra._telemetry.otel import OTelTracer
from orchestra._telemetry.semconv import (
    CURRENT,
    LEGACY,
    SEMCONV_ENV,
    chat_extras,
    semconv_from_env,
)
from orchestra.testing import InMemorySpanSink, ScriptedTransport

REGISTRY = yaml.safe_load((Path(__file__).parent / "data" / "gen_ai_registry.yaml").read_text())
ATTRIBUTES = frozenset(REGISTRY["attributes"])
LEGACY_ONLY = {  # what only the previous names carry, by span operation
    "invoke_agent": {"gen_ai.agent.id", "gen_ai.provider.name"},
    "chat": {"gen_ai.agent.name", "gen_ai.usage.cost"},
}


def registered(key: str) -> bool:
    """Whether ``key`` is a registry attribute (or one of a template attribute's keys)."""
    return key in ATTRIBUTES or any(key.startswith(f"{name}.") for name in ATTRIBUTES)


async def tree_spans(sandbox: Path, **options: Any) -> list[Any]:
    """The spans of a research tree, a planning run, a reasoning run (cached tokens)
    and a streamed run, with contents captured: every kind of attribute emitted."""
    sink = InMemorySpanSink()
    tracer = OTelTracer(
        tracer_provider=RecordingTracerProvider(sink=sink), capture_content=True, **options
    )
    for transport in (ScriptedTransport(), ScriptedTransport(chunk_s=0.0)):  # the second streams
        provider = OpenAIProvider(base_url="http://s.test/v1", api_key="k", transport=transport)
        try:
            runner = Runner(provider=provider, tracer=tracer)
            for scenario in ("research", "plan", "reasoning"):
                await runner.run(demo_agent(scenario, sandbox), "go")
        finally:
            await provider.aclose()
    return list(sink.get_finished_spans())


def keys_of(span: Any) -> Iterator[tuple[str, str]]:
    """(where, key) for each attribute of ``span`` and of its events."""
    for key in span.attributes:
        yield span.name, key
    for event in span.events:
        for key in event.attributes:
            yield f"{span.name} / {event.name}", key


async def test_every_gen_ai_name_emitted_is_in_the_registry(sandbox):
    spans = await tree_spans(sandbox)
    unknown = {
        (where, key)
        for span in spans
        for where, key in keys_of(span)
        if key.startswith("gen_ai.") and not registered(key)
    }
    assert unknown == set()
    operations = {span.attributes.get("gen_ai.operation.name") for span in spans} - {None}
    assert operations == {"invoke_agent", "chat", "execute_tool"}
    assert operations <= set(REGISTRY["operation_names"])


async def test_each_span_carries_only_what_its_span_type_defines(sandbox):
    spans = await tree_spans(sandbox)
    for span in spans:
        operation = span.attributes.get("gen_ai.operation.name")
        if operation is None:  # Orchestra's own segment spans: registry names only
            assert span.name.startswith("orchestra.segment ")
            continue
        kind = REGISTRY["spans"][operation]
        assert span.kind.name.lower() == kind["kind"]
        subject = span.attributes.get("gen_ai.request.model") if operation == "chat" else None
        subject = subject or span.attributes.get("gen_ai.agent.name")
        if operation == "execute_tool":
            subject = span.attributes["gen_ai.tool.name"]
        assert span.name == f"{operation} {subject}"
        defined = set(kind["attributes"])
        semconv = {k for k in span.attributes if k.startswith(("gen_ai.", "server.", "error."))}
        assert semconv <= defined, (span.name, semconv - defined)


async def test_agent_spans_carry_own_and_inclusive_cost(sandbox):
    spans = await tree_spans(sandbox)
    agents = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    roots = [s for s in agents if "orchestra.parent_run.id" not in s.attributes]
    assert len(agents) > len(roots) == 6  # the research roots have children
    for span in agents:
        own = span.attributes["orchestra.usage.cost.own_usd"]
        assert 0 <= own <= span.attributes["orchestra.usage.cost.tree_usd"]
    total = sum(s.attributes["orchestra.usage.cost.tree_usd"] for s in roots)
    assert total == pytest.approx(sum(s.attributes["orchestra.call.cost_usd"] for s in chats))


async def test_the_previous_names_appear_only_with_the_setting(sandbox, monkeypatch):
    current = await tree_spans(sandbox)
    monkeypatch.setenv(SEMCONV_ENV, LEGACY)
    legacy = await tree_spans(sandbox)
    for operation, keys in LEGACY_ONLY.items():
        now = [s for s in current if s.attributes.get("gen_ai.operation.name") == operation]
        before = [s for s in legacy if s.attributes.get("gen_ai.operation.name") == operation]
        assert now and before
        assert not any(keys & set(s.attributes) for s in now)
        assert all(keys <= set(s.attributes) for s in before)
    streamed = [s for s in current if s.attributes.get("orchestra.streamed")]
    assert streamed and all(s.attributes["gen_ai.request.stream"] is True for s in streamed)
    assert not any("gen_ai.request.stream" in s.attributes for s in legacy)


def test_a_cache_write_is_named_as_each_convention_names_it():
    data = {"cache_write_tokens": 25}
    assert chat_extras(CURRENT, data, cost=0.5) == {"gen_ai.usage.cache_write.input_tokens": 25}
    assert chat_extras(LEGACY, data, cost=0.5) == {
        "gen_ai.usage.cache_creation.input_tokens": 25,
        "gen_ai.usage.cost": 0.5,
    }
    assert registered("gen_ai.usage.cache_write.input_tokens")
    assert not registered("gen_ai.usage.cache_creation.input_tokens")


def test_the_setting_defaults_to_the_current_names_and_refuses_others(monkeypatch):
    monkeypatch.delenv(SEMCONV_ENV, raising=False)
    assert semconv_from_env() == CURRENT == OTelTracer().semconv
    monkeypatch.setenv(SEMCONV_ENV, "GEN_AI_LEGACY")
    assert semconv_from_env() == LEGACY
    assert OTelTracer(semconv=CURRENT).semconv == CURRENT  # the argument wins
    monkeypatch.setenv(SEMCONV_ENV, "v1.34")
    with pytest.raises(ValueError, match=SEMCONV_ENV):
        OTelTracer()
