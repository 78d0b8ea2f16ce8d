"""A chat-completions request as the scripted provider reads it: checked, or refused
with the error an OpenAI endpoint would send."""

from __future__ import annotations

import typing
from collections.abc import Container, Mapping
from typing import Any, Final

import attrs

__all__ = ["Request", "ScriptError", "error_body", "invalid", "parse"]

_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool"})


class ScriptError(Exception):
    """A request the scripted provider refuses, with its HTTP status and error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        """The OpenAI-shaped error object sent back for this error."""
        return error_body(self.message, self.code)


def error_body(message: str, code: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def invalid(code: str, message: str) -> ScriptError:
    return ScriptError(400, code, message)


@attrs.frozen
class Request:
    """The fields of a chat-completions request the scripts read, checked."""

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: list[Any] | None
    limit: int | None
    legacy_cap: bool = False
    """The request capped the reply with ``max_tokens`` (not ``max_completion_tokens``)."""
    response_format: Mapping[str, Any] | None = None
    """The request's ``response_format``, checked (None if it sent none)."""

    @property
    def schema(self) -> Mapping[str, Any] | None:
        """The JSON schema the answer must fit (``{"type": "object"}`` for
        ``json_object``), or None for prose."""
        given = self.response_format or {}
        if given.get("type") == "json_object":
            return {"type": "object"}
        if given.get("type") != "json_schema":
            return None
        return typing.cast(Mapping[str, Any], given["json_schema"]["schema"])


def parse(request: object, models: Container[str]) -> Request:
    """The checked fields of a decoded request body whose model is one of ``models``.

    Raises:
        ScriptError: the request is malformed (400) or names no such model (404).
    """
    if not isinstance(request, Mapping):
        raise invalid("invalid_request", "the request body must be a JSON object")
    if not isinstance(request.get("stream", False), bool):
        raise invalid("invalid_stream", "'stream' must be a boolean")
    model, messages = request.get("model"), _messages(request.get("messages"))
    tools, limit = _tools(request.get("tools")), _limit(request)
    if not isinstance(model, str):
        raise invalid("missing_model", "'model' must be a string naming a scenario")
    if model not in models:
        raise ScriptError(404, "model_not_found", f"The model `{model}` does not exist.")
    legacy = request.get("max_tokens") is not None
    return Request(model, messages, tools, limit, legacy, _response_format(request))


def _messages(value: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise invalid("invalid_messages", "'messages' must be a non-empty array")
    for i, message in enumerate(value):
        _check_message(i, message)
    return tuple(value)


def _check_message(i: int, message: object) -> None:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise invalid("invalid_messages", f"messages[{i}] must be an object with a 'role'")
    if message["role"] not in _ROLES:
        raise invalid("invalid_messages", f"messages[{i}].role must be one of {sorted(_ROLES)}")
    if not isinstance(message.get("content"), str | list | None):
        raise invalid("invalid_messages", f"messages[{i}].content must be a string or array")
    if not _valid_calls(message.get("tool_calls")):
        raise invalid("invalid_messages", f"messages[{i}].tool_calls is malformed")


def _valid_calls(calls: object) -> bool:
    if calls is None:
        return True
    return isinstance(calls, list) and all(
        isinstance(c, Mapping) and isinstance(c.get("function"), Mapping) for c in calls
    )


def _tools(value: object) -> list[Any] | None:
    if value is not None and not isinstance(value, list):
        raise invalid("invalid_tools", "'tools' must be an array")
    return value


def _limit(request: Mapping[str, Any]) -> int | None:
    keys = ("max_completion_tokens", "max_tokens")
    limits = [request[k] for k in keys if request.get(k) is not None]
    for value in limits:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid("invalid_max_tokens", "max_tokens must be an integer of at least 1")
    return min(limits, default=None)


def _response_format(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The request's ``response_format``, checked as OpenAI does (None if absent)."""
    value = request.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise invalid(
            "invalid_response_format",
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
        )
    if kind != "json_schema":
        return typing.cast(Mapping[str, Any], value)
    spec = value.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if not isinstance(schema, Mapping) or not isinstance(spec.get("name"), str):
        raise invalid(
            "invalid_response_format",
            "'response_format.json_schema' must have a 'name' and a 'schema' object",
        )
    return typing.cast(Mapping[str, Any], value)
