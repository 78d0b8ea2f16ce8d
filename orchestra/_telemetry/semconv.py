"""Which GenAI convention names the spans carry: the current ones, or the previous.

By default spans follow the GenAI conventions of open-telemetry/semantic-conventions-genai
as of commit e9de14b on main (after PR #571, which merged the internal
``invoke_agent`` and ``invoke_workflow`` spans into one invocation span): the
registry the tests check every emitted ``gen_ai.*`` key against
(``tests/telemetry/data/gen_ai_registry.yaml``). Backends that still read the
names Orchestra emitted before (the conventions at commit 002c8a6) get them with
``ORCHESTRA_OTEL_SEMCONV=gen_ai_legacy`` (or ``OTelTracer(semconv=...)``):

- agent spans also carry ``gen_ai.agent.id`` (a hash of the agent's name and
  model: the conventions now keep it for hosted agents' stable ids) and
  ``gen_ai.provider.name`` (an inference span's attribute, not an invocation's);
- chat spans say ``gen_ai.usage.cache_creation.input_tokens`` instead of
  ``gen_ai.usage.cache_write.input_tokens``, carry ``gen_ai.agent.name`` and
  the call's cost as ``gen_ai.usage.cost`` (what Langfuse sums), and not
  ``gen_ai.request.stream``.

Cost stays under Orchestra's namespace either way (``orchestra.usage.cost.*``:
the GenAI cost attributes, PR #443, are a proposal).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

__all__ = [
    "CURRENT",
    "LEGACY",
    "SEMCONV_ENV",
    "agent_extras",
    "agent_id",
    "chat_extras",
    "semconv_from_env",
]

SEMCONV_ENV = "ORCHESTRA_OTEL_SEMCONV"
CURRENT = "gen_ai"
"""The GenAI conventions as the vendored registry names them (the default)."""
LEGACY = "gen_ai_legacy"
"""The names Orchestra emitted before (GenAI conventions at commit 002c8a6)."""
_CHOICES = (CURRENT, LEGACY)


def semconv_from_env(value: str | None = None) -> str:
    """``value``, else ``ORCHESTRA_OTEL_SEMCONV``, else :data:`CURRENT`; refuses others."""
    chosen = (value or os.environ.get(SEMCONV_ENV, "") or CURRENT).strip().lower()
    if chosen not in _CHOICES:
        raise ValueError(f"{SEMCONV_ENV}={chosen!r}: expected one of {', '.join(_CHOICES)}")
    return chosen


def agent_id(name: str, model: str) -> str:
    """Legacy ``gen_ai.agent.id``: the same for every run of one agent (name and model)."""
    return "agent_" + hashlib.sha256(f"{name}\0{model}".encode()).hexdigest()[:16]


def agent_extras(semconv: str, *, agent: str, model: str, provider: str) -> dict[str, Any]:
    """What an agent span carries beyond the names both conventions share: only
    the legacy names add some."""
    if semconv == LEGACY:
        return {"gen_ai.provider.name": provider, "gen_ai.agent.id": agent_id(agent, model)}
    return {}


def chat_extras(semconv: str, data: dict[str, Any], *, cost: float) -> dict[str, Any]:
    """What a chat span's reply adds that the two conventions name apart.

    ``data`` is the ``turn`` event's: its cache-write count (when reported),
    whether the reply was streamed.
    """
    legacy = semconv == LEGACY
    extras: dict[str, Any] = {}
    if data.get("cache_write_tokens"):
        key = "cache_creation" if legacy else "cache_write"
        extras[f"gen_ai.usage.{key}.input_tokens"] = int(data["cache_write_tokens"])
    if legacy:
        extras["gen_ai.usage.cost"] = cost
    elif data.get("streamed"):
        extras["gen_ai.request.stream"] = True
    return extras
