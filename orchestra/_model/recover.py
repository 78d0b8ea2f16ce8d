"""Tool calls a model wrote as text, turned back into tool calls (opt-in).

Small local models often answer a request that declares tools with the call
written into ``content`` instead of ``tool_calls``: as bare JSON
(``{"name": "read_file", "arguments": {...}}``, or a list of such objects),
in a fenced block (```` ```json ... ``` ````), or between ``<tool_call>``
tags as Qwen and Hermes chat templates do, possibly several.
:func:`recover_tool_calls` reads those shapes back. It is all or nothing: a
message becomes tool calls only if every call found names a declared tool and
is well-formed JSON; anything else stays prose, untouched. Bare and fenced
JSON must be the whole content; tagged calls may have text around them (it is
dropped, as the model's own reasoning). Each call gets a fresh unique id and
its arguments as a JSON string, and the content becomes None.

Used by ``OpenAIProvider(recover_tool_calls=True)``.

:func:`cut_call` is for a reply cut at ``max_tokens`` while the model was
writing a call as text (llama.cpp returns such a call as content, since it
cannot parse it): it becomes one incomplete call, which the loop answers as
cut and never runs, instead of the fragment being taken for an answer.
``OpenAIProvider`` applies it always.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._storable import MAX_DEPTH as MAX_ARGUMENT_DEPTH
from .._storable import json_depth

__all__ = ["cut_call", "declared_names", "recover_tool_calls", "written_call"]

_TAGGED = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCED = re.compile(r"```[ \t]*(?:json|JSON|tool_call)?[ \t]*\n?(.*?)```", re.DOTALL)
_CALL_OPENERS = ("```", "<tool_call>", "{", "[")
_CUT_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_CUT_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def declared_names(tools: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The function names of a request's tool declarations."""
    names = (t.get("function", {}).get("name") for t in tools if isinstance(t, Mapping))
    return frozenset(n for n in names if isinstance(n, str))


def recover_tool_calls(message: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any] | None:
    """``message`` with the tool calls written in its content, or None if it has none.

    ``names`` are the tools the request declared; a call to any other name, or
    text that is not JSON, leaves the message as it is (None is returned).
    """
    content = message.get("content")
    if not names or not isinstance(content, str) or message.get("tool_calls"):
        return None
    calls = _calls(_blocks(content.strip()), names)
    if not calls:
        return None
    return {**message, "content": None, "tool_calls": calls}


def cut_call(message: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any] | None:
    """``message``, cut at max_tokens while writing a call as text, as that one cut call.

    Only when the content opens a call (a fence, a ``<tool_call>`` tag or a
    JSON object or list) and has already named a declared tool; the text
    after ``"arguments":`` (possibly nothing) becomes the call's arguments,
    unparsed. None for anything else, which stays prose.
    """
    content = message.get("content")
    if not names or not isinstance(content, str) or message.get("tool_calls"):
        return None
    text = content.strip()
    named = _CUT_NAME.search(text) if text.startswith(_CALL_OPENERS) else None
    if named is None or named[1] not in names:
        return None
    arguments = _CUT_ARGUMENTS.search(text, named.end())
    cut = {"name": named[1], "arguments": text[arguments.end() :] if arguments else ""}
    return {**message, "content": None, "tool_calls": [_with_id(cut)]}


_NAMED = re.compile(r'["\']?(?:name|function)["\']?\s*[:=]\s*["\']([A-Za-z0-9_.-]+)["\']')


def written_call(content: str, names: frozenset[str]) -> str | None:
    """The declared tool a prose answer seems to call in writing, if any.

    An answer that names a declared tool as a call's ``"name"`` (JSON, a
    fenced block, ``<tool_call>`` tags, ``name='read_file'``...) is a call
    the endpoint did not parse and nothing ran, not an answer.
    """
    for match in _NAMED.finditer(content):
        if match[1] in names:
            return match[1]
    return None


def _with_id(function: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def _blocks(content: str) -> list[str]:
    """The JSON texts that may hold calls: tagged blocks, fenced blocks, or the whole."""
    tagged = _TAGGED.findall(content)
    if tagged:
        return tagged
    fenced = list(_FENCED.finditer(content))
    if fenced and not _FENCED.sub("", content).strip():
        return [m[1] for m in fenced]
    return [content] if content.startswith(("{", "[")) else []


def _calls(blocks: Sequence[str], names: frozenset[str]) -> list[dict[str, Any]]:
    """Every call of every block, or [] if any block is not a call to a declared tool."""
    found: list[dict[str, Any]] = []
    for block in blocks:
        parsed = _json(block)
        items = parsed if isinstance(parsed, list) else [parsed]
        calls = [_call(item, names) for item in items]
        if not calls or any(c is None for c in calls):
            return []
        found.extend(c for c in calls if c is not None)
    return found


def _json(text: str) -> Any:
    """``text`` decoded as JSON, or None if it is not JSON (or nests too deeply)."""
    if json_depth(text) > MAX_ARGUMENT_DEPTH + 2:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(item: Any, names: frozenset[str]) -> dict[str, Any] | None:
    """A chat-completions tool call from ``{"name": ..., "arguments": ...}``, if it
    names a declared tool (``"parameters"`` for ``"arguments"`` and an object
    nested in ``"function"`` are read too). Arguments given as a string are
    kept as they are: the dispatcher answers bad ones in words."""
    if isinstance(item, Mapping) and isinstance(item.get("function"), Mapping):
        item = item["function"]
    if not isinstance(item, Mapping) or item.get("name") not in names:
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if not isinstance(arguments, str | Mapping):
        return None
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return _with_id({"name": item["name"], "arguments": text})
