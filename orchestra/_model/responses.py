"""OpenAI's Responses API: the same requests and replies, in its wire format.

:class:`ResponsesProvider` sends a :class:`~.provider.ChatRequest` as ``POST
{base_url}/responses`` (``store: false``: the transcript is Orchestra's, sent
whole each time) and reads the reply back into a :class:`~.reply.ChatReply`:

- messages become input items: system, user and assistant text as role
  messages, an assistant's tool calls as ``function_call`` items, tool results
  as ``function_call_output`` items; tools are declared flat (``type``,
  ``name``, ``parameters``); ``response_format`` becomes ``text.format``;
  the reply's cap is ``max_output_tokens``; settings map to ``temperature``,
  ``top_p`` and ``parallel_tool_calls`` (``seed`` and ``stop`` have no
  counterpart and are not sent).
- The reply's ``output`` items: ``output_text`` parts make the content,
  ``function_call`` items the calls (``call_id`` their id); ``reasoning`` items
  are not kept (their tokens are in ``output_tokens_details.reasoning_tokens``
  and charged). A reply ``incomplete`` for ``max_output_tokens`` ended at its
  cap (``length``).
- A stream's events (``response.output_item.added``,
  ``response.output_text.delta``, ``response.function_call_arguments.delta``,
  ``response.completed``/``incomplete``; ``response.failed`` and ``error`` the
  server's failure) are translated into chat-completion chunks for the same
  :class:`~.stream.Assembly`, so every guarantee holds as on Chat Completions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from .._exceptions import ProviderReplyError
from .._storable import loads
from .provider import (
    DEFAULT_MAX_CONNECTIONS,
    ChatRequest,
    HTTPProvider,
    bearer,
    openai_endpoint,
    provider_name_for,
    sendable,
)
from .reply import Body, ChatReply, reply_of
from .sse import ServerEvent
from .stream import Assembly, Reading, stream_error

if TYPE_CHECKING:
    import httpx

__all__ = ["ResponsesProvider", "responses_body"]

_FAILED: Final = frozenset({"response.failed", "error"})


class ResponsesProvider(HTTPProvider):
    """A client for OpenAI's Responses API (see the module docstring).

    ``base_url`` and ``api_key`` default as :class:`~orchestra.OpenAIProvider`'s
    (``$OPENAI_BASE_URL``; OpenAI's API when an OpenAI key is set).
    """

    END_OF_STREAM: ClassVar[str] = "response.completed"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        provider_name: str | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        stream: bool = True,
    ) -> None:
        url, key = openai_endpoint(base_url, api_key)
        super().__init__(
            base_url=url,
            key=key,
            headers=bearer(key),
            timeout=timeout,
            transport=transport,
            max_connections=max_connections,
            provider_name=provider_name or provider_name_for(url),
            stream=stream,
        )

    async def complete(self, request: ChatRequest) -> ChatReply:
        """POST the request to ``/responses`` and read the reply (see :class:`~.provider.Provider`).

        Raises:
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a response.
        """
        return await self._exchange(request, "/responses", responses_body(request, self._streams))

    def _feed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        if event.type in _FAILED:
            raise stream_error(_failure(event.data))
        try:
            data = loads(event.data)
            if data.get("type") in _FAILED:
                raise stream_error(_failure(data))
            for chunk in _chunks(assembly, data):
                assembly.add_chunk(chunk)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ProviderReplyError(f"not a Responses event ({exc!r}): {event.type}") from exc
        return assembly.reading

    def _parsed(self, response: Body) -> ChatReply:
        try:
            return reply_of(completion_of(loads(response.content)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ProviderReplyError(f"not a Responses reply ({exc!r})") from exc


# -- requests ------------------------------------------------------------------------


def responses_body(request: ChatRequest, stream: bool) -> dict[str, Any]:
    """The Responses request body for ``request`` (see the module docstring)."""
    body: dict[str, Any] = {
        "model": request.model,
        "input": list(_items(request.messages)),
        "store": False,
    }
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
    if request.response_format is not None:
        body["text"] = {"format": _format(request.response_format)}
    if stream:
        body["stream"] = True
    return {**body, **_sampling(request)}


def _items(messages: Sequence[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in messages:
        said = sendable(message)
        role, content = said.get("role"), said.get("content")
        if role == "tool":
            text = content if isinstance(content, str) else json.dumps(content)
            yield {
                "type": "function_call_output",
                "call_id": said.get("tool_call_id"),
                "output": text,
            }
            continue
        if isinstance(content, str) and content:
            yield {"role": role, "content": content}
        for call in said.get("tool_calls") or ():
            function = call["function"]
            yield {
                "type": "function_call",
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
            }


def _tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    function = spec.get("function", spec)
    declared = {"type": "function", "name": function["name"]}
    declared["parameters"] = function.get("parameters") or {"type": "object"}
    if function.get("description"):
        declared["description"] = function["description"]
    return declared


def _format(response_format: Mapping[str, Any]) -> dict[str, Any]:
    if response_format.get("type") != "json_schema":
        return dict(response_format)
    spec = response_format["json_schema"]
    return {"type": "json_schema", **spec}


def _sampling(request: ChatRequest) -> dict[str, Any]:
    s = request.settings
    if s is None:
        return {}
    fields = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "parallel_tool_calls": s.parallel_tool_calls if request.tools else None,
    }
    return {**{k: v for k, v in fields.items() if v is not None}, **s.extra_body}


# -- replies -----------------------------------------------------------------------


def completion_of(response: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses ``response`` object as the chat-completion body it means."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        if item.get("type") == "message":
            text += [p.get("text", "") for p in item.get("content") or () if "text" in p]
        elif item.get("type") == "function_call":
            calls.append(_call(item))
    said: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        said["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": response.get("id"),
        "model": response.get("model"),
        "choices": [{"index": 0, "message": said, "finish_reason": _finish(response, calls)}],
    }
    if response.get("usage") is not None:
        body["usage"] = _usage(response["usage"])
    return body


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    function = {"name": item["name"], "arguments": item.get("arguments") or ""}
    return {"id": item["call_id"], "type": "function", "function": function}


def _finish(response: Mapping[str, Any], calls: Sequence[Any]) -> str:
    details = response.get("incomplete_details") or {}
    if response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens":
        return "length"
    return "tool_calls" if calls else "stop"


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """The Responses usage in the chat-completions shape."""
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0)
    return {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _failure(data: Any) -> Any:
    """What a failed stream said: a ``response.failed`` event's ``response.error``."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return data
    if isinstance(data, dict) and isinstance(data.get("response"), dict):
        return {"error": data["response"].get("error") or {"message": "the response failed"}}
    return data


def _chunks(assembly: Assembly, data: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The chat-completion chunks one Responses event means (the calls' output
    indexes kept in ``assembly.wire`` between events)."""
    kind = data.get("type")
    if kind == "response.created":
        response = data["response"]
        yield {"id": response.get("id"), "model": response.get("model")}
    elif kind == "response.output_item.added" and data["item"].get("type") == "function_call":
        item = data["item"]
        call = {
            "index": data["output_index"],
            "id": item["call_id"],
            "function": {"name": item["name"]},
        }
        yield _chunk({"tool_calls": [call]})
    elif kind == "response.output_text.delta":
        yield _chunk({"content": data["delta"]})
    elif kind == "response.function_call_arguments.delta":
        call = {"index": data["output_index"], "function": {"arguments": data["delta"]}}
        yield _chunk({"tool_calls": [call]})
    elif kind in ("response.completed", "response.incomplete"):
        response = data["response"]
        finish = _finish(response, list(assembly.calls))
        yield {
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            "usage": _usage(response["usage"]),
        }
        assembly.done = True


def _chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}
