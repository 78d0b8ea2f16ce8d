"""The scripted provider over HTTP: the socket server and the in-process transport."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h11
import httpx
import pytest
import trio

from orchestra._scripted import server as _server
from orchestra.testing import (
    SCENARIOS,
    ScriptedTransport,
    reply,
    scripted_server,
    serve_scripted,
)

CHAT = {"model": "plan", "messages": [{"role": "user", "content": "What went wrong?"}]}


@pytest.fixture(params=["socket", "transport"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def open_client(kind: str, latency: float = 0.0) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the scripted provider, over a real socket or in-process.

    No client timeout: under a MockClock it would be the next deadline.
    """
    if kind == "transport":
        transport = ScriptedTransport(latency=latency)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://scripted/v1", timeout=None
        ) as client:
            yield client
        return
    async with (
        scripted_server(latency=latency) as url,
        httpx.AsyncClient(base_url=url, timeout=None) as client,
    ):
        yield client


# -- routes --------------------------------------------------------------------------------


async def test_chat_completions_reply_is_reply_of_the_request(kind: str) -> None:
    async with open_client(kind) as client:
        response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == reply(CHAT)


async def test_chat_completions_is_also_served_without_the_v1_prefix(kind: str) -> None:
    async with open_client(kind) as client:
        response = await client.post(
            str(client.base_url.copy_with(path="/chat/completions")), json=CHAT
        )
    assert response.json() == reply(CHAT)


async def test_health_and_models(kind: str) -> None:
    async with open_client(kind) as client:
        health = await client.get(str(client.base_url.copy_with(path="/health")))
        models = await client.get("/models")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert models.json()["object"] == "list"
    listed = {m["id"]: m["description"] for m in models.json()["data"]}
    assert listed == {name: s.description for name, s in SCENARIOS.items()}


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code"}
    assert body["error"]["message"]
    return dict(body["error"])


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b"\xff\xfe\xfa", 400, "invalid_json"),
        (b"[" * 100_000, 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_request"),
        (json.dumps({**CHAT, "model": "gpt-7"}).encode(), 404, "model_not_found"),
        (json.dumps({**CHAT, "messages": []}).encode(), 400, "invalid_messages"),
        (json.dumps({**CHAT, "max_tokens": 0}).encode(), 400, "invalid_max_tokens"),
    ],
)
async def test_bad_requests_get_openai_shaped_errors(
    kind: str, content: bytes, status: int, code: str
) -> None:
    async with open_client(kind) as client:
        response = await client.post("/chat/completions", content=content)
    assert response.status_code == status
    assert _error(response)["code"] == code
    assert _error(response)["type"] == "invalid_request_error"


async def test_unknown_route_is_404_and_wrong_method_is_405(kind: str) -> None:
    async with open_client(kind) as client:
        missing = await client.post("/completions", json=CHAT)
        wrong = await client.get("/chat/completions")
    assert missing.status_code == 404
    assert _error(missing)["code"] == "unknown_url"
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    assert _error(wrong)["code"] == "method_not_allowed"


# -- latency -------------------------------------------------------------------------------


async def _timed_post(client: httpx.AsyncClient, **kwargs: Any) -> tuple[float, int]:
    start = trio.current_time()
    response = await client.post("/chat/completions", json=CHAT, **kwargs)
    return trio.current_time() - start, response.status_code


async def test_latency_is_slept_before_each_chat_reply(
    kind: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_client(kind, latency=2.5) as client:
        assert await _timed_post(client) == (2.5, 200)
        assert await _timed_post(client, headers={"x-scripted-latency-ms": "1500"}) == (1.5, 200)
        assert await _timed_post(client, headers={"x-scripted-latency-ms": "0"}) == (0.0, 200)
        start = trio.current_time()
        await client.get("/models")
        assert trio.current_time() == start


@pytest.mark.parametrize("value", ["soon", "-5", "nan", "inf"])
async def test_a_bad_latency_header_is_a_400(kind: str, value: str) -> None:
    async with open_client(kind) as client:
        response = await client.post(
            "/chat/completions", json=CHAT, headers={"x-scripted-latency-ms": value}
        )
    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_latency"


async def test_many_connections_are_served_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    done: list[float] = []
    async with open_client("socket", latency=1.0) as client:

        async def one() -> None:
            done.append((await _timed_post(client))[0])

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(one)
        elapsed = trio.current_time() - start
    assert len(done) == 20
    assert elapsed < 2.0  # one latency, not twenty


# -- the socket server, byte by byte -------------------------------------------------------


async def test_serve_scripted_reports_its_base_url() -> None:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_scripted)
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        assert httpx.URL(url).port
        nursery.cancel_scope.cancel()


class RawClient:
    """An HTTP/1.1 client on one connection, byte-level: h11 over a trio stream."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def send(self, *events: h11.Event) -> None:
        for event in events:
            await self.stream.send_all(self.conn.send(event) or b"")

    async def request(self, method: str, target: str, body: bytes = b"", **headers: str) -> None:
        fields = [("host", "scripted"), ("content-length", str(len(body))), *headers.items()]
        await self.send(h11.Request(method=method, target=target, headers=fields))
        if "expect" not in headers:
            await self.send(h11.Data(data=body), h11.EndOfMessage())

    async def next_event(self) -> h11.Event:
        while (event := self.conn.next_event()) is h11.NEED_DATA:
            self.conn.receive_data(await self.stream.receive_some(65536))
        assert isinstance(event, h11.Event)
        return event

    async def response(self) -> tuple[int, Any]:
        """The status and decoded JSON body of the next response."""
        head = await self.next_event()
        assert isinstance(head, h11.Response)
        body = b""
        while isinstance(event := await self.next_event(), h11.Data):
            body += event.data
        assert isinstance(event, h11.EndOfMessage)
        return head.status_code, json.loads(body)


@asynccontextmanager
async def raw_connection(url: str) -> AsyncIterator[trio.SocketStream]:
    async with await trio.open_tcp_stream("127.0.0.1", httpx.URL(url).port or 0) as stream:
        yield stream


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    async with scripted_server() as url, raw_connection(url) as stream:
        client = RawClient(stream)
        await client.request("GET", "/health")
        assert await client.response() == (200, {"status": "ok"})
        client.conn.start_next_cycle()
        await client.request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())
        assert await client.response() == (200, reply(CHAT))
        client.conn.start_next_cycle()
        await client.request("GET", "/v1/models")
        assert (await client.response())[0] == 200


async def test_expect_100_continue_is_honoured() -> None:
    chat = json.dumps(CHAT).encode()
    async with scripted_server() as url, raw_connection(url) as stream:
        client = RawClient(stream)
        await client.request("POST", "/v1/chat/completions", chat, expect="100-continue")
        informational = await client.next_event()
        assert isinstance(informational, h11.InformationalResponse)
        assert informational.status_code == 100
        await client.send(h11.Data(data=chat), h11.EndOfMessage())
        assert await client.response() == (200, reply(CHAT))


def _request(method: str, target: str, body: bytes = b"") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nhost: scripted\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def test_garbage_gets_a_400_and_a_closed_connection() -> None:
    async with scripted_server() as url, raw_connection(url) as stream:
        await stream.send_all(b"HELLO THERE\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400 ")
    assert b'"type":"invalid_request_error"' in data


async def test_an_oversized_body_gets_a_413(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_server, "MAX_BODY", 1000)
    async with scripted_server() as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/chat/completions", content=b" " * 5000)
        assert response.status_code == 413
        assert _error(response)["code"] == "request_too_large"
        assert (await client.get("/models")).status_code == 200


@pytest.mark.parametrize(
    "partial",
    [
        b"",
        b"POST /v1/chat/compl",
        _request("POST", "/v1/chat/completions", json.dumps(CHAT).encode())[:-10],
        _request("POST", "/v1/chat/completions", json.dumps(CHAT).encode()),
    ],
)
async def test_clients_that_vanish_mid_request_do_not_hurt_the_server(
    partial: bytes, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with scripted_server(latency=5.0) as url:
        async with raw_connection(url) as stream:
            await stream.send_all(partial)
        await trio.sleep(10)  # the server finishes (or gives up on) that request
        async with httpx.AsyncClient(base_url=url, timeout=None) as client:
            response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_cancelled_client_does_not_hurt_the_server(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        scripted_server(latency=5.0) as url,
        httpx.AsyncClient(base_url=url, timeout=None) as client,
    ):
        with trio.move_on_after(1.0) as scope:
            await client.post("/chat/completions", json=CHAT)
        assert scope.cancelled_caught
        await trio.sleep(10)
        assert (await client.post("/chat/completions", json=CHAT)).status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
