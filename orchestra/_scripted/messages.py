"""The scripted provider in Anthropic's wire format (``POST /v1/messages``).

The scripts answer chat completions; a Messages request is read into the chat
request it means (its ``system`` first, each ``tool_result`` block a tool
message, each ``tool_use`` block a call), answered by the same scripts and the
same faults, and the answer written back as a Messages reply: a ``message``
object, or its server-sent events (``message_start``, a start, deltas and a
stop per content block, ``message_delta`` with the stop reason and the output
tokens, ``message_stop``). Errors come as Anthropic's ``{"type": "error",
"error": {"type", "message"}}``. The usage is the script's: input tokens are
our count of the prompt, so the client's count and the server's agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from .scenarios import CACHE_BLOCK, Answer
from .stream import token_pieces
from .translate import chat_head, decoded_object

__all__ = ["MESSAGES_PATH", "MessagesAnswer", "chat_body"]

MESSAGES_PATH: Final = "/v1/messages"

_STOP_REASONS: Final = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def chat_body(body: bytes) -> bytes:
    """The chat-completions request a Messages request body means (a body that is
    not a JSON object is passed on as it is: the chat side refuses it)."""
    request = decoded_object(body)
    if request is None:
        return body
    chat = chat_head(request, _messages(request), request.get("max_tokens"))
    if request.get("tools"):
        chat["tools"] = [_tool(t) for t in request["tools"] if isinstance(t, dict)]
        choice = (request.get("tool_choice") or {}).get("type")
        if choice in ("any", "auto", "none"):
            chat["tool_choice"] = "required" if choice == "any" else choice
    return json.dumps(chat).encode()


def _messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    system = request.get("system")
    said = [{"role": "system", "content": _text(system)}] if system else []
    for message in request.get("messages") or ():
        said.extend(_message(message) if isinstance(message, dict) else [message])
    return said


def _message(message: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    content, role = message.get("content"), message.get("role")
    if isinstance(content, str) or not isinstance(content, list):
        yield {"role": role, "content": content}
        return
    if role == "assistant":
        yield _assistant(content)
        return
    text = [b.get("text", "") for b in content if b.get("type") == "text"]
    for block in content:
        if block.get("type") == "tool_result":
            yield {
                "role": "tool",
                "tool_call_id": block.get("tool_use_id"),
                "content": _text(block.get("content")),
            }
    if text:
        yield {"role": "user", "content": "".join(text)}


def _assistant(content: list[Mapping[str, Any]]) -> dict[str, Any]:
    text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
        }
        for b in content
        if b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _text(value: Any) -> str:
    """A system prompt or tool result: a string, or text blocks joined."""
    if isinstance(value, list):
        return "".join(b.get("text", "") for b in value if isinstance(b, dict))
    return "" if value is None else str(value)


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description") if k in tool}
    return {"type": "function", "function": {**function, "parameters": tool.get("input_schema")}}


@attrs.frozen
class MessagesAnswer(Answer):
    """A chat answer written as Anthropic's Messages API writes it."""

    @property
    def content(self) -> bytes:
        return json.dumps(self._body(), separators=(",", ":")).encode()

    def _body(self) -> dict[str, Any]:
        if self.status != 200:
            return _error(self.status, self.body)
        return message_of(self.body)

    def events(self) -> list[bytes]:
        return list(_events(message_of(self.body)))


def _error(status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    error = body.get("error")
    error = error if isinstance(error, dict) else {}
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.get("message", "")}}


def message_of(completion: Mapping[str, Any]) -> dict[str, Any]:
    """A chat completion as a Messages ``message`` object."""
    choice = completion["choices"][0]
    said = choice["message"]
    blocks: list[dict[str, Any]] = []
    if said.get("content"):
        blocks.append({"type": "text", "text": said["content"]})
    for call in said.get("tool_calls") or ():
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": _input(function["arguments"]),
            }
        )
    usage = completion.get("usage") or {}
    prompt, read, written = _prompt_parts(usage)
    return {
        "id": completion.get("id"),
        "type": "message",
        "role": "assistant",
        "model": completion.get("model"),
        "content": blocks,
        "stop_reason": _STOP_REASONS.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt - read - written,
            "output_tokens": usage.get("completion_tokens", 0),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        },
    }


def _prompt_parts(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """The prompt, its cache reads and its cache writes: where the script caches (its
    usage says what was read), every whole block of the prompt not read is written,
    as a Messages API prompt with caching on is."""
    prompt = usage.get("prompt_tokens", 0)
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict) or "cached_tokens" not in details:
        return prompt, 0, 0
    read = details["cached_tokens"]
    return prompt, read, max(prompt // CACHE_BLOCK * CACHE_BLOCK - read, 0)


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {}


def _events(message: Mapping[str, Any]) -> Iterator[bytes]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        yield from _block(index, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage_out = {"output_tokens": usage["output_tokens"]}
    yield _sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage_out})
    yield _sse("message_stop", {"type": "message_stop"})


def _block(index: int, block: Mapping[str, Any]) -> Iterator[bytes]:
    """One content block's events: its start, its deltas (text, or the call's input
    as JSON pieces), its stop."""
    opened: dict[str, Any]
    if block["type"] == "text":
        opened, text, kind, field = {"type": "text", "text": ""}, block["text"], "text", "text"
    else:
        opened = {**block, "input": {}}
        text, kind, field = json.dumps(block["input"]), "input_json", "partial_json"
    start = {"type": "content_block_start", "index": index, "content_block": opened}
    yield _sse("content_block_start", start)
    for piece in token_pieces(text):
        delta = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": f"{kind}_delta", field: piece},
        }
        yield _sse("content_block_delta", delta)
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    payload = json.dumps(data, separators=(",", ":"))
    return f"event: {event}\ndata: {payload}\n\n".encode()
