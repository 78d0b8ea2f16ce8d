"""The scripted provider in OpenAI's Responses wire format (``POST /v1/responses``).

As for Anthropic's (:mod:`.messages`): the request is read into the chat
request it means (``instructions`` and role items as messages, ``function_call``
items as calls, ``function_call_output`` items as tool results, ``text.format``
as ``response_format``, ``max_output_tokens`` as the cap), answered by the same
scripts and faults, and written back as a ``response`` object or its events
(``response.created``, ``response.output_item.added``, text and arguments
deltas, ``response.output_item.done``, ``response.completed`` with the usage).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from .scenarios import Answer
from .stream import token_pieces
from .translate import chat_head, decoded_object

__all__ = ["RESPONSES_PATH", "ResponsesAnswer", "chat_body"]

RESPONSES_PATH: Final = "/v1/responses"


def chat_body(body: bytes) -> bytes:
    """The chat-completions request a Responses request body means (a body that is
    not a JSON object is passed on as it is: the chat side refuses it)."""
    request = decoded_object(body)
    if request is None:
        return body
    chat = chat_head(request, _messages(request), request.get("max_output_tokens"))
    if request.get("tools"):
        chat["tools"] = [_tool(t) for t in request["tools"] if isinstance(t, dict)]
        if request.get("tool_choice") in ("auto", "required", "none"):
            chat["tool_choice"] = request["tool_choice"]
    given = (request.get("text") or {}).get("format")
    if isinstance(given, dict) and given.get("type") == "json_schema":
        spec = {k: v for k, v in given.items() if k != "type"}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    return json.dumps(chat).encode()


def _messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    said: list[dict[str, Any]] = []
    if request.get("instructions"):
        said.append({"role": "system", "content": request["instructions"]})
    items = request.get("input")
    if isinstance(items, str):
        return [*said, {"role": "user", "content": items}]
    for item in items or ():
        _take(said, item)
    return said


def _take(said: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    kind = item.get("type", "message")
    if kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
        }
        if said and said[-1]["role"] == "assistant" and said[-1].get("tool_calls") is not None:
            said[-1]["tool_calls"].append(call)
        elif said and said[-1]["role"] == "assistant":
            said[-1]["tool_calls"] = [call]
        else:
            said.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        said.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": output})
    else:
        said.append({"role": item.get("role"), "content": _text(item.get("content"))})


def _text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": "function", "function": function}


@attrs.frozen
class ResponsesAnswer(Answer):
    """A chat answer written as the Responses API writes it."""

    @property
    def content(self) -> bytes:
        body = response_of(self.body) if self.status == 200 else self.body
        return json.dumps(body, separators=(",", ":")).encode()

    def events(self) -> list[bytes]:
        return list(_events(response_of(self.body)))


def response_of(completion: Mapping[str, Any]) -> dict[str, Any]:
    """A chat completion as a Responses ``response`` object."""
    choice = completion["choices"][0]
    said = choice["message"]
    output: list[dict[str, Any]] = []
    if said.get("content"):
        part = {"type": "output_text", "text": said["content"], "annotations": []}
        output.append(
            {
                "type": "message",
                "id": "msg_0",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for call in said.get("tool_calls") or ():
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call['id']}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    usage = completion.get("usage") or {}
    cut = choice.get("finish_reason") == "length"
    return {
        "id": completion.get("id"),
        "object": "response",
        "model": completion.get("model"),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
        },
    }


def _events(response: Mapping[str, Any]) -> Iterator[bytes]:
    opened = {**response, "status": "in_progress", "output": [], "usage": None}
    yield _sse("response.created", {"type": "response.created", "response": opened})
    for index, item in enumerate(response["output"]):
        yield from _item(index, item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield _sse(final, {"type": final, "response": response})


def _item(index: int, item: Mapping[str, Any]) -> Iterator[bytes]:
    """One output item's events: added, its text or arguments in deltas, done."""
    message = item["type"] == "message"
    added = {**item, "content": []} if message else {**item, "arguments": ""}
    head = {"output_index": index, "item_id": item["id"]}
    yield _sse(
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": index, "item": added},
    )
    if message:
        part = {"type": "output_text", "text": "", "annotations": []}
        yield _sse(
            "response.content_part.added",
            {"type": "response.content_part.added", **head, "content_index": 0, "part": part},
        )
        text, kind, at = item["content"][0]["text"], "output_text", {"content_index": 0}
    else:
        text, kind, at = item["arguments"], "function_call_arguments", {}
    for piece in token_pieces(text):
        delta = {"type": f"response.{kind}.delta", **head, **at, "delta": piece}
        yield _sse(f"response.{kind}.delta", delta)
    done = {"type": f"response.{kind}.done", **head, **at}
    yield _sse(f"response.{kind}.done", {**done, ("text" if message else "arguments"): text})
    if message:
        yield _sse(
            "response.content_part.done",
            {
                "type": "response.content_part.done",
                **head,
                "content_index": 0,
                "part": item["content"][0],
            },
        )
    yield _sse(
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": index, "item": item},
    )


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    payload = json.dumps(data, separators=(",", ":"))
    return f"event: {event}\ndata: {payload}\n\n".encode()
