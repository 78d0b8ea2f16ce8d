"""Secrets never leave a run: not in reasons, errors, events, spans, saved state or CLI lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestra import (
    Agent,
    Event,
    InterruptionKind,
    JsonlSink,
    Limits,
    MemoryStore,
    OpenAIProvider,
    OTelTracer,
    PermanentToolError,
    RecordingTracerProvider,
    RetryPolicy,
    Runner,
    RunResult,
    Status,
    state_to_json,
    tool,
)
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._redact import REDACTED, excerpt, redact, redact_data, register
from orchestra._views.printed import print_tree, print_waiting
from orchestra._views.report import report
from orchestra.testing import InMemorySpanSink, ScriptedTransport

OPENAI_KEY = "sk-proj-Zq81vN3xK0pLm5TtYw7eRb2u"
PLAIN_KEY = "0ddba11-c0ffee-s3cret-of-the-house"  # no known shape: only the registry knows it

# -- the text layer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bad key Bearer sk-abc123", "bad key Bearer [REDACTED]"),
        ("Authorization: Bearer abc.def-123", "Authorization: Bearer [REDACTED]"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', '{"authorization": "Basic [REDACTED]"}'),
        ("{'x-api-key': 'k3y-value'}", "{'x-api-key': '[REDACTED]'}"),
        ("GET /v1?api_key=abc123&page=2", "GET /v1?api_key=[REDACTED]&page=2"),
        ("key sk-ant-api03-xyz789 refused", "key [REDACTED] refused"),
        ("token hf_abcdefghijklmnop12345 bad", "token [REDACTED] bad"),
        ("https://bob:hunter2@llm.example/v1", "https://bob:[REDACTED]@llm.example/v1"),
        ("Bearer authentication is required", "Bearer authentication is required"),
        ("the task-runner and desk-lamp", "the task-runner and desk-lamp"),
    ],
)
def test_credential_shapes_are_redacted_and_prose_is_not(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected  # twice changes nothing more


def test_registered_secrets_are_redacted_wherever_they_appear():
    secret = "plain-words-secret-4471"
    assert redact(f"x{secret}y") == f"x{secret}y"
    register(secret)
    assert redact(f"x{secret}y") == f"x{REDACTED}y"
    assert redact_data({"a": [f"{secret}", ("t", secret)], "n": 3}) == {
        "a": [REDACTED, ("t", REDACTED)],
        "n": 3,
    }


def test_short_keys_are_not_secrets():
    register("k")
    assert redact("unknown key k", "k") == "unknown key k"


def test_an_excerpt_is_redacted_before_it_is_cut():
    register(PLAIN_KEY)
    text = "x" * 290 + PLAIN_KEY
    assert PLAIN_KEY[:10] not in excerpt(text, 300)
    assert excerpt(text, 300) == "x" * 290 + REDACTED


# -- runs against servers that echo the key back -----------------------------------------------


def echo_json(code: int) -> Callable[[httpx.Request], httpx.Response]:
    """An OpenAI-shaped error whose message quotes the Authorization header and the raw key."""

    def respond(request: httpx.Request) -> httpx.Response:
        header = request.headers["authorization"]
        key = header.removeprefix("Bearer ")
        body = {"error": {"message": f"bad key {header} (got {key!r})", "type": "auth"}}
        return httpx.Response(code, json=body)

    return respond


def echo_text(code: int) -> Callable[[httpx.Request], httpx.Response]:
    """A non-JSON page that prints the raw request headers."""

    def respond(request: httpx.Request) -> httpx.Response:
        lines = "\n".join(f"{k}: {v}" for k, v in request.headers.items())
        return httpx.Response(code, text=f"<html><pre>{lines}</pre></html>")

    return respond


class Echoing(httpx.AsyncBaseTransport):
    """Every request answered by ``fault`` while it lasts, then by the scripted provider."""

    def __init__(self, fault: Callable[[httpx.Request], httpx.Response], times: int) -> None:
        self.fault, self.times, self.requests = fault, times, 0
        self.scripted = ScriptedTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.requests <= self.times:
            return self.fault(request)
        return await self.scripted.handle_async_request(request)


async def run_against(
    transport: httpx.AsyncBaseTransport, key: str, agent: Agent, task: str, tmp_path: Path
) -> tuple[RunResult, str, str, MemoryStore]:
    """The run's result, its JSONL trace and its spans (as JSON), and its store."""
    spans, store = InMemorySpanSink(), MemoryStore()
    sink = JsonlSink(path=str(tmp_path / "trace.jsonl"))
    provider = OpenAIProvider(base_url="http://echo.test/v1", api_key=key, transport=transport)
    runner = Runner(
        provider=provider,
        sink=sink,
        store=store,
        retry=RetryPolicy(attempts=3),
        tracer=OTelTracer(tracer_provider=RecordingTracerProvider(sink=spans)),
    )
    try:
        result = await runner.run(agent, task)
    finally:
        sink.close()
        await provider.aclose()
    trace = (tmp_path / "trace.jsonl").read_text()
    return result, trace, json.dumps([s.to_json() for s in spans.get_finished_spans()]), store


def assert_nowhere(key: str, result: RunResult, trace: str, spans: str, store: MemoryStore, capsys):
    shown = report(result, store, None, None)
    print_tree(shown)
    print_waiting(shown, "")
    printed = capsys.readouterr().out + json.dumps(shown)
    places = {
        "state": state_to_json(result.state),
        "saved": state_to_json(store.load(result.run_id)),
        "trace": trace,
        "stored events": json.dumps(store.events(run_id=result.run_id)),
        "spans": spans,
        "cli": printed,
    }
    for where, text in places.items():
        assert key not in text, f"the key leaked into the {where}"
        assert key[4:16] not in text, f"part of the key leaked into the {where}"


@pytest.mark.parametrize("key", [OPENAI_KEY, PLAIN_KEY])
async def test_a_401_echoing_the_key_fails_the_run_without_it(
    sandbox, tmp_path, capsys, autojump_clock, key
):
    transport = Echoing(echo_json(401), times=1)
    agent = demo_agent("plan", sandbox, limits=Limits(max_turns=5))
    result, trace, spans, store = await run_against(
        transport, key, agent, demo_task("plan"), tmp_path
    )
    assert result.status is Status.FAILED and transport.requests == 1
    assert result.state.reason.startswith("model call failed: http://echo.test/v1 answered 401")
    assert f"Bearer {REDACTED}" in result.state.reason and "got '[REDACTED]'" in result.state.reason
    assert_nowhere(key, result, trace, spans, store, capsys)


@pytest.mark.parametrize("fault", [echo_json(500), echo_text(500), echo_text(200)])
@pytest.mark.parametrize("key", [OPENAI_KEY, PLAIN_KEY])
async def test_a_failing_server_echoing_the_key_is_retried_then_unavailable_without_it(
    sandbox, tmp_path, capsys, autojump_clock, key, fault
):
    transport = Echoing(fault, times=10)
    agent = demo_agent("plan", sandbox, limits=Limits(max_turns=5))
    result, trace, spans, store = await run_against(
        transport, key, agent, demo_task("plan"), tmp_path
    )
    assert result.status is Status.INTERRUPTED and transport.requests == 3
    assert result.state.interruption is not None
    assert result.state.interruption.kind is InterruptionKind.PROVIDER_UNAVAILABLE
    retries = [json.loads(line) for line in trace.splitlines() if '"model_retry"' in line]
    assert len(retries) == 2 and all(REDACTED in r["error"] for r in retries)
    assert "orchestra.error" in spans  # the retries are on the chat span, redacted
    assert_nowhere(key, result, trace, spans, store, capsys)


@tool(read_only=True)
def upstream() -> str:
    """Calls an upstream service with the same key."""
    raise PermanentToolError(f"upstream said: invalid api key {PLAIN_KEY}")


class Caller:
    """A provider whose every reply calls ``upstream``."""

    async def complete(self, request: Any) -> Any:
        from orchestra import ChatReply

        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "upstream"}}],
        }
        return ChatReply(
            message=message, finish_reason="tool_calls", prompt_tokens=1, completion_tokens=1
        )


UPSTREAM_AGENT = Agent(name="a", model="m", tools=(upstream,), limits=Limits(max_turns=3))


async def test_a_tool_error_quoting_the_key_is_redacted_everywhere(
    tmp_path, capsys, autojump_clock
):
    register(PLAIN_KEY)
    spans, store, events = InMemorySpanSink(), MemoryStore(), []
    runner = Runner(
        provider=Caller(),
        store=store,
        sink=events.append,
        tracer=OTelTracer(tracer_provider=RecordingTracerProvider(sink=spans)),
    )
    result = await runner.run(UPSTREAM_AGENT, "go")
    assert result.status is Status.FAILED
    assert result.state.reason.endswith(f"invalid api key {REDACTED}")
    assert result.state.results == {"c0": f"Error: upstream said: invalid api key {REDACTED}"}
    spans_json = json.dumps([s.to_json() for s in spans.get_finished_spans()])
    assert_nowhere(
        PLAIN_KEY, result, json.dumps([e.to_dict() for e in events]), spans_json, store, capsys
    )


async def test_a_runner_without_sink_or_tracer_stores_the_same_redacted_events(autojump_clock):
    """With nobody listening no Event is made: the stored records must not differ."""
    register(PLAIN_KEY)
    heard, quiet = MemoryStore(), MemoryStore()
    await Runner(provider=Caller(), store=heard, sink=lambda e: None).run(
        UPSTREAM_AGENT, "go", run_id="run_same"
    )
    await Runner(provider=Caller(), store=quiet).run(UPSTREAM_AGENT, "go", run_id="run_same")

    def timeless(store: MemoryStore) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "at"} for e in store.events()]

    assert timeless(quiet) == timeless(heard)
    assert any(e["type"] == "tool_error" for e in quiet.events())
    assert PLAIN_KEY not in json.dumps(quiet.events())
    assert REDACTED in json.dumps(quiet.events())


def test_event_data_is_redacted_when_the_event_is_made():
    register(PLAIN_KEY)
    event = Event(
        type="model_retry",
        run_id="r",
        root_id="r",
        parent_id=None,
        at=0.0,
        data={"error": f"echo: {PLAIN_KEY}", "args": {"headers": [f"Bearer {OPENAI_KEY}"]}},
    )
    assert event.data == {
        "error": f"echo: {REDACTED}",
        "args": {"headers": [f"Bearer {REDACTED}"]},
    }
