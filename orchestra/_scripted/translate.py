"""What the scripted provider's other wire formats share when they are read into
a chat request (see :mod:`.wires`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["chat_head", "decoded_object"]


def decoded_object(body: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object; None if it is not one (it is then passed
    on as it is, for the chat side to refuse as it would)."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    return request if isinstance(request, dict) else None


def chat_head(
    request: Mapping[str, Any], messages: list[dict[str, Any]], cap: Any
) -> dict[str, Any]:
    """The chat request's model, messages, cap and streaming (usage included)."""
    chat: dict[str, Any] = {
        "model": request.get("model"),
        "messages": messages,
        "max_completion_tokens": cap,
        "stream": bool(request.get("stream", False)),
    }
    if chat["stream"]:
        chat["stream_options"] = {"include_usage": True}
    return chat
