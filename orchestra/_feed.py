"""A tree's events for one reader, as an async iterator (``RunHandle.events()``).

Every event of every run of the tree, in order, each with its run's depth in
the tree (``data["depth"]``: 0 for the root); text deltas (``text_delta``)
included. The runs never wait for the reader: events queue here, and while
the reader is behind, consecutive ``text_delta`` events of one run are
coalesced into one (their text joined, their tokens added), so the queue
holds at most one delta per run between two other events. Nothing is ever
dropped. The iterator ends after the root's ``run_stopped``, or when the tree
stops however it stops (a store error, a lease lost), once what was queued
is read; a reader opened after its tree stopped ends at once.

Cancellation: iterating is a checkpoint per event; cancelling the reader
leaves the runs alone. A closed feed takes no more events.
"""

from __future__ import annotations

from collections import deque

import attrs
import trio

from ._events import Event

__all__ = ["EventFeed"]


@attrs.define(eq=False)
class EventFeed:
    """One reader's queue of a tree's events (see the module docstring)."""

    _items: deque[Event] = attrs.field(factory=deque, init=False)
    _ready: trio.Event = attrs.field(factory=trio.Event, init=False)
    closed: bool = attrs.field(default=False, init=False)
    coalesced: int = attrs.field(default=0, init=False)
    """Deltas merged into the one before them while the reader was behind."""

    @classmethod
    def ended(cls) -> EventFeed:
        """A feed with nothing to read: its iterator ends at once."""
        feed = cls()
        feed.close()
        return feed

    def put(self, event: Event) -> None:
        """Queue ``event`` (never blocks; a delta may join the delta before it);
        dropped if the feed is closed."""
        if self.closed:
            return
        last = self._items[-1] if self._items else None
        if (
            event.type == "text_delta"
            and last is not None
            and last.type == "text_delta"
            and last.run_id == event.run_id
        ):
            data = {
                **last.data,
                "text": last.data["text"] + event.data["text"],
                "tokens": last.data["tokens"] + event.data["tokens"],
            }
            self._items[-1] = attrs.evolve(last, data=data)
            self.coalesced += 1
        else:
            self._items.append(event)
        self._ready.set()

    def close(self) -> None:
        """No more events: the iterator ends once the queue is read. Not a
        checkpoint; a reader waiting for an event wakes up."""
        self.closed = True
        self._ready.set()

    def drain(self) -> list[Event]:
        """What is queued, taken at once (not a checkpoint): for a closed feed read
        from outside trio (``orchestra.aio``, once the tree's trio side is done)."""
        items, self._items = list(self._items), deque()
        return items

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> Event:
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            await self._ready.wait()
            self._ready = trio.Event()
        await trio.lowlevel.checkpoint()
        return self._items.popleft()
