"""The scripted provider in-process: an httpx transport, like ``httpx.MockTransport``."""

from __future__ import annotations

import httpx
import trio

from ._scenarios import LATENCY_HEADER, answer

__all__ = ["ScriptedTransport"]


class ScriptedTransport(httpx.AsyncBaseTransport):
    """Answers requests in-process exactly as the scripted server would.

    Same routes, bodies and errors as :func:`~orchestra.testing.serve_scripted`,
    with no socket: ``httpx.AsyncClient(transport=ScriptedTransport(),
    base_url="http://scripted/v1")``. ``latency`` seconds are slept with
    ``trio.sleep`` before each chat reply (so ``MockClock`` tests are exact);
    the ``x-scripted-latency-ms`` request header overrides it per request.
    The host part of the URL is ignored.
    """

    def __init__(self, *, latency: float = 0.0) -> None:
        self.latency = latency

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The scripted response to ``request``, after its latency."""
        body = await request.aread()
        result = answer(
            request.method,
            request.url.path,
            body,
            latency=self.latency,
            latency_ms=request.headers.get(LATENCY_HEADER),
        )
        await trio.sleep(result.delay)
        headers = [("content-type", "application/json"), *result.headers]
        return httpx.Response(result.status, headers=headers, content=result.content)
