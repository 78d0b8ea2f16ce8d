"""Replies that do not end by themselves: the ``keepalive``, ``linger`` and
``overlong`` faults, as the bytes to send and the pause before each.

``keepalive``
    a streamed reply sends its first event, then an SSE comment
    (``: keep-alive``) every :data:`KEEPALIVE_S` seconds for ever; a reply
    that is not streamed trickles its body, a byte every :data:`KEEPALIVE_S`
    seconds. Each read gets something well within any read timeout: only a
    deadline on the whole reply ends it.
``linger``
    the whole reply, ``data: [DONE]`` included, and then the connection
    stays open, the body never ended, until the client closes it (a reply
    that is not streamed is sent whole, its length said, then held open).
``overlong``
    a streamed reply that ignores ``max_tokens``: after its first event,
    pieces of text (:data:`FILLER`, four tokens each) for ever, each after the
    reply's chunk delay; a reply that is not streamed is sent as it is.

The socket server (:mod:`.server`) and the in-process transport
(:class:`~orchestra.testing.ScriptedTransport`) both play :func:`pieces`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Final

__all__ = ["ENDLESS", "FILLER", "KEEPALIVE", "KEEPALIVE_S", "pieces"]

ENDLESS: Final = frozenset({"keepalive", "linger", "overlong"})
"""The faults of this module."""
KEEPALIVE_S: Final = 0.5
"""Seconds between two keep-alive comments (or trickled bytes)."""
KEEPALIVE: Final = b": keep-alive\n\n"
_FILLER_CHUNK: Final = {
    "id": "chatcmpl-overlong",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "overlong",
    "choices": [{"index": 0, "delta": {"content": " word word word word"}, "finish_reason": None}],
}
FILLER: Final = b"data: " + json.dumps(_FILLER_CHUNK, separators=(",", ":")).encode() + b"\n\n"
"""One more piece of text of an ``overlong`` stream (four o200k tokens)."""


def pieces(
    fault: str, events: list[bytes] | None, body: bytes, delay: float
) -> Iterator[tuple[float, bytes]]:
    """What ``fault`` sends after the response's head: (seconds to wait, bytes) pairs,
    for ever for ``keepalive`` and ``overlong``. ``events``: the streamed reply's
    events (None: not streamed, ``body`` is the reply); ``delay``: the chunk delay."""
    if events is None:
        if fault == "keepalive":
            return ((KEEPALIVE_S, body[i : i + 1]) for i in range(len(body)))
        return iter([(0.0, body)])
    if fault == "linger":
        return ((delay, event) for event in events)
    then = KEEPALIVE if fault == "keepalive" else FILLER
    wait = KEEPALIVE_S if fault == "keepalive" else delay
    return itertools.chain([(delay, events[0])], itertools.repeat((wait, then)))
