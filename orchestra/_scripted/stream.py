"""A chat completion as the server-sent events of a streamed reply.

The OpenAI spec's shape: ``chat.completion.chunk`` objects, one ``data:``
line each; the first carries the role, then the content in pieces of a few
tokens (or each tool call: its id and name, then its arguments in pieces),
then one with the ``finish_reason``, then (when the request asked
``stream_options.include_usage``) one with empty ``choices`` and the
``usage``, then ``data: [DONE]``. The pieces are cut on o200k token
boundaries, so the counts agree with the reply's usage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .._model.tokens import encoding

__all__ = ["DONE", "TOKENS_PER_CHUNK", "chunks", "token_pieces"]

TOKENS_PER_CHUNK: Final = 4
"""About this many tokens of text per content or arguments chunk."""
DONE: Final = b"data: [DONE]\n\n"


def chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """The SSE events (``data: …\\n\\n`` each) that stream ``completion``."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    events = [_event(head, delta) for delta in _deltas(choice["message"])]
    events.append(_event(head, {}, finish=choice["finish_reason"]))
    usage = completion.get("usage")
    if include_usage and usage is not None:
        events.append(_data({**head, "choices": [], "usage": usage}))
    return [*events, DONE]


def _deltas(message: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": ""}
    for piece in token_pieces(message.get("content") or ""):
        yield {"content": piece}
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        start = {"index": index, "id": call["id"], "type": "function"}
        yield {"tool_calls": [{**start, "function": {"name": function["name"], "arguments": ""}}]}
        for piece in token_pieces(function["arguments"]):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def token_pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of :data:`TOKENS_PER_CHUNK` tokens (whole characters)."""
    tokens = encoding().encode(text, disallowed_special=())
    pending = b""
    for start in range(0, len(tokens), TOKENS_PER_CHUNK):
        pending += encoding().decode_bytes(tokens[start : start + TOKENS_PER_CHUNK])
        try:
            piece = pending.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a character split across pieces: send it whole with the next
        pending = b""
        yield piece
    if pending:
        yield pending.decode("utf-8", errors="replace")


def _event(head: Mapping[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _data({**head, "choices": [choice]})


def _data(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
