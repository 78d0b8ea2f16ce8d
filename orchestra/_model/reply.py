"""A reply as data: the chat-completions body read into a :class:`ChatReply`.

Every wire format ends here: a whole reply's body, or the one a stream
assembled (see :mod:`.stream`), is read by :func:`reply_of`, which refuses
usage that is not a plausible token count and keeps tool calls with unique
ids. What a server sends is data from outside: nothing it says reaches the
books unchecked.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, Protocol

import attrs

from .._exceptions import ProviderReplyError
from .._redact import excerpt, redact
from .._storable import loads

__all__ = [
    "MAX_REPLY_TOKENS",
    "Body",
    "ChatReply",
    "error_text",
    "fresh_id",
    "parse_reply",
    "reply_of",
]

MAX_REPLY_TOKENS = 10_000_000
"""The most prompt or completion tokens one reply may report."""


@attrs.frozen(kw_only=True)
class ChatReply:
    """The assistant message of a reply, why it ended, and what it cost in tokens."""

    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool = True
    """False when the server sent no usage: the counts are 0 and the caller estimates."""
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those read from the provider's cache
    (``usage.prompt_tokens_details.cached_tokens``)."""
    cache_write_tokens: int = 0
    """Of ``prompt_tokens``, those written to the provider's cache
    (``usage.prompt_tokens_details.cache_write_tokens``: Anthropic's cache
    creation, as :mod:`.anthropic` reads it)."""
    reasoning_tokens: int = 0
    """Of ``completion_tokens``, those spent reasoning
    (``usage.completion_tokens_details.reasoning_tokens``)."""
    streamed: bool = False
    """Whether the reply came as a stream of events."""
    time_to_first_chunk_s: float | None = None
    """For a streamed reply: seconds from sending the request to its first event."""
    model: str | None = None
    """The model that answered, as the server names it (``model`` of the body), if given."""
    id: str | None = None
    """The server's id of this completion (``id`` of the body), if given."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the model asked for (possibly none)."""
        return list(self.message.get("tool_calls") or [])


class Body(Protocol):
    """A response's body, read (an :class:`~.http.HTTPReply`, an ``httpx.Response``)."""

    @property
    def content(self) -> bytes: ...

    @property
    def text(self) -> str: ...


def error_text(response: Body) -> str:
    """The error message of an error response's body, else an excerpt of it."""
    try:
        return str(_decoded(response.content)["error"]["message"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return excerpt(response.text, 300)


def parse_reply(response: Body) -> ChatReply:
    """A chat-completions response body as a :class:`ChatReply`.

    Raises:
        ProviderReplyError: the body is not a chat completion, or its usage is
            not a whole number of tokens between 0 and ``MAX_REPLY_TOKENS``
            (a reply with no ``usage`` at all is accepted, ``usage_reported=False``).
    """
    try:
        return reply_of(_decoded(response.content))
    except RecursionError:
        raise ProviderReplyError("not a chat completion: the reply is nested too deeply") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ProviderReplyError(
            f"not a chat completion ({exc!r}): {excerpt(response.text, 300)}"
        ) from exc


def reply_of(body: Any) -> ChatReply:
    """A decoded chat-completions body as a :class:`ChatReply`.

    Raises:
        ProviderReplyError: its usage is implausible (see :func:`parse_reply`).
        KeyError, IndexError, TypeError, ValueError: it is not a chat completion.
    """
    choice = body["choices"][0]
    usage = body.get("usage")
    prompt = _token_count(usage, "prompt_tokens")
    completion = _token_count(usage, "completion_tokens")
    return ChatReply(
        message=_clean_message(choice["message"]),
        finish_reason=str(choice.get("finish_reason") or "stop"),
        prompt_tokens=prompt,
        completion_tokens=completion,
        usage_reported=usage is not None,
        cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens", prompt),
        cache_write_tokens=_detail(usage, "prompt_tokens_details", "cache_write_tokens", prompt),
        reasoning_tokens=_detail(
            usage, "completion_tokens_details", "reasoning_tokens", completion
        ),
        model=_label(body.get("model")),
        id=_label(body.get("id")),
    )


def _decoded(content: bytes) -> Any:
    """JSON ``content``; :class:`RecursionError` when nested deeper than orjson reads.

    A body whose strings hold a lone surrogate escape (``"\\ud83d"``: half of
    a UTF-16 pair, which orjson refuses) is decoded by ``json`` instead, each
    lone surrogate made U+FFFD (see :mod:`orchestra._storable`).
    """
    try:
        return loads(content)
    except ValueError as exc:
        if "depth limit" in str(exc) or "nested too deeply" in str(exc):
            raise RecursionError(str(exc)) from None
        raise


def _token_count(usage: Mapping[str, Any] | None, field: str) -> int:
    """``usage[field]``, which must be an integer from 0 to ``MAX_REPLY_TOKENS``.

    0 when the reply has no usage at all (some servers omit it): the loop
    then estimates the call's cost from its reservation.
    """
    if usage is None:
        return 0
    value = usage[field]
    if type(value) is not int or not 0 <= value <= MAX_REPLY_TOKENS:
        raise ProviderReplyError(
            f"implausible usage.{field} in the reply: {_short_repr(value)} (expected an "
            f"integer from 0 to {MAX_REPLY_TOKENS:,})"
        )
    return value


def _detail(usage: Mapping[str, Any] | None, details: str, field: str, total: int) -> int:
    """``usage[details][field]``, a part of ``total``; 0 when not reported.

    Servers that do not cache or reason send ``null`` or leave it out; a count
    that is not a whole number within ``total`` is refused like any usage.
    """
    found = usage.get(details) if usage is not None else None
    value = found.get(field) if isinstance(found, Mapping) else None
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= total:
        raise ProviderReplyError(
            f"implausible usage.{details}.{field} in the reply: {_short_repr(value)} (expected "
            f"an integer from 0 to {total:,}, its total)"
        )
    return value


def _label(value: Any) -> str | None:
    """A short identifying string of the reply (its ``model``, its ``id``), else None:
    these only label traces, so an odd one is dropped rather than refused."""
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL:
        return None
    return redact(value)


MAX_LABEL = 256
"""The longest ``model`` or ``id`` of a reply that is kept."""


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _clean_message(message: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        raise TypeError("message is not an object")
    clean: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls")
    if calls:
        clean["tool_calls"] = _unique_ids([_clean_call(c) for c in calls])
    return clean


def _unique_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every call of one message its own id (a missing or repeated id would
    leave a call without a result in the transcript)."""
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if not call["id"] or call["id"] in seen:
            call["id"] = fresh_id(f"{call['id'] or 'call'}_{i}", seen)
        seen.add(call["id"])
    return calls


def fresh_id(wanted: str, seen: Collection[Any]) -> str:
    """``wanted``, or ``wanted`` with a ``_N`` suffix if ``seen`` already has it."""
    candidate, n = wanted, 1
    while candidate in seen:
        candidate, n = f"{wanted}_{n}", n + 1
    return candidate


def _clean_call(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call["function"]
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": str(fn["name"]), "arguments": _arguments_text(fn.get("arguments"))},
    }


def _arguments_text(arguments: Any) -> str:
    """The arguments as a JSON string (some endpoints send an object, not a string)."""
    if not arguments:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
