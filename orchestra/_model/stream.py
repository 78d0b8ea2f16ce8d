"""A streamed reply, assembled as its server-sent events arrive.

The request asks ``stream: true`` with ``stream_options.include_usage``; each
``data:`` event is one ``chat.completion.chunk``. :class:`Assembly` folds
them into the reply: content pieces joined, tool calls assembled by their
``index`` (id and name from the first piece, arguments appended), the
``finish_reason``, and the usage of the last chunk. Each piece of text or
arguments is also told to the request's :class:`Listener` as it arrives,
with our count of its tokens, so a stream cut by a cancel, a deadline or a
dropped connection is still charged for what arrived.

A stream that runs past the request's ``max_tokens`` (by our count) is cut
here, at the cap, and ends ``length``. A stream with no usage chunk is a
reply without usage: the caller estimates it, as for any such reply.

What is a chunk: the data of a ``message`` event (the default type; see
:mod:`.sse` for how events are read), ``[DONE]`` ending the reply. An
``error`` event, or a message whose data is an object with ``error`` and no
``choices`` (as OpenAI, vLLM and llama.cpp send when generation fails
mid-way), is the server's failure; events of any other type are not the
OpenAI wire format's, and are skipped. After each event :meth:`Assembly.take`
says what the reader does next (:class:`Reading`): read on, stop because the
reply is whole, or close the stream because it ran past its cap.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import orjson

from .._exceptions import ProviderHTTPError, ProviderReplyError
from .._redact import excerpt
from .._storable import loads
from .sse import ServerEvent
from .tokens import count_text

__all__ = ["Assembly", "Listener", "Reading", "is_event_stream"]


class Reading(enum.Enum):
    """What the reader of a stream does after an event."""

    ON = "on"
    """Read on."""
    DONE = "done"
    """The reply is whole (``[DONE]``): nothing more is read into it."""
    CUT = "cut"
    """The reply ran past its cap: the stream is closed at once."""


def is_event_stream(headers: Mapping[str, str]) -> bool:
    """Whether a response (its headers, names in lower case) is a stream of events
    (media types are case-insensitive: ``Text/Event-Stream`` is one too)."""
    media_type = headers.get("content-type", "").partition(";")[0]
    return media_type.strip().lower() == "text/event-stream"


class Listener(Protocol):
    """Told each piece of a streamed reply as it arrives."""

    def text(self, piece: str, tokens: int) -> None:
        """A piece of the answer's text, and our count of its tokens."""

    def arguments(self, piece: str, tokens: int) -> None:
        """A piece of a tool call's arguments (or its name), and our count of its tokens."""


@attrs.define(eq=False)
class Assembly:
    """The reply a stream has delivered so far (see the module docstring)."""

    limit: int | None = None
    """The reply's cap (``max_tokens``): past it, by our count, the stream is cut."""
    listener: Listener | None = None
    content: list[str] = attrs.Factory(list)
    calls: dict[int, dict[str, Any]] = attrs.Factory(dict)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    model: str | None = None
    id: str | None = None
    counted: int = 0
    """Our count of the tokens that arrived (text and arguments)."""
    done: bool = False
    sent_at: float = 0.0
    """When the request was sent (trio's clock)."""
    first_at: float | None = None
    """When its first event arrived."""
    wire: dict[str, Any] = attrs.Factory(dict)
    """What another wire format keeps between its events (see :meth:`add_chunk`)."""

    @property
    def reading(self) -> Reading:
        """What the reader does next (see :class:`Reading`)."""
        if self.done:
            return Reading.DONE
        return Reading.CUT if self.over else Reading.ON

    def take(self, event: ServerEvent) -> Reading:
        """One event of the stream (see the module docstring); what to do next.

        Raises:
            ProviderReplyError: a message that is not a chat-completion chunk.
            ProviderHTTPError: the server said it failed, mid-stream.
        """
        if event.type == "error":
            raise stream_error(event.data)
        if event.type == "message":
            self.feed(event.data)
        return self.reading

    @property
    def over(self) -> bool:
        """Whether the stream ran past its cap (by our count): it is cut there."""
        return self.limit is not None and self.counted > self.limit

    def feed(self, data: str) -> None:
        """One ``data:`` payload: a chunk, or ``[DONE]``.

        Raises:
            ProviderReplyError: not a chat-completion chunk.
            ProviderHTTPError: an error object instead of a chunk (the server failed).
        """
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = loads(data)  # lone surrogate escapes too (see orchestra._storable)
            if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                raise stream_error(chunk)
            self.add_chunk(chunk)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ProviderReplyError(
                f"not a chat-completion chunk ({exc!r}): {excerpt(data, 200)}"
            ) from exc

    def add_chunk(self, chunk: Mapping[str, Any]) -> None:
        """One chat-completion chunk, decoded: the stream's lingua franca (a wire
        format with events of its own translates them into chunks).

        Raises:
            ValueError, TypeError, KeyError, AttributeError: not a chunk.
        """
        self.model = self.model or chunk.get("model")
        self.id = self.id or chunk.get("id")
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                self._thought(str(delta["reasoning_content"]))
            if delta.get("content"):
                self._text(str(delta["content"]))
            for call in delta.get("tool_calls") or ():
                self._call(call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _text(self, piece: str) -> None:
        tokens = count_text(piece)
        self.content.append(piece)
        self.counted += tokens
        if self.listener is not None:
            self.listener.text(piece, tokens)

    def _thought(self, piece: str) -> None:
        """A piece of visible reasoning (``reasoning_content``, as llama.cpp, vLLM and
        DeepSeek stream it; Anthropic's thinking): billed as output, so counted
        (a cut stream is charged for it), never part of the answer."""
        tokens = count_text(piece)
        self.counted += tokens
        if self.listener is not None:
            self.listener.arguments(piece, tokens)

    def _call(self, piece: Mapping[str, Any]) -> None:
        call = self.calls.setdefault(
            int(piece.get("index") or 0),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if piece.get("id"):
            call["id"] = str(piece["id"])
        function = piece.get("function") or {}
        text = str(function.get("name") or "") + str(function.get("arguments") or "")
        call["function"]["name"] += str(function.get("name") or "")
        call["function"]["arguments"] += str(function.get("arguments") or "")
        if text:
            tokens = count_text(text)
            self.counted += tokens
            if self.listener is not None:
                self.listener.arguments(text, tokens)

    def body(self) -> dict[str, Any]:
        """The reply as the body of a chat completion (cut at the cap: ``length``)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        finish = "length" if self.over else (self.finish_reason or "stop")
        body: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "model": self.model,
            "id": self.id,
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def stream_error(payload: Any) -> ProviderHTTPError:
    """The failure a server reported mid-stream: an ``error`` event's data, or a
    chunk ``{"error": {"message": ..., "code": ...}}`` (a ``code`` that is an
    HTTP status is kept as the status: it decides whether to retry)."""
    if isinstance(payload, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            payload = orjson.loads(payload)
    error = payload.get("error") if isinstance(payload, dict) else payload
    said = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    status = code if type(code) is int and 400 <= code <= 599 else None
    text = excerpt(str(said if said is not None else payload), 300)
    return ProviderHTTPError(f"the server failed mid-stream: {text}", status_code=status)
