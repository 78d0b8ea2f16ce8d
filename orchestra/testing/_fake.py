"""A fake provider for tests of code built on Orchestra: fixed replies, true counts.

:class:`FakeProvider` plays a fixed list of assistant messages, one per turn
(turn = how many assistant messages the request already holds; the last one
repeats), reports prompt and completion tokens as Orchestra counts them, and
keeps every request it saw. No HTTP: it implements the ``Provider`` protocol
directly. :func:`tool_calls` and :data:`DONE` build the messages.
"""

from __future__ import annotations

import json
from typing import Any, Final

from .._model.provider import ChatReply, ChatRequest
from .._model.tokens import count_completion, count_prompt

__all__ = ["DONE", "FakeProvider", "tool_calls"]

DONE: Final[dict[str, Any]] = {"role": "assistant", "content": "done"}
"""An assistant message that ends a run with the answer ``done``."""


class FakeProvider:
    """Plays ``turns`` (assistant messages) in order; see the module docstring.

    Cancellation: ``complete`` does not yield to trio; it returns at once.
    """

    def __init__(self, *turns: dict[str, Any]) -> None:
        if not turns:
            raise ValueError("FakeProvider needs at least one assistant message")
        self.turns = turns
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The scripted message for this turn, with our token counts."""
        self.requests.append(request)
        n = sum(m["role"] == "assistant" for m in request.messages)
        message = self.turns[min(n, len(self.turns) - 1)]
        return ChatReply(
            message=message,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.declarations()),
            completion_tokens=count_completion(message),
        )


def tool_calls(*calls: tuple[str, str | dict[str, Any]]) -> dict[str, Any]:
    """An assistant message calling each ``(tool name, arguments)`` (ids ``c0``, ``c1``, ...).

    Arguments given as a dict are encoded as JSON; a string is sent as is (so a
    test can send malformed JSON).
    """
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
