"""Live pages: server-sent events carrying the regions of a page that changed.

Each open page has one stream. The server renders the page's regions from a
fresh store snapshot, sends those that differ from what the page shows (the
page names a digest of each region it was served with, in the stream's URL:
``?seen=tree.1a2b3c4d5e6f,...``), and looks again after :data:`MIN_INTERVAL_S`, or longer if
rendering took long (a big tree costs the server at most about a quarter of
its time per open page). The browser swaps each region's HTML in place
(``static/console.js``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping

import trio

from .._exceptions import OrchestraError

__all__ = ["MIN_INTERVAL_S", "parse_seen", "seen", "updates"]

MIN_INTERVAL_S = 0.05
"""Shortest time between two looks at the store (a cancel applied within ~50 ms
shows within about 100 ms)."""
BUSY_SHARE = 3.0
"""The pause after a look is at least this many times the look's own duration."""


def _digest(html: str) -> str:
    return hashlib.blake2b(html.encode(), digest_size=6).hexdigest()


def seen(parts: Mapping[str, str]) -> str:
    """The ``seen`` parameter of a page served with ``parts``: ``name.digest,...``."""
    return ",".join(f"{name}.{_digest(html)}" for name, html in parts.items())


def parse_seen(text: str) -> dict[str, str]:
    """The digest of each region by name, from a ``seen`` parameter (junk is ignored)."""
    pairs = (item.partition(".") for item in text.split(",")[:32])
    return {name: digest for name, _, digest in pairs if name and digest}


def message(event: str, data: object) -> str:
    """One server-sent event (``data`` as one line of JSON)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def updates(
    render: Callable[[], Mapping[str, str]], closing: trio.Event, shown: Mapping[str, str]
) -> AsyncIterator[str]:
    """Events for a page whose regions ``render`` makes (synchronous, run in a thread),
    until ``closing`` is set (the server stops) or the browser goes away; ``shown``:
    the digests of the regions the page has already (see :func:`parse_seen`)."""
    sent = dict(shown)
    while not closing.is_set():
        began = trio.current_time()
        try:
            # rendering reads the (synchronous) store: off the loop that serves pages
            parts = await trio.to_thread.run_sync(render)
        except OrchestraError as exc:  # e.g. the store is locked for longer than its timeout
            yield message("trouble", str(exc))
        else:
            digests = {name: _digest(html) for name, html in parts.items()}
            changed = {name: parts[name] for name, d in digests.items() if sent.get(name) != d}
            if changed:
                sent.update(digests)
                yield message("update", changed)
        pause = max(MIN_INTERVAL_S, BUSY_SHARE * (trio.current_time() - began))
        with trio.move_on_after(pause):
            await closing.wait()
