"""Server-sent events, read as the HTML standard says (9.2.6, "Interpreting an
event stream"), from a body that arrives in pieces cut anywhere.

:class:`EventParser` is given the body's text piece by piece and returns the
events each piece completed:

- lines end at CR LF, LF or CR (a CR that ends one piece and the LF that starts
  the next are one line end);
- a byte-order mark (U+FEFF) starting the stream is dropped;
- a line starting with ``:`` is a comment (a keep-alive), ignored;
- ``data`` lines are joined with LF; ``event`` names the event's type
  (``message`` when none does); ``id``, ``retry`` and any other field are read
  and change nothing here (they tell a browser how to reconnect; a chat
  completion is never resumed);
- a blank line ends the event; one whose data is empty (only ``id:``,
  ``retry:``, ``event:`` or comments) is not dispatched, as the standard says;
- an event the stream ends before its blank line is dropped.

What the events mean (which are chunks of a chat completion) is
:mod:`.stream`'s business.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

__all__ = ["EventParser", "ServerEvent"]

_LINE_END: Final = re.compile(r"\r\n|\r|\n")
_BOM: Final = "\ufeff"


@attrs.frozen
class ServerEvent:
    """One dispatched event: its type (``message`` by default) and its data."""

    data: str
    type: str = "message"


@attrs.define(eq=False)
class EventParser:
    """The events of one stream (see the module docstring). Not thread-safe."""

    _partial: str = ""
    """The start of a line whose end has not come yet."""
    _data: list[str] = attrs.Factory(list)
    _type: str = ""
    _started: bool = False
    _skip_lf: bool = False
    """The last piece ended with CR: an LF starting the next ends no other line."""

    def feed(self, text: str) -> list[ServerEvent]:
        """The events completed by ``text``, the next piece of the body."""
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix(_BOM)
        if self._skip_lf and text.startswith("\n"):
            text = text[1:]
        self._skip_lf = text.endswith("\r")
        lines = _LINE_END.split(self._partial + text)
        self._partial = lines.pop()
        events = []
        for line in lines:
            if line:
                self._line(line)
            elif (event := self._dispatch()) is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> None:
        if line.startswith(":"):
            return  # a comment
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value

    def _dispatch(self) -> ServerEvent | None:
        data, kind = "\n".join(self._data), self._type or "message"
        self._data, self._type = [], ""
        return ServerEvent(data, kind) if data else None
