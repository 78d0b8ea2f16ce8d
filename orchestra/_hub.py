"""The event hub: every event of a runner's runs, to the sink, the tracer, the
tree's live readers and (with the run's next save) the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._core.run import LiveRun
from ._events import Event, EventSink, event_record
from ._feed import EventFeed
from ._redact import redact_data

__all__ = ["EventHub", "Tracer"]

Tracer = Callable[[LiveRun, Event], None]
"""Sees every event with its live run first (e.g. an :class:`~orchestra.OTelTracer`)."""


@attrs.define(kw_only=True, eq=False)
class EventHub:
    """One feed of events: the ``sink``, the ``tracer``, the readers of each tree
    (:meth:`feed`) and the store (each run keeps its events for its next save).

    ``clock`` gives an event's time (the runner's wall clock on trio's time).
    """

    clock: Callable[[], float]
    sink: EventSink | None = None
    tracer: Tracer | None = None
    _feeds: dict[str, list[EventFeed]] = attrs.field(factory=dict, init=False)
    """The readers of each tree's events (:meth:`~orchestra.RunHandle.events`)."""

    def emit(self, run: LiveRun, type_: str, data: dict[str, Any]) -> None:
        """Send an event to the sink now, and to the store with the run's next save.

        ``data`` is redacted here, once. With no sink, no tracer and no reader
        no :class:`Event` is made: only the record the store keeps.
        """
        s = run.state
        if self.tracer is None and self.sink is None and s.root_id not in self._feeds:
            record = event_record(
                type_, s.run_id, s.root_id, s.parent_id, self.clock(), redact_data(data)
            )
            run.events.append(record)
            return
        event = self._event(run, type_, data)
        if self.tracer is not None:
            self.tracer(run, event)
        if self.sink is not None:
            self.sink(event)
        run.events.append(event.to_dict())
        if s.root_id in self._feeds:
            self._to_feeds(event)

    def delta(self, run: LiveRun, text: str, tokens: int) -> None:
        """A piece of a streamed reply's text: to the sink and the tree's readers
        only (never saved, never traced)."""
        s = run.state
        if self.sink is None and s.root_id not in self._feeds:
            return
        event = self._event(run, "text_delta", {"text": text, "tokens": tokens})
        if self.sink is not None:
            self.sink(event)
        if s.root_id in self._feeds:
            self._to_feeds(event)

    def feed(self, root_id: str) -> EventFeed:
        """A new reader of the events of tree ``root_id``, until the tree's run here
        ends (it is closed then: :meth:`end_feeds`)."""
        feed = EventFeed()
        self._feeds.setdefault(root_id, []).append(feed)
        return feed

    def unsubscribe(self, root_id: str, feed: EventFeed) -> None:
        """Close ``feed`` (a reader that went away) and stop queueing events to it."""
        feed.close()
        feeds = self._feeds.get(root_id, [])
        if feed in feeds:
            feeds.remove(feed)
        if not feeds:
            self._feeds.pop(root_id, None)

    def end_feeds(self, root_id: str) -> None:
        """Close every reader of tree ``root_id``: its run here has ended (their
        iterators end once what is queued is read)."""
        for feed in self._feeds.pop(root_id, ()):
            feed.close()

    def _event(self, run: LiveRun, type_: str, data: dict[str, Any]) -> Event:
        s = run.state
        return Event(
            type=type_,
            run_id=s.run_id,
            root_id=s.root_id,
            parent_id=s.parent_id,
            at=self.clock(),
            data=data,
            depth=len(run.lineage()) - 1,
        )

    def _to_feeds(self, event: Event) -> None:
        shown = attrs.evolve(event, data={**event.data, "depth": event.depth})
        for feed in self._feeds[event.root_id]:
            feed.put(shown)
        if event.type == "run_stopped" and event.parent_id is None:
            self.end_feeds(event.root_id)
