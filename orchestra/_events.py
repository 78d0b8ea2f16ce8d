"""The event stream: one JSON object per line, the run id on every line.

Event types: ``run_started``, ``model_request``, ``model_retry``, ``turn``,
``tool_start``, ``tool_progress``, ``tool_error`` (a tool raised: its
``error_type`` and ``error``, just before its ``tool_result``), ``tool_result``
(with ``timed_out`` and ``in_doubt`` when a call ran out of time),
``tool_waiting`` (on workers: a call whose child run executes elsewhere
and has not ended; the run parks, holding no worker, and the call runs again
once the child ended), ``approval_required``, ``run_stopped``; ``reply_cut`` (a streamed reply cut
midway: its tokens, charged, and its text); ``text_delta`` (a piece of a
streamed reply's text: to live readers and sinks only, never saved).

Every string in an event's data is redacted when the event is made (API keys,
``Authorization`` values, key shapes: see :mod:`orchestra._redact`), so no
sink, store or tracer ever sees a secret.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO, Any

import attrs

from ._redact import redact_data

__all__ = ["Event", "EventRecord", "EventSink", "JsonlSink", "event_record", "fanout"]


EventRecord = dict[str, Any]
"""An event as stores keep it and return it: one flat JSON object, with
``type``, ``run_id``, ``root_id``, ``parent_id`` and ``at`` (Unix seconds)
beside its data's keys (see :func:`event_record`)."""


_RECORD_KEYS = ("type", "run_id", "root_id", "parent_id", "at")
"""The fields of an event record that are not its data."""


@attrs.frozen(kw_only=True)
class Event:
    """One thing that happened in one run."""

    type: str
    run_id: str
    root_id: str
    parent_id: str | None
    at: float
    data: dict[str, Any] = attrs.field(factory=dict, converter=redact_data)
    depth: int = 0
    """Its run's depth in the tree (0: the root), as the runner knows it; not in
    :meth:`to_dict` (the run's place is in its ids)."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any], depth: int = 0) -> Event:
        """The event a stored (or published) flat record stands for (see :meth:`to_dict`)."""
        data = {k: v for k, v in record.items() if k not in _RECORD_KEYS}
        return cls(
            type=record["type"],
            run_id=record["run_id"],
            root_id=record["root_id"],
            parent_id=record.get("parent_id"),
            at=float(record["at"]),
            data=data,
            depth=depth,
        )

    def to_dict(self) -> EventRecord:
        """The event as one flat JSON object."""
        return event_record(
            self.type, self.run_id, self.root_id, self.parent_id, self.at, self.data
        )


def event_record(
    type_: str, run_id: str, root_id: str, parent_id: str | None, at: float, data: dict[str, Any]
) -> EventRecord:
    """An event as the flat JSON object stores keep (``data`` already redacted).

    What :meth:`Event.to_dict` returns; a runner with no sink or tracer builds
    it directly, without an :class:`Event`.
    """
    return {
        "type": type_,
        "run_id": run_id,
        "root_id": root_id,
        "parent_id": parent_id,
        "at": round(at, 6),
        **data,
    }


EventSink = Callable[[Event], None]
"""Anything that takes events. It is called on the trio thread: keep it quick."""


class JsonlSink:
    """Writes each event as one JSON line to a text stream (a file or stderr);
    the ``text_delta`` events of streamed replies only with ``deltas=True``."""

    def __init__(
        self, stream: IO[str] | None = None, *, path: str | None = None, deltas: bool = False
    ) -> None:
        self._owned = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self._stream = self._owned or stream or sys.stderr
        self._lock = threading.Lock()
        self._deltas = deltas

    def __call__(self, event: Event) -> None:
        if event.type == "text_delta" and not self._deltas:
            return  # one line per reply (its ``turn``) unless asked for every delta
        line = json.dumps(event.to_dict(), default=str, separators=(",", ":"))
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Close the file this sink opened (a given stream is left open)."""
        if self._owned:
            self._owned.close()


def fanout(*sinks: EventSink | None) -> EventSink:
    """One sink that feeds every given sink, in order."""
    active = [s for s in sinks if s is not None]

    def emit(event: Event) -> None:
        for sink in active:
            sink(event)

    return emit
