"""Fault modifiers of the scripted provider: parsing, each fault on the wire, and runs over them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestra import (
    ConfigError,
    InterruptionKind,
    MemoryStore,
    OpenAIProvider,
    RetryPolicy,
    Runner,
    Status,
)
from orchestra._recipes.demo import demo_agent, demo_task, parse_scenario
from orchestra._recipes.recipe import DEMO_TIMEOUT_S, Recipe
from orchestra._scripted.faults import FaultCounter, FaultSpec, Modifier
from orchestra.testing import ScriptedTransport, ScriptError, reply, scripted_server

CHAT = {"model": "plan", "messages": [{"role": "user", "content": "What went wrong?"}]}
FAST = RetryPolicy(wait_initial=0.01, wait_max=0.1, wait_jitter=0.01)


def chat(model: str) -> dict[str, Any]:
    return {**CHAT, "model": model}


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "base", "modifiers", "label"),
    [
        ("plan", "plan", (), ""),
        ("plan+429x3", "plan", (Modifier("429", 3),), ""),
        ("plan+500", "plan", (Modifier("500", 1),), ""),
        ("deep+hang+nousage", "deep", (Modifier("hang"), Modifier("nousage")), ""),
        ("plan+503x2+reset@run7", "plan", (Modifier("503", 2), Modifier("reset")), "run7"),
    ],
)
def test_a_model_name_parses_into_base_modifiers_and_label(model, base, modifiers, label):
    spec = FaultSpec.parse(model)
    assert (spec.model, spec.base, spec.modifiers, spec.label) == (model, base, modifiers, label)


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("plan+nope", "no such fault"),
        ("plan+600", "400 to 599"),
        ("plan+200", "400 to 599"),
        ("plan+429x0", "count must be >= 1"),
        ("plan+nousagex2", "nousage takes none"),
        ("plan+429x", "not FAULT or FAULTxN"),
        ("plan+", "not FAULT or FAULTxN"),
        ("+429", "no scenario"),
    ],
)
def test_a_bad_modifier_is_a_404_naming_it_and_the_known_ones(model, why):
    with pytest.raises(ScriptError, match=why) as caught:
        FaultSpec.parse(model)
    assert caught.value.status == 404 and caught.value.code == "model_not_found"
    if "scenario" not in why:
        assert "hang, garbage, truncated, reset, keepalive, linger, overlong, nousage" in (
            caught.value.message
        )


def test_counted_faults_are_laid_end_to_end_and_nousage_is_not_counted():
    spec = FaultSpec.parse("plan+nousage+429x2+500")
    assert [str(spec.fault(n)) for n in range(5)] == ["429x2", "429x2", "500", "None", "None"]
    assert not spec.usage and FaultSpec.parse("plan+500").usage


def test_demo_names_accept_modifiers_on_a_known_scenario(sandbox: Path):
    assert parse_scenario("plan+429x3+hang") == ("plan", ("429x3", "hang"))
    assert parse_scenario("slow_tree") == ("slow_tree", ())
    agent = demo_agent("research+500x2", sandbox)
    assert agent.model == "research+500x2"
    assert "research" in {t.name for t in agent.tools}
    assert demo_task("plan+429x3") == demo_task("plan")
    with pytest.raises(ConfigError, match="choose one of plan, reasoning, runaway"):
        parse_scenario("plaan+429")
    with pytest.raises(ConfigError, match="no such fault"):
        demo_agent("plan+boom", sandbox)


# -- each fault on the wire: the socket server and the in-process transport ---------------


@pytest.fixture(params=["socket", "transport"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def open_client(
    kind: str, *, faults: bool = True, read_timeout: float | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    timeout = read_timeout
    headers = {"authorization": "Bearer sk-secret-123"}
    if kind == "transport":
        transport = ScriptedTransport(faults=faults)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://s/v1", headers=headers, timeout=timeout
        ) as client:
            yield client
        return
    async with (
        scripted_server(faults=faults) as url,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as client,
    ):
        yield client


async def post(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/chat/completions", json=chat(model))


async def test_status_faults_then_the_base_scenario(kind: str):
    async with open_client(kind) as client:
        first = [await post(client, "plan+429x2+503") for _ in range(4)]
    assert [r.status_code for r in first] == [429, 429, 503, 200]
    assert first[0].headers["retry-after"] == "1"
    assert "retry-after" not in first[2].headers
    assert first[2].json()["error"]["type"] == "server_error"
    assert first[3].json() == reply(CHAT)  # the scenario saw plain "plan"


async def test_401_echoes_the_authorization_header(kind: str):
    async with open_client(kind) as client:
        response = await post(client, "plan+401")
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert "Bearer sk-secret-123" in error["message"]


async def test_garbage_is_a_200_that_is_not_json(kind: str):
    async with open_client(kind) as client:
        bad, good = await post(client, "plan+garbage"), await post(client, "plan+garbage")
    assert bad.status_code == 200
    with pytest.raises(ValueError, match="Expecting value"):
        bad.json()
    assert good.json() == reply(CHAT)


@pytest.mark.parametrize(
    ("fault", "error"),
    [("truncated", httpx.RemoteProtocolError), ("reset", httpx.TransportError)],
)
async def test_broken_exchanges_raise_transport_errors_then_recover(kind, fault, error):
    async with open_client(kind) as client:
        with pytest.raises(error) as caught:
            await post(client, f"plan+{fault}x2")
        with pytest.raises(error):
            await post(client, f"plan+{fault}x2")
        assert (await post(client, f"plan+{fault}x2")).json() == reply(CHAT)
    if fault == "truncated":
        assert "incomplete" in str(caught.value) or "complete message body" in str(caught.value)


async def test_hang_never_answers_until_the_read_timeout(kind: str, autojump_clock: Any):
    async with open_client(kind, read_timeout=3.0) as client:
        start = trio.current_time()
        with pytest.raises(httpx.ReadTimeout):
            await post(client, "plan+hang")
        assert trio.current_time() - start == pytest.approx(3.0)
        assert (await post(client, "plan+hang")).json() == reply(CHAT)


async def test_nousage_leaves_usage_out_of_every_reply(kind: str):
    async with open_client(kind) as client:
        replies = [(await post(client, "plan+nousage")).json() for _ in range(3)]
    expected = {k: v for k, v in reply(CHAT).items() if k != "usage"}
    assert replies == [expected] * 3


async def test_promptpct_scales_the_reported_prompt_count_of_every_reply(kind: str):
    async with open_client(kind) as client:
        replies = [(await post(client, "plan+prompt160")).json() for _ in range(2)]
    usage = reply(CHAT)["usage"]
    scaled = -(-usage["prompt_tokens"] * 160 // 100)
    for body in replies:
        assert body["usage"]["prompt_tokens"] == scaled > usage["prompt_tokens"]
        assert body["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert FaultSpec.parse("plan+prompt160+429").fault(0) == Modifier("429")


async def test_labels_keep_separate_counters_and_plain_names_are_not_counted(kind: str):
    async with open_client(kind) as client:
        codes = [(await post(client, m)).status_code for m in ("plan+500@a", "plan+500@b")]
        codes += [(await post(client, m)).status_code for m in ("plan+500@a", "plan")]
    assert codes == [500, 500, 200, 200]


async def test_with_faults_off_modifiers_are_only_stripped(kind: str):
    async with open_client(kind, faults=False) as client:
        replies = [await post(client, m) for m in ("plan+500x9", "plan+hang", "plan+nousage")]
    assert [r.json() for r in replies] == [reply(CHAT)] * 3


async def test_a_bad_modifier_or_base_is_a_404(kind: str):
    async with open_client(kind) as client:
        bad = await post(client, "plan+bogus")
        unknown = await post(client, "nosuch+500x0")
        missing = await post(client, "nosuch+500")
    assert (bad.status_code, bad.json()["error"]["code"]) == (404, "model_not_found")
    assert "bogus" in bad.json()["error"]["message"]
    assert unknown.status_code == 404 and "500x0" in unknown.json()["error"]["message"]
    assert missing.status_code == 404 and "`nosuch`" in missing.json()["error"]["message"]


async def test_each_transport_counts_its_own_requests():
    first, second = ScriptedTransport(), ScriptedTransport()
    for transport in (first, second, first):
        async with httpx.AsyncClient(transport=transport, base_url="http://s/v1") as client:
            await post(client, "plan+500")
    assert first.faults.requests == {"plan+500": 2}
    assert second.faults.requests == {"plan+500": 1}


def test_a_counter_counts_chat_posts_only():
    counter = FaultCounter()
    body = json.dumps(chat("plan+500")).encode()
    assert counter.prepare("GET", "/v1/models", body).fault is None
    assert counter.prepare("POST", "/v1/chat/completions?x=1", body).fault == Modifier("500")
    assert counter.prepare("POST", "/chat/completions", body).fault is None
    assert counter.requests == {"plan+500": 2}


# -- runs over faults: OpenAIProvider + Runner ----------------------------------------------


@asynccontextmanager
async def provider_for(kind: str, *, faults: bool = True) -> AsyncIterator[OpenAIProvider]:
    """A provider of the scripted server (socket) or transport; key "sk-secret-123"."""
    if kind == "transport":
        transport = ScriptedTransport(faults=faults)
        provider = OpenAIProvider(
            base_url="http://s/v1", api_key="sk-secret-123", timeout=5.0, transport=transport
        )
        try:
            yield provider
        finally:
            await provider.aclose()
        return
    async with scripted_server(faults=faults) as url:
        provider = OpenAIProvider(base_url=url, api_key="sk-secret-123", timeout=5.0)
        try:
            yield provider
        finally:
            await provider.aclose()


async def run_demo(provider: OpenAIProvider, sandbox: Path, scenario: str, **kw: Any) -> Any:
    events: list[Any] = []
    runner = Runner(provider=provider, sink=events.append, retry=kw.pop("retry", FAST), **kw)
    result = await runner.run(demo_agent(scenario, sandbox), demo_task(scenario))
    return result, events, runner


def retries(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type == "model_retry"]


async def test_429x3_is_retried_and_only_replies_are_billed(kind, sandbox, autojump_clock):
    async with provider_for(kind) as provider:
        start = trio.current_time()
        result, events, _ = await run_demo(provider, sandbox, "plan+429x3")
    assert result.status is Status.COMPLETED
    assert [e.data["status"] for e in retries(events)] == [429, 429, 429]
    assert result.state.own.model_calls == 3
    assert trio.current_time() - start >= 3.0  # Retry-After: 1, honoured three times


async def test_401_fails_after_one_request(kind, sandbox, autojump_clock):
    async with provider_for(kind) as provider:
        result, events, _ = await run_demo(provider, sandbox, "plan+401")
    assert result.status is Status.FAILED and "401" in result.state.reason
    assert not retries(events)  # a retry would have met the healthy scenario and completed
    assert result.state.own.model_calls == 0


@pytest.mark.parametrize("fault", ["garbage", "truncated", "reset", "hang", "500", "502x2"])
async def test_transient_faults_are_retried_to_completion(kind, sandbox, autojump_clock, fault):
    async with provider_for(kind) as provider:
        result, events, _ = await run_demo(provider, sandbox, f"plan+{fault}")
    assert result.status is Status.COMPLETED
    cut = [e for e in events if e.type == "reply_cut"]  # a stream broken midway: asked again
    assert len(retries(events)) + len(cut) == (2 if fault.endswith("x2") else 1)
    assert result.state.own.model_calls == 3 + len(cut)  # what arrived of a cut stream is billed
    assert (fault == "truncated") == bool(cut)


async def test_hang_on_every_attempt_stops_resumable_after_the_timeouts(
    kind, sandbox, autojump_clock
):
    async with provider_for(kind) as provider:
        start = trio.current_time()
        result, events, _ = await run_demo(provider, sandbox, "plan+hangx5")
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption.kind is InterruptionKind.PROVIDER_UNAVAILABLE
    assert "ReadTimeout" in result.state.reason and len(retries(events)) == 4
    assert 25.0 <= trio.current_time() - start < 26.0  # five 5 s timeouts and short waits


async def test_nousage_runs_complete(kind, sandbox):
    async with provider_for(kind) as provider:
        result, events, _ = await run_demo(provider, sandbox, "plan+nousage")
    assert result.status is Status.COMPLETED and not retries(events)
    assert result.state.own.model_calls == 3


async def test_500x20_stops_resumable_and_resumes_on_a_healthy_server(
    kind, sandbox, autojump_clock
):
    store = MemoryStore()
    async with provider_for(kind) as provider:
        stopped, events, _ = await run_demo(provider, sandbox, "plan+500x20", store=store)
    assert stopped.status is Status.INTERRUPTED and stopped.status.resumable
    assert stopped.state.interruption.kind is InterruptionKind.PROVIDER_UNAVAILABLE
    assert "500" in stopped.state.reason and len(retries(events)) == FAST.attempts - 1
    assert stopped.state.own.model_calls == 0
    async with provider_for(kind, faults=False) as healthy:  # the outage is over
        runner = Runner(provider=healthy, store=store, retry=FAST)
        done = await runner.resume(stopped.run_id, demo_agent("plan+500x20", sandbox))
    assert done.status is Status.COMPLETED and done.state.own.model_calls == 3


# -- the CLI's demo provider ------------------------------------------------------------------


def test_a_recipe_read_back_from_a_run_plays_no_faults(sandbox):
    from orchestra import RunState

    recipe = Recipe(directory=str(sandbox), scenario="plan+500x20")
    assert recipe.faults and "faults" not in json.loads(next(iter(recipe.metadata().values())))
    state = RunState(
        run_id="r", root_id="r", agent="a", model="m", messages=[], metadata=recipe.metadata()
    )
    assert Recipe.of(state) == Recipe(directory=str(sandbox), scenario="plan+500x20", faults=False)


async def test_the_demo_provider_gives_up_on_a_hang_within_its_timeout(sandbox, autojump_clock):
    recipe = Recipe(directory=str(sandbox), scenario="plan+hang")
    async with recipe.provider() as provider:
        start = trio.current_time()
        result, events, _ = await run_demo(provider, sandbox, recipe.scenario)
    assert result.status is Status.COMPLETED and len(retries(events)) == 1
    assert DEMO_TIMEOUT_S <= trio.current_time() - start < DEMO_TIMEOUT_S + 1
