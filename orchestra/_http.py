"""Sending requests to one endpoint: admission first, then a small pool.

httpx's connection pool (httpcore's) rescans every queued request against
every connection on each event, so its cost per request grows with the queue
times the pool: with 1,000 runs queued on a 100-connection pool, most of a
process's CPU goes there and runs time out waiting. Here requests wait in a
:class:`trio.CapacityLimiter` instead (FIFO, O(1) per waiter), and the
connections are split into *shards* of :data:`SHARD_CONNECTIONS`, each its own
httpx transport, created as concurrency needs them: a pool never scans more
than a shard's few connections, and one request at a time uses one shard.

Requests go straight to the transport (httpx's public transport API): no
cookie jar, redirects or auth hooks, which an API client does not need and
which cost a fifth of a request's CPU. Proxies from the environment
(``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) are honoured.

Cancellation: :meth:`Endpoint.post` is a checkpoint; cancelled while waiting
for admission it just leaves the queue, cancelled in flight it closes the
connection (httpcore shields that cleanup).
"""

from __future__ import annotations

import functools
import math
import ssl
import urllib.request
from urllib.parse import urlsplit

import httpx
import trio

__all__ = ["SHARD_CONNECTIONS", "Endpoint"]

SHARD_CONNECTIONS = 8
"""Connections per shard: the most one pool ever scans."""


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
        self._admission = trio.CapacityLimiter(max_connections)
        self._shards: list[_Shard] = []
        self._urls: dict[str, httpx.URL] = {}
        self._max_shards = math.ceil(max_connections / SHARD_CONNECTIONS)
        if transport is not None:
            self._shards.append(_Shard(transport, size=max_connections))
            self._max_shards = 1

    async def post(self, path: str, content: bytes) -> httpx.Response:
        """POST ``content`` (JSON) to ``base_url + path``; the response, body read.

        Raises:
            httpx.HTTPError: the request failed (connect, timeout, protocol...).
        """
        request = httpx.Request(
            "POST",
            self._url(path),
            content=content,
            headers=self._headers,
            extensions={"timeout": self._timeout},
        )
        async with self._admission:
            shard = self._shard()
            shard.busy += 1
            try:
                return await shard.send(request)
            finally:
                shard.busy -= 1

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:  # parsed once: httpx's URL parsing costs more than the rest of a Request
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url

    def _shard(self) -> _Shard:
        """The least busy shard with room, or a new one (admission guarantees room)."""
        best = min(self._shards, key=_busy, default=None)
        if best is not None and (best.busy < best.size or len(self._shards) >= self._max_shards):
            return best
        shard = _Shard(_transport(self.base_url), size=SHARD_CONNECTIONS)
        self._shards.append(shard)
        return shard

    @property
    def shards(self) -> int:
        """How many shards (pools) exist so far."""
        return len(self._shards)

    async def aclose(self) -> None:
        """Close every shard's connections."""
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.transport.aclose()


class _Shard:
    def __init__(self, transport: httpx.AsyncBaseTransport, *, size: int) -> None:
        self.transport = transport
        self.size = size
        self.busy = 0

    async def send(self, request: httpx.Request) -> httpx.Response:
        response = await self.transport.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response


def _busy(shard: _Shard) -> int:
    return shard.busy


def _transport(base_url: str) -> httpx.AsyncHTTPTransport:
    limits = httpx.Limits(
        max_connections=SHARD_CONNECTIONS, max_keepalive_connections=SHARD_CONNECTIONS
    )
    return httpx.AsyncHTTPTransport(limits=limits, proxy=proxy_for(base_url), verify=_tls())


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
