"""Sending requests to one endpoint: admission first, then a small pool.

httpx's connection pool (httpcore's) rescans every queued request against
every connection on each event, so its cost per request grows with the queue
times the pool: with 1,000 runs queued on a 100-connection pool, most of a
process's CPU goes there and runs time out waiting. Here requests wait in a
:class:`trio.CapacityLimiter` instead (FIFO, O(1) per waiter), and the
connections are split into *shards* of :data:`SHARD_CONNECTIONS`, each its own
pool, created as concurrency needs them: a pool never scans more than a
shard's few connections, and one request at a time uses one shard.

Requests go straight to httpcore's connection pool, the transport under
httpx: no cookie jar, redirects or auth hooks, which an API client does not
need, and no ``httpx.Request``/``httpx.Response`` built around each request
(building those cost over a tenth of a request's CPU). httpcore's errors are
mapped to httpx's of the same name at this boundary, as httpx maps them. When
the environment names a proxy (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
``NO_PROXY``), or a transport is given (an in-process one in tests), requests
go through an httpx transport instead.

Deadlines: the endpoint's ``timeout`` bounds each read (httpx's) and, from
the moment a request is admitted, the whole exchange: a server that trickles
its body, or keeps a stream alive with comments, fails with
``httpx.ReadTimeout`` when the timeout has passed, however often it sends.

Streams: a stream's events are read as they come (:mod:`.sse`) and handed to
the caller's ``feed``; once it says the reply is whole (``[DONE]``) nothing
more is read into it, and the body's end is awaited at most
:data:`DONE_GRACE_S` (so that the connection goes back to the pool) before
the connection is closed; once it says the stream ran past its cap, the
connection is closed at once.

Cancellation: :meth:`Endpoint.post` and :meth:`Endpoint.stream` are
checkpoints; cancelled while waiting for admission they just leave the queue,
cancelled in flight they close the connection (httpcore shields that
cleanup). A stream is stopped early the same way, by a cancel scope of its
own: the read in progress raises ``Cancelled`` inside httpx's and httpcore's
generators, so each of them finishes (none is left suspended for the garbage
collector, which trio warns about) and the connection is closed.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import math
import ssl
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpcore
import trio

from .httpx_lean import httpx
from .sse import EventParser, ServerEvent
from .stream import Reading, is_event_stream

__all__ = ["DONE_GRACE_S", "SHARD_CONNECTIONS", "Endpoint", "Feed", "HTTPReply"]

Feed = Callable[[ServerEvent], Reading]
"""Told each event of a stream; says whether to read on (see :class:`Reading`)."""

SHARD_CONNECTIONS = 8
"""Connections per shard: the most one pool ever scans."""


@attrs.frozen
class HTTPReply:
    """A response, its body read: status, headers (names in lower case), body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")


class Endpoint:
    """POSTs to ``base_url``, at most ``max_connections`` requests in flight.

    ``transport``, if given, replaces the shards (one transport for all
    requests, e.g. an in-process one in tests); admission still applies.
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        max_connections: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self._headers = {"content-type": "application/json", **headers}
        self._timeout = httpx.Timeout(timeout).as_dict()
        self._deadline_s = timeout
        self._admission = trio.CapacityLimiter(max_connections)
        self._shards: list[_Shard] = []
        self._targets: dict[str, _Target] = {}
        self._max_shards = math.ceil(max_connections / SHARD_CONNECTIONS)
        self._proxy = proxy_for(base_url)
        self._given = transport is not None
        if transport is not None:
            self._shards.append(_Shard(transport, size=max_connections))
            self._max_shards = 1

    async def post(self, path: str, content: bytes) -> HTTPReply:
        """POST ``content`` (JSON) to ``base_url + path``; the response, body read.

        Raises:
            httpx.HTTPError: the request failed (connect, timeout, protocol...);
                ``httpx.ReadTimeout`` too when the whole response took longer
                than the timeout.
        """
        target = self._target(path)
        return await self._exchange(lambda shard: shard.send(target, content))

    async def stream(self, path: str, content: bytes, feed: Feed) -> HTTPReply:
        """POST ``content`` and hand each server-sent event to ``feed`` as it
        arrives, until the stream ends or ``feed`` says the reply is whole or cut
        (see the module docstring).

        Returns the response with an empty body when it streamed; a response that
        is not a 200 event stream (an error, a server that does not stream) is
        returned whole, body read, ``feed`` never called.

        Raises:
            httpx.HTTPError: the request or the stream failed (connect, timeout,
                the connection cut mid-stream...); ``httpx.ReadTimeout`` too
                when the whole stream took longer than the timeout.
            Whatever ``feed`` raises, once the stream is closed.
        """
        target = self._target(path)
        return await self._exchange(lambda shard: shard.stream(target, content, feed))

    async def _exchange(self, send: Callable[[_Shard], Awaitable[HTTPReply]]) -> HTTPReply:
        """``send`` on a shard once admitted, within the timeout from then.

        Raises:
            httpx.ReadTimeout: the whole exchange took longer than the timeout.
        """
        async with self._admission:
            shard = self._shard()
            shard.busy += 1
            try:
                with trio.move_on_after(self._deadline_s):
                    return await send(shard)
            finally:
                shard.busy -= 1
        raise httpx.ReadTimeout(
            f"no whole reply within the request timeout ({self._deadline_s:g} s)"
        )

    def _target(self, path: str) -> _Target:
        target = self._targets.get(path)
        if target is None:  # parsed once: httpx's URL parsing costs more than the rest
            target = self._targets[path] = _Target.of(
                self.base_url + path, self._headers, self._timeout
            )
        return target

    def _shard(self) -> _Shard:
        """The least busy shard with room, or a new one (admission guarantees room)."""
        best = min(self._shards, key=_busy, default=None)
        if best is not None and (best.busy < best.size or len(self._shards) >= self._max_shards):
            return best
        shard = _Shard(_pool(self._proxy), size=SHARD_CONNECTIONS)
        self._shards.append(shard)
        return shard

    @property
    def shards(self) -> int:
        """How many shards (pools) exist so far."""
        return len(self._shards)

    async def release(self) -> None:
        """Close the pooled connections, which belong to the trio run that opened
        them; the next request (in another run) opens new ones. A given transport
        is the caller's: left as it is."""
        if not self._given:
            await self.aclose()

    async def aclose(self) -> None:
        """Close every shard's connections."""
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.pool.aclose()


@attrs.frozen
class _Target:
    """One URL of the endpoint, parsed once, with the headers every request to it sends."""

    url: httpx.URL
    core_url: httpcore.URL
    host: bytes
    """The Host header's value (httpx adds it itself)."""
    headers: list[tuple[bytes, bytes]]
    """The endpoint's headers; each request adds its Content-Length."""
    extensions: dict[str, Any]

    @classmethod
    def of(cls, url: str, headers: dict[str, str], timeout: dict[str, Any]) -> _Target:
        parsed = httpx.URL(url)
        core_url = httpcore.URL(
            scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
        )
        fixed = [(k.lower().encode("ascii"), v.encode("latin-1")) for k, v in headers.items()]
        return cls(parsed, core_url, parsed.netloc, fixed, {"timeout": timeout})


class _Shard:
    """A pool of a few connections: httpcore's, or an httpx transport's."""

    def __init__(
        self, pool: httpcore.AsyncConnectionPool | httpx.AsyncBaseTransport, *, size: int
    ) -> None:
        self.pool = pool
        self.size = size
        self.busy = 0

    async def send(self, target: _Target, content: bytes) -> HTTPReply:
        if isinstance(self.pool, httpcore.AsyncConnectionPool):
            return await _send_core(self.pool, target, content)
        return await _send_httpx(self.pool, target, content)

    async def stream(self, target: _Target, content: bytes, feed: Feed) -> HTTPReply:
        if isinstance(self.pool, httpcore.AsyncConnectionPool):
            response = await _open_core(self.pool, target, content)
        else:
            response = await _open_httpx(self.pool, target, content)
        try:
            headers = {k.lower(): v for k, v in response.headers.items()}
            if response.status_code != 200 or not is_event_stream(headers):
                return HTTPReply(response.status_code, headers, await response.aread())
            await _read_events(response, feed)
            return HTTPReply(response.status_code, headers, b"")
        finally:
            await response.aclose()


DONE_GRACE_S = 0.05
"""Seconds the body of a whole reply (after ``[DONE]``) is read on for its end, at
most: a server that ends it at once gets its connection back in the pool; one
that holds it open has it closed."""


async def _read_events(response: httpx.Response, feed: Feed) -> None:
    """Hand each event to ``feed`` until the stream ends, or ``feed`` says the reply
    is whole (the body's end then awaited :data:`DONE_GRACE_S` at most) or cut
    (closed at once). The read in progress is stopped by cancelling a scope of
    its own (see the module docstring); what comes meanwhile is dropped.

    Raises:
        Whatever ``feed`` raises, once the stream is closed.
    """
    events = _Events(feed)
    with trio.CancelScope() as reading:
        async for part in response.aiter_bytes():
            if events.state is not Reading.ON:
                continue
            state = events.take(part)
            if state is Reading.DONE:
                reading.deadline = trio.current_time() + DONE_GRACE_S
            elif state is Reading.CUT:
                reading.cancel()
    if events.failure is not None:
        raise events.failure


class _Events:
    """A stream's bytes as events, each handed to ``feed`` until it has enough."""

    def __init__(self, feed: Feed) -> None:
        self._feed = feed
        self._parser = EventParser()
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.state = Reading.ON
        self.failure: Exception | None = None

    def take(self, part: bytes) -> Reading:
        """The next bytes of the body; what to do next (a failure of ``feed`` is
        kept, and the stream cut)."""
        for event in self._parser.feed(self._text.decode(part)):
            try:
                self.state = self._feed(event)
            except Exception as exc:  # raised once the stream is closed (see _read_events)
                self.failure, self.state = exc, Reading.CUT
            if self.state is not Reading.ON:
                break
        return self.state


async def _open_core(
    pool: httpcore.AsyncConnectionPool, target: _Target, content: bytes
) -> httpx.Response:
    """The response to a POST, its head read and its body still to come."""
    with _mapped():
        response = await _handle(pool, target, content)
    return httpx.Response(response.status, headers=response.headers, stream=_CoreBody(response))


async def _open_httpx(
    transport: httpx.AsyncBaseTransport, target: _Target, content: bytes
) -> httpx.Response:
    request = _httpx_request(target, content)
    response = await transport.handle_async_request(request)
    response.request = request
    return response


STALE = "Server disconnected without sending a response"
"""httpcore's words for a connection closed before a single byte of the response."""


async def _handle(
    pool: httpcore.AsyncConnectionPool, target: _Target, content: bytes
) -> httpcore.Response:
    """The response to a POST (its head read), sent again at once on a new
    connection if the pooled one it went out on was closed by the server with
    no answer at all.

    That is a keep-alive connection the server closed as it was taken from the
    pool (llama.cpp's server closes each one after a streamed reply, though it
    says keep-alive): the request was never answered, so it is sent again once,
    not counted as a retry (as curl does). A second such close is an error.
    """
    try:
        return await pool.handle_async_request(_core_request(target, content))
    except httpcore.RemoteProtocolError as exc:
        if not str(exc).startswith(STALE):
            raise
    return await pool.handle_async_request(_core_request(target, content))


def _core_request(target: _Target, content: bytes) -> httpcore.Request:
    length = (b"content-length", str(len(content)).encode("ascii"))
    headers = [(b"host", target.host), *target.headers, length]
    return httpcore.Request(
        b"POST", target.core_url, headers=headers, content=content, extensions=target.extensions
    )


def _httpx_request(target: _Target, content: bytes) -> httpx.Request:
    return httpx.Request(
        "POST", target.url, content=content, headers=target.headers, extensions=target.extensions
    )


class _CoreBody(httpx.AsyncByteStream):
    """An httpcore response's body, its errors mapped to httpx's."""

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for part in self._response.aiter_stream():
                yield part

    async def aclose(self) -> None:
        await self._response.aclose()


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """httpcore's errors raised as the httpx errors they stand for."""
    try:
        yield
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
        mapped = getattr(httpx, type(exc).__name__, httpx.TransportError)
        raise mapped(str(exc)) from exc


async def _send_core(
    pool: httpcore.AsyncConnectionPool, target: _Target, content: bytes
) -> HTTPReply:
    with _mapped():
        response = await _handle(pool, target, content)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
    names = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
    if names.get("content-encoding", "identity") != "identity":  # decoded as httpx decodes it
        body = httpx.Response(response.status, headers=response.headers, content=body).content
    return HTTPReply(response.status, names, body)


async def _send_httpx(
    transport: httpx.AsyncBaseTransport, target: _Target, content: bytes
) -> HTTPReply:
    response = await _open_httpx(transport, target, content)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return HTTPReply(response.status_code, dict(response.headers), response.content)


def _busy(shard: _Shard) -> int:
    return shard.busy


def _pool(proxy: str | None) -> httpcore.AsyncConnectionPool | httpx.AsyncBaseTransport:
    """A new shard's pool: httpcore's, or an httpx transport through ``proxy``."""
    if proxy is not None:
        limits = httpx.Limits(
            max_connections=SHARD_CONNECTIONS, max_keepalive_connections=SHARD_CONNECTIONS
        )
        return httpx.AsyncHTTPTransport(limits=limits, proxy=proxy, verify=_tls())
    return httpcore.AsyncConnectionPool(
        ssl_context=_tls(),
        max_connections=SHARD_CONNECTIONS,
        max_keepalive_connections=SHARD_CONNECTIONS,
        keepalive_expiry=5.0,  # httpx's default
    )


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every shard (building one takes ~50 ms)."""
    return httpx.create_ssl_context()


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``*_PROXY``, ``NO_PROXY``), if any."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not proxies or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")
