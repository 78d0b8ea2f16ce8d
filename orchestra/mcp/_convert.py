"""MCP tools and results in Orchestra's terms: flags from hints, results in words."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypedDict

import attrs

from .._exceptions import ConfigError, ToolError
from .._tools import Reconciled, ReconcileHook, Tool

__all__ = ["answer_of", "flags", "reconciled", "result_text", "tool_name"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool_name(name: str, server: str) -> str:
    """The server's tool name, if a chat-completions request can carry it."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"MCP server {server}: tool name {name!r} cannot be declared to a model "
            "(it must match [A-Za-z0-9_-]{1,64})"
        )
    return name


class Flags(TypedDict):
    """What a tool's hints say of it, as :class:`~orchestra.Tool` takes it."""

    read_only: bool
    needs_approval: bool
    idempotent: bool


def flags(annotations: Any) -> Flags:
    """``read_only``, ``needs_approval`` and ``idempotent`` from the tool's hints.

    No hints: a write that needs approval (the MCP defaults: not read-only,
    destructive). A read-only tool is idempotent and never needs approval.
    """
    read_only = bool(getattr(annotations, "read_only_hint", None))
    if read_only:
        return {"read_only": True, "needs_approval": False, "idempotent": True}
    destructive = getattr(annotations, "destructive_hint", None)
    idempotent = bool(getattr(annotations, "idempotent_hint", None))
    return {
        "read_only": False,
        "needs_approval": destructive is not False,
        "idempotent": idempotent,
    }


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as a tool result; an error result raises :class:`ToolError`."""
    parts = [_part(block) for block in result.content or ()]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False)]
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error and said nothing more")
    return text or "(the tool returned nothing)"


def _part(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown]"
    if kind == "resource":
        inner = block.resource
        return str(getattr(inner, "text", None) or f"[resource {inner.uri}, binary, not shown]")
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    return f"[{kind or 'unknown'} content, not shown]"


def describe(tool: Tool) -> str:
    """One line of ``orchestra mcp list``: the name and the flags we derived."""
    derived = [
        "read-only" if tool.read_only else "write",
        *(["needs approval"] if tool.needs_approval else []),
        *(["idempotent"] if tool.idempotent and not tool.read_only else []),
    ]
    return f"{tool.name}  ({', '.join(derived)})  {tool.description.splitlines()[0]}"


def reconciled(tools: list[Tool], server: Any) -> list[Tool]:
    """``tools`` with a reconcile hook on each write ``server.reconcile`` names: its
    companion tool is called with the write's arguments and answers JSON,
    ``{"outcome": "done", "result": ...}``, ``{"outcome": "not_done"}`` or
    ``{"outcome": "unknown", "why": ...}`` (anything else: unknown).

    Raises:
        ConfigError: a write or a companion the server does not offer.
    """
    offered = {t.name: t for t in tools}
    for write, check in server.reconcile.items():
        missing = [name for name in (write, check) if name not in offered]
        if missing:
            raise ConfigError(
                f"MCP server {server.label}: reconcile names {', '.join(missing)}, which it "
                f"does not offer (it offers {', '.join(sorted(offered))})"
            )
        offered[write] = attrs.evolve(offered[write], reconcile=_asking(offered[check]))
    return [offered[t.name] for t in tools]


def _asking(companion: Tool) -> ReconcileHook:
    async def hook(arguments: Mapping[str, Any], key: str) -> Reconciled:
        said = await companion.function(**arguments)
        return answer_of(str(said))

    return hook


def answer_of(text: str) -> Reconciled:
    """A companion tool's answer (see :func:`reconciled`)."""
    try:
        said = json.loads(text)
    except ValueError:
        return Reconciled.unknown(f"the check answered {text[:200]!r}, not JSON")
    outcome = said.get("outcome") if isinstance(said, dict) else None
    if outcome == "done":
        return Reconciled.done(str(said.get("result", "")))
    if outcome == "not_done":
        return Reconciled.not_done()
    why = said.get("why") if isinstance(said, dict) else None
    return Reconciled.unknown(str(why or f"the check answered {text[:200]!r}"))
