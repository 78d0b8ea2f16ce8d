"""The wire formats the scripted provider speaks: each request read into the chat
request it means, each answer written back in the request's format.

Chat Completions (``/v1/chat/completions``) is the scripts' own; Anthropic's
Messages (:mod:`.messages`) and OpenAI's Responses (:mod:`.responses`) are
translations of it, so every scenario and every fault plays over all three.
"""

from __future__ import annotations

from typing import Final

from . import messages, responses
from .scenarios import Answer

__all__ = ["as_chat", "dressed"]

CHAT_PATH: Final = "/v1/chat/completions"
_WIRES: Final = {
    messages.MESSAGES_PATH: (messages.chat_body, messages.MessagesAnswer),
    responses.RESPONSES_PATH: (responses.chat_body, responses.ResponsesAnswer),
}


def as_chat(target: str, body: bytes) -> tuple[str, bytes, str | None]:
    """The chat request (path, body) a request means, and the path of the wire
    format it came in (None: Chat Completions itself, or a path of no wire)."""
    path = target.split("?", 1)[0]
    wire = _WIRES.get(path)
    if wire is None:
        return target, body, None
    return CHAT_PATH, wire[0](body), path


def dressed(answer: Answer, wire: str | None) -> Answer:
    """``answer`` (a chat answer) as the wire format ``wire`` (a path) gives it."""
    if wire is None:
        return answer
    kind = _WIRES[wire][1]
    return kind(answer.status, answer.body, answer.delay, answer.headers, answer.stream)
