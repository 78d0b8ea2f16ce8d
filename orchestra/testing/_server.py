"""The scripted provider as a real HTTP/1.1 server, on trio and h11.

One trio task per connection, keep-alive, no framework: h11 parses and
frames, :func:`~orchestra.testing._scenarios.answer` decides. A client that
goes away mid-request only ends its own connection, quietly.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import h11
import trio

from ._scenarios import LATENCY_HEADER, Answer, answer

__all__ = ["scripted_server", "serve_scripted"]

log = logging.getLogger("orchestra.testing")

MAX_BODY: Final = 16 * 1024 * 1024
"""Largest request body accepted, in bytes; larger ones get a 413."""
_READ_SIZE: Final = 64 * 1024
_SERVER_HEADER: Final = (b"server", b"orchestra-scripted")


async def serve_scripted(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    latency: float = 0.0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the scripted provider forever on ``host:port`` (0 picks a free port).

    Reports its base URL (``http://host:port/v1``) through ``task_status``, so
    ``url = await nursery.start(serve_scripted)`` waits until it accepts
    connections. ``latency`` seconds are slept (``trio.sleep``) before each chat
    reply; a request may override it with the ``x-scripted-latency-ms`` header.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    task_status.started(_base_url(host, listeners[0]))
    handler = functools.partial(_serve_connection, latency=latency)
    await trio.serve_listeners(handler, listeners)


@asynccontextmanager
async def scripted_server(*, latency: float = 0.0) -> AsyncIterator[str]:
    """Run :func:`serve_scripted` on a free loopback port for the block; yields its base URL."""
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(functools.partial(serve_scripted, latency=latency))
        try:
            yield url
        finally:
            nursery.cancel_scope.cancel()


def _base_url(host: str, listener: trio.SocketListener) -> str:
    port = listener.socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


@attrs.frozen
class _Request:
    method: str
    target: str
    latency_ms: str | None
    body: bytes

    @classmethod
    def parse(cls, head: h11.Request, body: bytes) -> _Request:
        """The request whose head h11 parsed as ``head``, with its ``body``."""
        wanted = LATENCY_HEADER.encode()
        latency = [v.decode("latin-1") for k, v in head.headers if k == wanted]
        method, target = head.method.decode("latin-1"), head.target.decode("latin-1")
        return cls(method, target, latency[-1] if latency else None, body)


class _ClientGone(Exception):
    """The client closed the connection or broke the protocol; stop serving it."""


async def _serve_connection(stream: trio.SocketStream, *, latency: float) -> None:
    """Serve one connection until the client closes it (or breaks it)."""
    conn = _Connection(stream)
    try:
        await conn.serve(latency)
    except (_ClientGone, trio.BrokenResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


class _Connection:
    """One client's connection: the socket stream plus its h11 state machine."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._h11 = h11.Connection(h11.SERVER)

    async def serve(self, latency: float) -> None:
        """Answer requests one after another while the connection stays open."""
        while True:
            request = await self._receive_request()
            if request is None:
                return
            await self._send(await _respond(request, latency))
            if not self._next_cycle():
                return

    def _next_cycle(self) -> bool:
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        self._h11.start_next_cycle()
        return True

    async def _receive_request(self) -> _Request | None:
        """The next complete request, or None if the client closed between requests."""
        try:
            event = await self._next_event()
            if isinstance(event, h11.ConnectionClosed):
                return None
            assert isinstance(event, h11.Request)
            body = await self._receive_body()
        except h11.RemoteProtocolError as exc:
            await self._refuse(exc.error_status_hint, "bad_request", str(exc))
            raise _ClientGone from None
        return _Request.parse(event, body)

    async def _receive_body(self) -> bytes:
        if self._h11.they_are_waiting_for_100_continue:
            await self._send_event(h11.InformationalResponse(status_code=100, headers=[]))
        chunks: list[bytes] = []
        size = 0
        while isinstance(event := await self._next_event(), h11.Data):
            size += len(event.data)
            if size > MAX_BODY:
                limit = f"request bodies are limited to {MAX_BODY} bytes"
                await self._refuse(413, "request_too_large", limit)
                raise _ClientGone
            chunks.append(event.data)
        if not isinstance(event, h11.EndOfMessage):
            raise _ClientGone
        return b"".join(chunks)

    async def _next_event(self) -> h11.Event:
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                self._h11.receive_data(await self._stream.receive_some(_READ_SIZE))
            elif event is h11.PAUSED:
                raise _ClientGone  # never happens while we read a request: h11 pauses after it
            else:
                assert isinstance(event, h11.Event)
                return event

    async def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer a request we could not read, if the protocol still lets us."""
        if self._h11.our_state not in {h11.IDLE, h11.SEND_RESPONSE}:
            return
        body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
        headers = (("connection", "close"),)
        await self._send(Answer(status, body, headers=headers))

    async def _send(self, answer: Answer) -> None:
        content = answer.content
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(content)).encode()),
            _SERVER_HEADER,
            *((k.encode(), v.encode()) for k, v in answer.headers),
        ]
        await self._send_event(h11.Response(status_code=answer.status, headers=headers))
        await self._send_event(h11.Data(data=content))
        await self._send_event(h11.EndOfMessage())

    async def _send_event(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if data:
            await self._stream.send_all(data)


async def _respond(request: _Request, latency: float) -> Answer:
    """The answer to a request, after its latency; a bug becomes a logged 500."""
    try:
        result = answer(
            request.method,
            request.target,
            request.body,
            latency=latency,
            latency_ms=request.latency_ms,
        )
    except Exception:
        log.exception("scripted provider failed on %s %s", request.method, request.target)
        error = {"message": "internal error", "type": "server_error", "code": "internal_error"}
        return Answer(500, {"error": error})
    await trio.sleep(result.delay)
    return result
