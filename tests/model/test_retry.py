"""Transient provider failures are retried inside the deadline; the rest fail at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio

from orchestra import (
    InterruptionKind,
    Limits,
    OpenAIProvider,
    RetryPolicy,
    Runner,
    Status,
)
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra.testing import ScriptedTransport

Fault = Callable[[httpx.Request], httpx.Response]


def status(code: int, **headers: str) -> Fault:
    def respond(request: httpx.Request) -> httpx.Response:
        body = {"error": {"message": f"status {code}", "type": "server_error"}}
        return httpx.Response(code, json=body, headers=headers)

    return respond


def reset(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("connection reset by peer", request=request)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


class AnswersThen(httpx.AsyncBaseTransport):
    """Answers its first request as the scripted provider, then plays ``faults``."""

    def __init__(self, *faults: Fault) -> None:
        self.inner = FaultyTransport()
        self.later = list(faults)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.inner.requests == 1 and self.later:
            self.inner.faults, self.later = self.later, []
        return await self.inner.handle_async_request(request)


def garbage(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"<html>bad gateway</html>")


class FaultyTransport(httpx.AsyncBaseTransport):
    """Plays ``faults`` on the first requests, then answers as the scripted provider."""

    def __init__(self, *faults: Fault) -> None:
        self.faults = list(faults)
        self.requests = 0
        self.scripted = ScriptedTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.faults:
            return self.faults.pop(0)(request)
        return await self.scripted.handle_async_request(request)


def runner_over(transport: httpx.AsyncBaseTransport, events: list, **kw) -> Runner:
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=transport)
    return Runner(provider=provider, sink=events.append, **kw)


def plan_agent(sandbox: Path, limits: Limits | None = None):
    return demo_agent("plan", sandbox, limits=limits or Limits(max_turns=20))


@pytest.mark.parametrize(
    "faults",
    [
        (status(429),),
        (status(429), status(429), status(429)),
        (status(500),),
        (status(503), status(503), status(502), status(504)),
        (status(408), status(409)),
        (reset, reset),
        (garbage,),
    ],
    ids=["429", "429x3", "500", "503-burst", "408-409", "reset", "garbage"],
)
async def test_transient_failures_are_retried_and_never_billed(sandbox, autojump_clock, faults):
    events: list = []
    transport = FaultyTransport(*faults)
    result = await runner_over(transport, events).run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    retries = [e for e in events if e.type == "model_retry"]
    assert len(retries) == len(faults)
    assert transport.requests == 3 + len(faults)
    assert result.state.own.model_calls == 3  # only replies are billed


async def test_retry_after_is_honoured(sandbox, autojump_clock):
    events: list = []
    transport = FaultyTransport(status(429, **{"retry-after": "7"}))
    start = trio.current_time()
    result = await runner_over(transport, events).run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    assert trio.current_time() - start >= 7


async def test_retry_after_past_the_deadline_gives_up_at_once(sandbox, autojump_clock):
    events: list = []
    transport = FaultyTransport(status(503, **{"retry-after": "120"}))
    agent = plan_agent(sandbox, Limits(max_turns=20, timeout_s=60))
    result = await runner_over(transport, events).run(agent, demo_task("plan"))
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption.kind is InterruptionKind.PROVIDER_UNAVAILABLE
    assert transport.requests == 1 and trio.current_time() < 1


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
async def test_request_errors_are_not_retried(sandbox, autojump_clock, code):
    events: list = []
    transport = FaultyTransport(status(code))
    result = await runner_over(transport, events).run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.FAILED and str(code) in result.state.reason
    assert transport.requests == 1
    assert not [e for e in events if e.type == "model_retry"]


async def test_retries_that_run_out_stop_resumable_and_resume_completes(sandbox, autojump_clock):
    events: list = []
    transport = FaultyTransport(*[status(500)] * 20)
    runner = runner_over(transport, events, retry=RetryPolicy(attempts=4))
    agent = plan_agent(sandbox)
    stopped = await runner.run(agent, demo_task("plan"))
    assert stopped.status is Status.INTERRUPTED and stopped.status.resumable
    assert stopped.state.interruption.kind is InterruptionKind.PROVIDER_UNAVAILABLE
    assert "500" in stopped.state.reason
    assert transport.requests == 4 and stopped.state.own.model_calls == 0
    transport.faults.clear()  # the outage is over
    done = await runner.resume(stopped.run_id, agent)
    assert done.status is Status.COMPLETED and done.state.own.model_calls == 3


async def test_a_cancel_during_a_retry_wait_stops_at_once(sandbox, autojump_clock):
    events: list = []
    transport = FaultyTransport(*[status(503, **{"retry-after": "30"})] * 3)
    runner = runner_over(transport, events)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, plan_agent(sandbox), demo_task("plan"))
        await trio.sleep(5)
        handle.cancel("stop waiting")
        result = await handle.wait()
        assert trio.current_time() == 5
    assert result.status is Status.INTERRUPTED and result.state.reason == "stop waiting"


def test_a_policy_needs_one_attempt_at_least():
    from orchestra import ConfigError

    with pytest.raises(ConfigError, match="attempts"):
        RetryPolicy(attempts=0)


async def test_a_refused_connection_to_an_endpoint_that_never_answered_fails_at_once(
    sandbox, autojump_clock
):
    events: list = []
    transport = FaultyTransport(*[refused] * 20)
    result = await runner_over(transport, events).run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.FAILED and not result.status.resumable
    assert "cannot connect to http://s/v1: Connection refused" in result.state.reason
    assert "nothing has answered there" in result.state.reason
    assert transport.requests == 1 and trio.current_time() == 0
    assert not [e for e in events if e.type == "model_retry"]


async def test_a_refused_connection_after_an_answer_is_an_outage_and_retried(
    sandbox, autojump_clock
):
    events: list = []
    transport = AnswersThen(refused, refused)
    result = await runner_over(transport, events).run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    retries = [e.data for e in events if e.type == "model_retry"]
    assert [r["attempt"] for r in retries] == [2, 3]
    assert all("Connection refused" in r["error"] and r["wait_s"] > 0 for r in retries)


async def test_wait_for_server_retries_a_refusing_endpoint_for_that_long(sandbox, autojump_clock):
    events: list = []
    transport = FaultyTransport(*[refused] * 4)
    runner = runner_over(transport, events, retry=RetryPolicy(wait_for_server_s=10))
    result = await runner.run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED and transport.requests == 4 + 3
    assert [e.data["wait_s"] for e in events if e.type == "model_retry"] == [0.5] * 4

    events.clear()
    transport = FaultyTransport(*[refused] * 100)
    runner = runner_over(transport, events, retry=RetryPolicy(wait_for_server_s=2))
    start = trio.current_time()
    result = await runner.run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.FAILED and "Connection refused" in result.state.reason
    assert trio.current_time() - start == 2.0 and transport.requests == 5


async def test_each_retry_is_told_before_its_wait_with_the_wait(sandbox, autojump_clock):
    told: list[tuple[float, float]] = []

    def sink(event) -> None:
        if event.type == "model_retry":
            told.append((trio.current_time(), event.data["wait_s"]))

    transport = FaultyTransport(status(503), status(503))
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=transport)
    policy = RetryPolicy(wait_initial=2, wait_jitter=0)
    runner = Runner(provider=provider, sink=sink, retry=policy)
    result = await runner.run(plan_agent(sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    assert told == [(0.0, 2.0), (2.0, 4.0)]  # said when it failed; waits doubling
