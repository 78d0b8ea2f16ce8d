"""The scripted provider as a real HTTP/1.1 server, on trio and h11.

One trio task per connection, keep-alive, no framework: h11 parses and
frames, :func:`~orchestra._scripted.scenarios.answer` decides. A client that
goes away mid-request only ends its own connection, quietly. Fault modifiers
in a model name (:mod:`~orchestra._scripted.faults`) are counted per server:
one :class:`~orchestra._scripted.faults.FaultCounter` for all its connections.
"""

from __future__ import annotations

import functools
import logging
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import attrs
import h11
import trio

from .endless import ENDLESS, pieces
from .faults import FaultCounter, Prepared, events_sent, truncated
from .scenarios import CHUNK_HEADER, LATENCY_HEADER, Answer, chunk_delay
from .wires import as_chat, dressed

__all__ = ["DEMO_API_KEY", "scripted_server", "serve_scripted"]

DEMO_API_KEY = "sk-orchestra-scripted-demo"
"""The key the demos send to the scripted server: shaped like a key, so that it is
redacted as one (a 401 fault echoes it) while the word "scripted" stays readable."""

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
    faults: bool = True,
    chunk_s: float = 0.0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the scripted provider forever on ``host:port`` (0 picks a free port).

    Reports its base URL (``http://host:port/v1``) through ``task_status``, so
    ``url = await nursery.start(serve_scripted)`` waits until it accepts
    connections. ``latency`` seconds are slept (``trio.sleep``) before each chat
    reply; a request may override it with the ``x-scripted-latency-ms`` header.
    ``faults=False`` ignores fault modifiers (each request gets its base
    scenario's reply): the outage is over. A request with ``stream: true`` is
    answered with server-sent events, ``chunk_s`` seconds before each (the
    ``x-scripted-chunk-ms`` header overrides it).
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    task_status.started(_base_url(host, listeners[0]))
    counter = FaultCounter(enabled=faults)
    handler = functools.partial(_serve_connection, latency=latency, faults=counter, chunk_s=chunk_s)
    await trio.serve_listeners(handler, listeners)


@asynccontextmanager
async def scripted_server(
    *, latency: float = 0.0, faults: bool = True, chunk_s: float = 0.0
) -> AsyncIterator[str]:
    """Run :func:`serve_scripted` on a free loopback port for the block; yields its base URL."""
    async with trio.open_nursery() as nursery:
        serve = functools.partial(serve_scripted, latency=latency, faults=faults, chunk_s=chunk_s)
        url: str = await nursery.start(serve)
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
    auth: str = ""
    chunk_ms: str | None = None

    @classmethod
    def parse(cls, head: h11.Request, body: bytes) -> _Request:
        """The request whose head h11 parsed as ``head``, with its ``body``."""
        latency = _header(head, LATENCY_HEADER.encode())
        method, target = head.method.decode("latin-1"), head.target.decode("latin-1")
        auth = _header(head, b"authorization") or ""
        return cls(method, target, latency, body, auth, _header(head, CHUNK_HEADER.encode()))


def _header(head: h11.Request, name: bytes) -> str | None:
    """The last value of header ``name`` (lower case), if the request has it."""
    values = [v.decode("latin-1") for k, v in head.headers if k == name]
    return values[-1] if values else None


class _ClientGone(Exception):
    """The client closed the connection or broke the protocol; stop serving it."""


async def _serve_connection(
    stream: trio.SocketStream, *, latency: float, faults: FaultCounter, chunk_s: float
) -> None:
    """Serve one connection until the client closes it (or breaks it, or a fault does)."""
    conn = _Connection(stream, chunk_s)
    try:
        await conn.serve(latency, faults)
    except (_ClientGone, trio.BrokenResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


class _Connection:
    """One client's connection: the socket stream plus its h11 state machine."""

    def __init__(self, stream: trio.SocketStream, chunk_s: float = 0.0) -> None:
        self._stream = stream
        self._h11 = h11.Connection(h11.SERVER)
        self._chunk_s = chunk_s

    async def serve(self, latency: float, faults: FaultCounter) -> None:
        """Answer requests one after another while the connection stays open."""
        while True:
            request = await self._receive_request()
            if request is None:
                return
            target, body, wire = as_chat(request.target, request.body)
            request = attrs.evolve(request, target=target, body=body)
            prepared = faults.prepare(request.method, request.target, request.body)
            result = await _respond(request, prepared, latency)
            result = dressed(result, wire)  # answered in the wire format it was asked in
            delay = chunk_delay(self._chunk_s, request.chunk_ms)
            if prepared.broken is not None:
                await self._break(prepared, result, delay)
                return
            await self._send(result, delay)
            if not self._next_cycle():
                return

    async def _break(self, prepared: Prepared, result: Answer, delay: float) -> None:
        """Play a fault that breaks the exchange; the caller then closes the connection."""
        fault = prepared.broken
        if fault in ENDLESS:
            await self._endless(fault, result, delay)
        elif fault in ("cut", "stall", "truncated") and result.stream is not None:
            events = result.events()
            await self._send_head(result)
            await self._send_events(events[: events_sent(prepared, len(events))], delay)
            if fault == "stall":
                await self._until_closed()
        elif fault in ("hang", "stall"):
            await self._until_closed()
        elif fault in ("truncated", "cut"):
            await self._send_head(result)
            await self._send_event(h11.Data(data=truncated(result.content)))
        else:  # reset: close with an RST rather than a FIN
            linger = struct.pack("ii", 1, 0)
            self._stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)

    async def _endless(self, fault: str, result: Answer, delay: float) -> None:
        """Play ``keepalive``, ``linger`` or ``overlong`` until the client closes."""
        await self._send_head(result)
        events = result.events() if result.stream is not None else None
        for wait, data in pieces(fault, events, result.content, delay):
            await trio.sleep(wait)
            await self._send_event(h11.Data(data=data))
        await self._until_closed()

    async def _until_closed(self) -> None:
        """Read and drop whatever comes until the client closes (or resets) the connection."""
        while await self._stream.receive_some(_READ_SIZE):
            pass

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

    async def _send(self, answer: Answer, delay: float = 0.0) -> None:
        await self._send_head(answer)
        if answer.stream is not None:
            await self._send_events(answer.events(), delay)
        else:
            await self._send_event(h11.Data(data=answer.content))
        await self._send_event(h11.EndOfMessage())

    async def _send_events(self, events: list[bytes], delay: float) -> None:
        """Server-sent events, one chunk each, ``delay`` seconds before each."""
        for event in events:
            await trio.sleep(delay)
            await self._send_event(h11.Data(data=event))

    async def _send_head(self, answer: Answer) -> None:
        if answer.stream is not None:  # chunked: h11 frames it, no length
            kind = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        else:
            kind = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(answer.content)).encode()),
            ]
        headers = [
            *kind,
            _SERVER_HEADER,
            *((k.encode(), v.encode()) for k, v in answer.headers),
        ]
        await self._send_event(h11.Response(status_code=answer.status, headers=headers))

    async def _send_event(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if data:
            await self._stream.send_all(data)


async def _respond(request: _Request, prepared: Prepared, latency: float) -> Answer:
    """The answer to a request, after its latency; a bug becomes a logged 500."""
    try:
        result = prepared.respond(
            request.method,
            request.target,
            latency=latency,
            latency_ms=request.latency_ms,
            auth=request.auth,
        )
    except Exception:
        log.exception("scripted provider failed on %s %s", request.method, request.target)
        error = {"message": "internal error", "type": "server_error", "code": "internal_error"}
        return Answer(500, {"error": error})
    await trio.sleep(result.delay)
    return result
