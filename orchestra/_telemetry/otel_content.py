"""Content on spans, when captured: the GenAI conventions' shapes, redacted and bounded.

Off by default, as the conventions ask: :class:`~orchestra.OTelTracer` records
contents only with ``capture_content=True``, the CLI's ``--capture-content``,
or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (see
:func:`capture_from_env`).

What is recorded, as JSON strings (span attributes cannot hold structured
values yet, which the conventions allow for):

- ``gen_ai.system_instructions``: the system messages, as a list of parts;
- ``gen_ai.input.messages``: every other message sent, in order, each
  ``{"role", "parts"}`` with ``text``, ``tool_call`` and
  ``tool_call_response`` parts;
- ``gen_ai.output.messages``: the reply, with its ``finish_reason``;
- ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` on tool spans.

Every string is redacted (:func:`orchestra._redact.redact`) and cut to
:data:`MAX_TEXT` characters; a message list longer than :data:`MAX_JSON`
characters loses its oldest messages first (the span says how many in
``orchestra.content.dropped_messages``), so one span stays a bounded size
whatever the transcript.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._redact import redact

__all__ = [
    "CAPTURE_ENV",
    "MAX_JSON",
    "MAX_TEXT",
    "capture_from_env",
    "input_attributes",
    "output_messages",
    "system_instructions",
    "text",
    "tool_arguments",
]

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
MAX_TEXT = 4_000
"""The most characters kept of one string: a message's content, a tool's result."""
MAX_JSON = 64_000
"""The most characters of one message list (the oldest messages are dropped first)."""
_TRUE = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
_SYSTEM_ROLES = frozenset({"system", "developer"})


def capture_from_env() -> bool:
    """Whether :data:`CAPTURE_ENV` asks for contents on spans.

    ``true`` (any case), ``1``, ``yes``, ``on``, and the values the OpenTelemetry
    GenAI instrumentations use for spans (``SPAN_ONLY``, ``SPAN_AND_EVENT``)
    switch it on; anything else, or nothing, leaves it off.
    """
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in _TRUE


def text(value: Any) -> str:
    """``value`` as text, redacted and cut to :data:`MAX_TEXT` characters."""
    raw = value if isinstance(value, str) else json.dumps(value, default=str)
    clean = redact(raw[: MAX_TEXT * 8])  # redacted before it is cut: no half secret left
    if len(clean) <= MAX_TEXT and len(raw) <= MAX_TEXT * 8:
        return clean
    return clean[:MAX_TEXT] + "…"


def _data(value: Any) -> Any:
    """``value`` with every string in it through :func:`text` (JSON-like data walked)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return {str(k): _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_arguments(arguments: Any) -> str:
    """A call's arguments as a JSON object (text the model wrote that is not JSON: as a
    JSON string)."""
    return _dumps(_arguments(arguments))


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return text(arguments)
    return _data(arguments)


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat-completions message's content and tool calls as the conventions' parts."""
    content = message.get("content")
    if message.get("role") == "tool":
        response = text(content if content is not None else "")
        return [
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": response}
        ]
    parts: list[dict[str, Any]] = []
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": text(content)})
    elif isinstance(content, list):  # content parts: text kept, others named by type
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append({"type": "text", "content": text(part.get("text", ""))})
            elif isinstance(part, Mapping):
                parts.append({"type": str(part.get("type", "unknown"))})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": _arguments(function.get("arguments")),
            }
        )
    return parts


def system_instructions(messages: Iterable[Mapping[str, Any]]) -> str | None:
    """``gen_ai.system_instructions``: the parts of the system messages, or None."""
    parts = [p for m in messages if m.get("role") in _SYSTEM_ROLES for p in _parts(m)]
    return _dumps(parts) if parts else None


def input_attributes(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a request."""
    chat = [
        {"role": m.get("role"), "parts": _parts(m)}
        for m in messages
        if m.get("role") not in _SYSTEM_ROLES
    ]
    encoded = [_dumps(m) for m in chat]
    size, dropped = sum(map(len, encoded)) + len(encoded) + 1, 0
    while size > MAX_JSON and dropped < len(encoded) - 1:  # the oldest go first
        size -= len(encoded[dropped]) + 1
        dropped += 1
    attributes: dict[str, Any] = {"gen_ai.input.messages": f"[{','.join(encoded[dropped:])}]"}
    system = system_instructions(messages)
    if system is not None:
        attributes["gen_ai.system_instructions"] = system
    if dropped:
        attributes["orchestra.content.dropped_messages"] = dropped
    return attributes


def output_messages(message: Mapping[str, Any], finish_reason: str) -> str:
    """``gen_ai.output.messages``: the one reply, with why it ended."""
    reply = {"role": "assistant", "parts": _parts(message), "finish_reason": finish_reason}
    return _dumps([reply])
