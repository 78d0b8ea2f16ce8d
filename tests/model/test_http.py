"""The provider's way to the endpoint: admission control, sharded pools, proxies,
and deadlines that hold however a server misbehaves."""

from __future__ import annotations

import contextlib
import gzip
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpcore
import httpx
import pytest
import trio
import trio.testing

from orchestra import (
    ConfigError,
    OpenAIProvider,
    ProviderHTTPError,
    ProviderUnreachable,
    RetryPolicy,
)
from orchestra._model.http import DONE_GRACE_S, SHARD_CONNECTIONS, Endpoint, proxy_for
from orchestra._model.provider import ChatRequest
from orchestra._model.sse import ServerEvent
from orchestra._model.stream import Reading
from orchestra.testing import ScriptedTransport, scripted_server

PLAN = ChatRequest(model="plan", messages=[{"role": "user", "content": "Why did it fail?"}])


class Counting(httpx.AsyncBaseTransport):
    """Answers every request after ``delay`` s, counting how many are in flight."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.now = 0
        self.most = 0
        self.served = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await trio.sleep(self.delay)
        finally:
            self.now -= 1
        self.served += 1
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})


async def test_at_most_max_connections_requests_are_in_flight(autojump_clock):
    transport = Counting(delay=1.0)
    provider = OpenAIProvider(base_url="http://x/v1", transport=transport, max_connections=3)
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(provider.complete, PLAN)
    assert (transport.most, transport.served) == (3, 10)
    assert trio.current_time() == pytest.approx(4.0)  # ceil(10 / 3) waves of 1 s


async def test_a_call_cancelled_while_queued_leaves_the_queue(autojump_clock):
    transport = Counting(delay=1.0)
    provider = OpenAIProvider(base_url="http://x/v1", transport=transport, max_connections=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(provider.complete, PLAN)
        await trio.testing.wait_all_tasks_blocked()  # the first call holds the connection
        with trio.move_on_after(0.5) as waited:
            await provider.complete(PLAN)  # queued behind the first, then given up
        assert waited.cancelled_caught
        await provider.complete(PLAN)  # served right after the first
    assert transport.served == 2
    assert trio.current_time() == pytest.approx(2.0)


async def test_connections_are_split_into_shards_as_concurrency_needs_them(server_url):
    endpoint = Endpoint(
        base_url=server_url, headers={}, timeout=10.0, max_connections=2 * SHARD_CONNECTIONS + 1
    )
    body = b'{"model": "plan", "messages": [{"role": "user", "content": "hi"}]}'
    statuses: list[int] = []

    async def post() -> None:
        statuses.append((await endpoint.post("/chat/completions", body)).status_code)

    await post()
    assert endpoint.shards == 1
    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(post)
    assert statuses == [200] * 101
    assert endpoint.shards == 3
    await endpoint.aclose()
    assert endpoint.shards == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8"])
def test_max_connections_must_be_a_positive_whole_number(bad):
    with pytest.raises(ConfigError, match="max_connections"):
        OpenAIProvider(base_url="http://x/v1", max_connections=bad)


def test_proxies_come_from_the_environment(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert proxy_for("https://api.example.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,internal.example.com")
    assert proxy_for("https://api.example.com/v1") == "http://proxy:3128"
    assert proxy_for("https://internal.example.com/v1") is None
    assert proxy_for("http://api.example.com/v1") is None  # no HTTP_PROXY


# -- httpcore underneath: the request on the wire, decoded replies, mapped errors ------------


async def _serve_once(answer: bytes, seen: list[bytes], task_status: Any) -> None:
    """Accept one connection on loopback, keep its request head, send ``answer``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    stream = await listeners[0].accept()
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(v for k, v in _header_lines(head) if k == b"content-length"))
        while len(body) < length:
            body += await stream.receive_some()
        seen.append(head)
        await stream.send_all(answer)
    await listeners[0].aclose()


def _header_lines(head: bytes) -> list[tuple[bytes, bytes]]:
    lines = head.split(b"\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(b":") for line in lines)]


async def test_the_request_on_the_wire_and_a_gzip_reply_decoded():
    body = gzip.compress(b'{"choices": [{"message": {"content": "ok"}}]}')
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
        + f"content-length: {len(body)}\r\nX-Extra: Yes\r\n\r\n".encode()
        + body
    )
    seen: list[bytes] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_once, answer, seen)
        endpoint = Endpoint(
            base_url=f"http://127.0.0.1:{port}/v1",
            headers={"Authorization": "Bearer k"},
            timeout=10.0,
            max_connections=1,
        )
        reply = await endpoint.post("/chat/completions", b'{"model": "m"}')
        await endpoint.aclose()
    assert seen[0].split(b"\r\n")[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert dict(_header_lines(seen[0])) == {
        b"host": f"127.0.0.1:{port}".encode(),
        b"content-type": b"application/json",
        b"authorization": b"Bearer k",
        b"content-length": b"14",
    }
    assert reply.status_code == 200
    assert reply.headers["x-extra"] == "Yes"
    assert reply.content == b'{"choices": [{"message": {"content": "ok"}}]}'


async def test_a_refused_connection_is_said_in_the_os_s_words_and_fails_at_once():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = Endpoint(
        base_url=f"http://127.0.0.1:{port}/v1", headers={}, timeout=5.0, max_connections=1
    )
    with pytest.raises(httpx.ConnectError):
        await endpoint.post("/chat/completions", b"{}")
    provider = OpenAIProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    with pytest.raises(ProviderUnreachable) as caught:
        await provider.complete(PLAN)
    message = str(caught.value)
    assert message.startswith(f"cannot connect to http://127.0.0.1:{port}/v1: Connection refused")
    assert caught.value.never_answered and not RetryPolicy().transient(caught.value)


OK_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\n"
    b'content-length: 45\r\n\r\n{"choices": [{"message": {"content": "ok"}}]}'
)


async def _read_request(stream: trio.SocketStream, data: bytes) -> tuple[bytes, bytes] | None:
    """One request off ``stream`` (``data``: bytes already read); None at EOF."""
    while b"\r\n\r\n" not in data:
        more = await stream.receive_some()
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(v for k, v in _header_lines(head) if k == b"content-length"))
    while len(body) < length:
        body += await stream.receive_some()
    return body[:length], body[length:]


async def _close_after_first(requests: list[str], answer_once: bool, task_status: Any) -> None:
    """Answer the first request of each connection (with keep-alive) and close the
    connection on the next without a word, as llama.cpp's server does after a
    streamed reply; with ``answer_once``, answer only the first request of all."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])

    async def serve(stream: trio.SocketStream) -> None:
        got = await _read_request(stream, b"")
        if got is None:
            return
        requests.append("answered" if not (answer_once and requests) else "dropped")
        if requests[-1] == "answered":
            await stream.send_all(OK_ANSWER)
            if await _read_request(stream, got[1]) is not None:
                requests.append("dropped")
        await stream.aclose()

    await trio.serve_listeners(serve, listeners)


@contextlib.asynccontextmanager
async def closing_server(answer_once: bool) -> AsyncIterator[tuple[Endpoint, list[str]]]:
    """An endpoint on :func:`_close_after_first`, and what that server did."""
    requests: list[str] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_close_after_first, requests, answer_once)
        endpoint = Endpoint(
            base_url=f"http://127.0.0.1:{port}/v1", headers={}, timeout=10.0, max_connections=1
        )
        yield endpoint, requests
        await endpoint.aclose()
        nursery.cancel_scope.cancel()


async def test_a_keep_alive_connection_closed_unanswered_is_tried_again_at_once():
    async with closing_server(answer_once=False) as (endpoint, requests):
        replies = [await endpoint.post("/chat/completions", b"{}") for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert requests == ["answered", "dropped", "answered", "dropped", "answered"]


async def test_a_second_unanswered_close_is_an_error():
    async with closing_server(answer_once=True) as (endpoint, requests):
        await endpoint.post("/chat/completions", b"{}")
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await endpoint.post("/chat/completions", b"{}")
    assert requests == ["answered", "dropped", "dropped"]


# -- deadlines that hold on any stream (issue 43.3) -------------------------------------


@pytest.fixture(params=["socket", "transport"])
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.asynccontextmanager
async def scripted(
    wire: str, *, request_timeout: float, stream: bool = True, chunk_s: float = 0.0
) -> AsyncIterator[OpenAIProvider]:
    """A provider of the scripted server over loopback, or of the in-process transport."""
    async with contextlib.AsyncExitStack() as stack:
        if wire == "socket":
            url = await stack.enter_async_context(scripted_server(chunk_s=chunk_s))
            transport = None
        else:
            url, transport = "http://scripted/v1", ScriptedTransport(chunk_s=chunk_s)
        provider = OpenAIProvider(
            base_url=url, api_key="k", timeout=request_timeout, stream=stream, transport=transport
        )
        yield provider
        await provider.aclose()


def asking(model: str, max_tokens: int | None = None) -> ChatRequest:
    return ChatRequest(model=model, messages=PLAN.messages, max_tokens=max_tokens)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_comments_or_a_trickled_body_hold_a_call_no_longer_than_its_timeout(
    wire: str, stream: bool, autojump_clock: Any
):
    """``: keep-alive`` every 0.5 s (a body trickled a byte every 0.5 s) meets no read
    timeout; the request timeout bounds the whole reply all the same."""
    async with scripted(wire, request_timeout=3.0, stream=stream) as provider:
        start = trio.current_time()
        with trio.fail_after(60), pytest.raises(ProviderHTTPError, match=r"timeout \(3 s\)"):
            await provider.complete(asking("plan+keepalive"))
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.001)
        assert (await provider.complete(asking("plan+keepalive"))).finish_reason == "tool_calls"


async def test_a_reply_whole_at_done_ends_there_though_the_connection_stays_open(
    wire: str, autojump_clock: Any
):
    async with scripted(wire, request_timeout=600.0) as provider:
        start = trio.current_time()
        with trio.fail_after(60):
            reply = await provider.complete(asking("plan+lingerx2"))
        assert trio.current_time() - start <= DONE_GRACE_S + 0.001
        assert reply.finish_reason == "tool_calls" and reply.usage_reported
        again = await provider.complete(asking("plan+lingerx2"))  # a new connection
        assert again.message == reply.message


async def test_a_stream_past_max_tokens_is_closed_there(wire: str, autojump_clock: Any):
    """The server streams four more tokens every 10 ms for ever: the call ends at the
    cap (40 tokens: about ten events), not 10,000 events (100 s) later."""
    async with scripted(wire, request_timeout=600.0, chunk_s=0.01) as provider:
        start = trio.current_time()
        with trio.fail_after(60):
            reply = await provider.complete(asking("plan+overlong", max_tokens=40))
        assert trio.current_time() - start == pytest.approx(0.12, abs=0.001)  # 12 events
        assert reply.finish_reason == "length" and not reply.usage_reported


async def test_a_whole_stream_gives_its_connection_back_to_the_pool(server_url: str):
    endpoint = Endpoint(base_url=server_url, headers={}, timeout=10.0, max_connections=1)
    body = b'{"model": "plan", "messages": [{"role": "user", "content": "go"}], "stream": true}'
    seen: list[str] = []

    def feed(event: ServerEvent) -> Reading:
        seen.append(event.data)
        return Reading.DONE if event.data == "[DONE]" else Reading.ON

    for _ in range(3):
        await endpoint.stream("/chat/completions", body, feed)
    assert seen.count("[DONE]") == 3
    (shard,) = endpoint._shards
    assert isinstance(shard.pool, httpcore.AsyncConnectionPool)
    assert len(shard.pool.connections) == 1  # one connection, reused
    await endpoint.aclose()
