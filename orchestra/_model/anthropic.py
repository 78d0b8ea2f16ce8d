"""Anthropic's Messages API: the same requests and replies, in its wire format.

:class:`AnthropicProvider` sends a :class:`~.provider.ChatRequest` (the
transcript in the chat-completions shape every run keeps) as ``POST
{base_url}/messages`` and reads the reply back into a :class:`~.reply.ChatReply`:

- system messages become the top-level ``system`` (joined, in order: a
  budget note written last is said there too); an assistant's tool calls
  become ``tool_use`` blocks, tool results ``tool_result`` blocks in the user
  turn that follows (consecutive turns of one role are merged, as the API
  requires alternation); tools are declared with their ``input_schema``.
- ``tool_choice`` ``required``/``auto``/``none`` is ``any``/``auto``/``none``;
  ``max_tokens`` is always sent (the API requires it); settings map to
  ``temperature``, ``top_p``, ``stop_sequences`` and
  ``disable_parallel_tool_use``; ``seed`` has no counterpart and is not sent.
  A request with ``response_format`` is refused (:class:`ConfigError`): give
  the agent ``output_via="tool"``.
- Usage: ``input_tokens`` plus the cache's reads and writes are the prompt
  (reads as cached tokens, writes as cache-write tokens, each at its own
  rate: see :class:`~orchestra.Price`, which reserves every prompt token at
  the dearer of input and cache write); ``output_tokens`` the completion
  (thinking included, as Anthropic bills it).
- A stream's events (``message_start``, ``content_block_*``,
  ``message_delta``, ``message_stop``; ``ping`` skipped, ``error`` the
  server's failure) are translated into chat-completion chunks for the same
  :class:`~.stream.Assembly`, so a cut stream is charged for what arrived and
  a cancel stops it mid-way exactly as for the chat wire format.

Anthropic counts tokens with its own tokenizer: the budget gate reserves with
our o200k count widened by the prompt margin, learnt per model from the
usage each reply reports (see :mod:`.margin`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from .._exceptions import ConfigError, ProviderReplyError
from .._storable import loads
from .provider import DEFAULT_MAX_CONNECTIONS, ChatRequest, HTTPProvider, sendable
from .reply import Body, ChatReply, reply_of
from .sse import ServerEvent
from .stream import Assembly, Reading, stream_error

if TYPE_CHECKING:
    import httpx

__all__ = ["ANTHROPIC_URL", "AnthropicProvider", "messages_body"]

ANTHROPIC_URL: Final = "https://api.anthropic.com/v1"
ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_MAX_TOKENS: Final = 1024
"""The reply cap sent when a request has none (the Messages API requires one)."""

_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
_CHOICE: Final = {"required": "any", "auto": "auto", "none": "none"}


class AnthropicProvider(HTTPProvider):
    """A client for Anthropic's Messages API (see the module docstring).

    ``base_url`` defaults to ``$ANTHROPIC_BASE_URL``, else Anthropic's API;
    ``api_key`` to ``$ANTHROPIC_API_KEY`` (sent as ``x-api-key``, never
    logged). The rest as :class:`~orchestra.OpenAIProvider`.
    """

    END_OF_STREAM: ClassVar[str] = "message_stop"

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
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
        super().__init__(
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL,
            key=key,
            headers=headers,
            timeout=timeout,
            transport=transport,
            max_connections=max_connections,
            provider_name=provider_name or "anthropic",
            stream=stream,
        )

    async def complete(self, request: ChatRequest) -> ChatReply:
        """POST the request to ``/messages`` and read the reply (see :class:`~.provider.Provider`).

        Raises:
            ConfigError: the request asks a ``response_format`` (not in this API).
            ProviderUnreachable: no connection could be made.
            ProviderHTTPError: another transport failure or a non-2xx status.
            ProviderReplyError: a 2xx body that is not a Messages reply.
        """
        body = messages_body(request, stream=self._streams)
        return await self._exchange(request, "/messages", body)

    def _feed(self, assembly: Assembly, event: ServerEvent) -> Reading:
        if event.type == "error":
            raise stream_error(event.data)
        try:
            data = loads(event.data)
            for chunk in _chunks(assembly, data):
                assembly.add_chunk(chunk)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ProviderReplyError(f"not a Messages event ({exc!r}): {event.type}") from exc
        return assembly.reading

    def _parsed(self, response: Body) -> ChatReply:
        try:
            message = loads(response.content)
            return reply_of(completion_of(message))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ProviderReplyError(f"not a Messages reply ({exc!r})") from exc


# -- requests ------------------------------------------------------------------------


def messages_body(request: ChatRequest, *, stream: bool) -> dict[str, Any]:
    """The Messages request body for ``request`` (see the module docstring).

    Raises:
        ConfigError: ``request`` asks a ``response_format``.
    """
    if request.response_format is not None:
        raise ConfigError(
            "Anthropic's Messages API takes no response_format: give the agent "
            'output_via="tool" for a structured answer'
        )
    system, turns = _turns(request.messages)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": turns,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        choice = _tool_choice(request)
        if choice is not None:
            body["tool_choice"] = choice
    if stream:
        body["stream"] = True
    return {**body, **_sampling(request)}


def _turns(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating user/assistant turns of a transcript."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(str(message.get("content") or ""))
            continue
        said = "assistant" if role == "assistant" else "user"
        blocks = list(_blocks(sendable(message)))
        if turns and turns[-1]["role"] == said:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": said, "content": blocks})
    return "\n\n".join(s for s in system if s), turns


def _blocks(message: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") == "tool":
        text = content if isinstance(content, str) else json.dumps(content)
        yield {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": text}
        return
    if isinstance(content, str) and content:
        yield {"type": "text", "text": content}
    for call in message.get("tool_calls") or ():
        function = call["function"]
        yield {
            "type": "tool_use",
            "id": call["id"],
            "name": function["name"],
            "input": json.loads(function["arguments"] or "{}"),
        }


def _tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    function = spec.get("function", spec)
    declared = {"name": function["name"], "input_schema": function.get("parameters") or {}}
    if function.get("description"):
        declared["description"] = function["description"]
    return declared


def _tool_choice(request: ChatRequest) -> dict[str, Any] | None:
    settings = request.settings
    single = settings is not None and settings.parallel_tool_calls is False
    kind = _CHOICE.get(request.tool_choice or "", "auto" if single else None)
    if kind is None:
        return None
    choice: dict[str, Any] = {"type": kind}
    if single and kind != "none":
        choice["disable_parallel_tool_use"] = True
    return choice


def _sampling(request: ChatRequest) -> dict[str, Any]:
    s = request.settings
    if s is None:
        return {}
    fields = {"temperature": s.temperature, "top_p": s.top_p, "stop_sequences": list(s.stop)}
    return {**{k: v for k, v in fields.items() if v not in (None, [])}, **s.extra_body}


# -- replies -----------------------------------------------------------------------


def completion_of(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages ``message`` object as the chat-completion body it means."""
    text = "".join(b["text"] for b in message["content"] if b.get("type") == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))},
        }
        for b in message["content"]
        if b.get("type") == "tool_use"
    ]
    said: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        said["tool_calls"] = calls
    finish = _FINISH.get(message.get("stop_reason") or "", "stop")
    body: dict[str, Any] = {
        "id": message.get("id"),
        "model": message.get("model"),
        "choices": [{"index": 0, "message": said, "finish_reason": finish}],
    }
    if message.get("usage") is not None:
        body["usage"] = _usage(message["usage"], message["usage"])
    return body


def _usage(into: Mapping[str, Any], out: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic's usage (input as ``message_start`` said it, output as the last
    ``message_delta`` did) in the chat-completions shape."""
    read = into.get("cache_read_input_tokens") or 0
    written = into.get("cache_creation_input_tokens") or 0
    return {
        "prompt_tokens": into["input_tokens"] + read + written,
        "completion_tokens": out["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": written},
    }


def _chunks(assembly: Assembly, data: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The chat-completion chunks one Messages event means (the stream's input
    usage and its blocks' kinds kept in ``assembly.wire`` between events)."""
    kind = data["type"]
    if kind == "message_start":
        message = data["message"]
        assembly.wire["usage"] = message.get("usage") or {}
        yield {"id": message.get("id"), "model": message.get("model")}
    elif kind == "content_block_start":
        yield from _opened(data["index"], data["content_block"])
    elif kind == "content_block_delta":
        yield from _delta(data["index"], data["delta"])
    elif kind == "message_delta":
        finish = _FINISH.get(data["delta"].get("stop_reason") or "", "stop")
        usage = _usage(assembly.wire.get("usage") or {"input_tokens": 0}, data["usage"])
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}
    elif kind == "message_stop":
        assembly.done = True


def _opened(index: int, block: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    if block.get("type") == "tool_use":
        call = {"index": index, "id": block["id"], "function": {"name": block["name"]}}
        yield _chunk({"tool_calls": [call]})
    elif block.get("type") == "text" and block.get("text"):
        yield _chunk({"content": block["text"]})


def _delta(index: int, delta: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    if delta.get("type") == "text_delta":
        yield _chunk({"content": delta["text"]})
    elif delta.get("type") == "thinking_delta":  # billed as output: counted as it arrives
        yield _chunk({"reasoning_content": delta["thinking"]})
    elif delta.get("type") == "input_json_delta":
        call = {"index": index, "function": {"arguments": delta["partial_json"]}}
        yield _chunk({"tool_calls": [call]})


def _chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}
