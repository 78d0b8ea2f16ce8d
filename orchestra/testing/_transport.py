"""The scripted provider in-process: an httpx transport, like ``httpx.MockTransport``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import trio

from .._scripted.endless import ENDLESS, pieces
from .._scripted.faults import FaultCounter, Prepared, events_sent, truncated
from .._scripted.scenarios import CHUNK_HEADER, LATENCY_HEADER, Answer, chunk_delay
from .._scripted.wires import as_chat, dressed

__all__ = ["ScriptedTransport"]


class ScriptedTransport(httpx.AsyncBaseTransport):
    """Answers requests in-process exactly as the scripted server would.

    Same routes, bodies and errors as :func:`~orchestra.testing.serve_scripted`,
    with no socket: ``httpx.AsyncClient(transport=ScriptedTransport(),
    base_url="http://scripted/v1")``. ``latency`` seconds are slept with
    ``trio.sleep`` before each chat reply (so ``MockClock`` tests are exact);
    the ``x-scripted-latency-ms`` request header overrides it per request.
    The host part of the URL is ignored.

    Fault modifiers in a model name (see :mod:`~orchestra.testing._faults`)
    are counted per transport in :attr:`faults`; ``faults=False`` ignores them.
    Broken exchanges become the errors httpx raises over a socket: ``reset``
    a ``ReadError``, ``truncated`` a ``RemoteProtocolError`` while the body is
    read, ``hang`` a ``ReadTimeout`` once the request's read timeout has passed
    (``trio.sleep``; with no read timeout it waits until cancelled).
    A request with ``stream: true`` gets server-sent events, ``chunk_s``
    seconds before each (the ``x-scripted-chunk-ms`` header overrides it);
    ``cutK`` raises ``RemoteProtocolError`` after K events, ``stallK`` times
    out after K events as ``hang`` does; ``keepalive`` and ``overlong`` go on
    for ever, ``linger`` times out after its ``[DONE]`` as ``hang`` does.
    """

    def __init__(self, *, latency: float = 0.0, faults: bool = True, chunk_s: float = 0.0) -> None:
        self.latency = latency
        self.chunk_s = chunk_s
        self.faults = FaultCounter(enabled=faults)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The scripted response to ``request``, after its latency. A checkpoint."""
        path, body, wire = as_chat(request.url.path, await request.aread())
        prepared = self.faults.prepare(request.method, path, body)
        result = prepared.respond(
            request.method,
            path,
            latency=self.latency,
            latency_ms=request.headers.get(LATENCY_HEADER),
            auth=request.headers.get("authorization", ""),
        )
        result = dressed(result, wire)  # answered in the wire format it was asked in
        await trio.sleep(result.delay)
        if prepared.broken == "hang" or (prepared.broken == "stall" and result.stream is None):
            await _hang(request)
        delay = chunk_delay(self.chunk_s, request.headers.get(CHUNK_HEADER))
        if prepared.broken in ENDLESS:
            return _endless(result, prepared.broken, delay, request)
        if prepared.broken == "reset":
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        if result.stream is not None:
            return _streamed(result, _Events(result, prepared, delay, request))
        cut = prepared.broken in ("truncated", "cut")
        return _response(result, _Truncated(result.content) if cut else None)


def _streamed(result: Answer, events: httpx.AsyncByteStream) -> httpx.Response:
    headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
    return httpx.Response(result.status, headers=[*headers, *result.headers], stream=events)


class _Events(httpx.AsyncByteStream):
    """A streamed answer's events, ``delay`` seconds before each; a ``cut`` or
    ``stall`` fault breaks it after as many events as it lets through."""

    def __init__(
        self, result: Answer, prepared: Prepared, delay: float, request: httpx.Request
    ) -> None:
        self._events = result.events()
        self._prepared, self._delay, self._request = prepared, delay, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        fault = self._prepared.broken
        events = self._events[: events_sent(self._prepared, len(self._events))]
        for event in events:
            await trio.sleep(self._delay)
            yield event
        if fault == "stall":
            await _hang(self._request)
        if fault in ("cut", "truncated"):
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                "(incomplete chunked read)"
            )


def _endless(result: Answer, fault: str, delay: float, request: httpx.Request) -> httpx.Response:
    """The response of a ``keepalive``, ``linger`` or ``overlong`` fault."""
    events = result.events() if result.stream is not None else None
    played = _Played(pieces(fault, events, result.content, delay), request)
    if events is None:
        return _response(result, played)
    played.linger = fault == "linger"
    return _streamed(result, played)


class _Played(httpx.AsyncByteStream):
    """Pieces of a body, each after its wait; then, to ``linger``, nothing until the
    read timeout (the connection held open, the body never ended)."""

    def __init__(self, played: Iterator[tuple[float, bytes]], request: httpx.Request) -> None:
        self._played, self._request = played, request
        self.linger = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for wait, data in self._played:
            await trio.sleep(wait)
            yield data
        if self.linger:
            await _hang(self._request)


def _response(result: Answer, stream: httpx.AsyncByteStream | None) -> httpx.Response:
    headers = [("content-type", "application/json"), *result.headers]
    if stream is None:
        return httpx.Response(result.status, headers=headers, content=result.content)
    headers.append(("content-length", str(len(result.content))))
    return httpx.Response(result.status, headers=headers, stream=stream)


async def _hang(request: httpx.Request) -> None:
    """Never answer: time out as a socket would after the read timeout, if there is one."""
    timeouts = request.extensions.get("timeout", {})
    read = timeouts.get("read")
    if read is None:
        await trio.sleep_forever()
    await trio.sleep(read)
    raise httpx.ReadTimeout("timed out", request=request)


class _Truncated(httpx.AsyncByteStream):
    """The first half of a body, then the error httpx raises when the peer closes early."""

    def __init__(self, content: bytes) -> None:
        self._content = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = truncated(self._content)
        yield sent
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body: "
            f"received {len(sent)} bytes, expected {len(self._content)}"
        )
