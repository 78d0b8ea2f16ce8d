"""Orchestra: run LLM agents as governed trees.

Every run has limits (turns, USD, deadline) carved from its parent's, spend
that rolls up the tree as it happens, a budget enforced before each model
call, one cancel scope per run, and exactly one exit, as data.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import Agent, ToolPolicy, detailed_errors, generic_errors
    from ._carving import Carving
    from ._catalog import catalog
    from ._core.budget import MIN_COMPLETION
    from ._core.stops import StopCondition
    from ._deps import RunContext
    from ._events import Event, EventRecord, EventSink, JsonlSink, fanout
    from ._exceptions import (
        ConfigError,
        LeaseError,
        LeaseLost,
        OrchestraError,
        PermanentToolError,
        ProviderError,
        ProviderHTTPError,
        ProviderReplyError,
        ProviderUnreachable,
        RunNotFound,
        SchemaVersionError,
        StateError,
        StoreError,
        StoreUnreachable,
        TokenizerError,
        ToolError,
        ToolOutcomeUnknown,
    )
    from ._instructions import CATALOG_INSTRUCTIONS
    from ._model.anthropic import AnthropicProvider
    from ._model.margin import FIRST_MARGIN, Calibration, Margin
    from ._model.provider import ChatReply, ChatRequest, OpenAIProvider, Provider
    from ._model.responses import ResponsesProvider
    from ._model.retry import RetryPolicy
    from ._money import Price, PriceTier
    from ._prices import PriceTable
    from ._result import RunResult
    from ._runner import RunHandle, Runner
    from ._settings import ModelSettings
    from ._state import (
        Approval,
        Interruption,
        InterruptionKind,
        LimitRaise,
        Limits,
        RunState,
        Status,
        Usage,
    )
    from ._stores.memory import MemoryStore, Store
    from ._stores.serde import state_from_dict, state_from_json, state_to_dict, state_to_json
    from ._stores.sqlite import SQLiteStore, default_store_path
    from ._telemetry.otel import OTelTracer, configure_otlp, flush_spans
    from ._telemetry.spans import RecordingTracerProvider, SpanSink
    from ._tools import Reconciled, Tool, ToolContext, tool
    from ._top_ups import TopUp, TopUps

__all__ = [
    "CATALOG_INSTRUCTIONS",
    "FIRST_MARGIN",
    "MIN_COMPLETION",
    "Agent",
    "AnthropicProvider",
    "Approval",
    "Calibration",
    "Carving",
    "ChatReply",
    "ChatRequest",
    "ConfigError",
    "Event",
    "EventRecord",
    "EventSink",
    "Interruption",
    "InterruptionKind",
    "JsonlSink",
    "LeaseError",
    "LeaseLost",
    "LimitRaise",
    "Limits",
    "Margin",
    "MemoryStore",
    "ModelSettings",
    "OTelTracer",
    "OpenAIProvider",
    "OrchestraError",
    "PermanentToolError",
    "Price",
    "PriceTable",
    "PriceTier",
    "Provider",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderReplyError",
    "ProviderUnreachable",
    "Reconciled",
    "RecordingTracerProvider",
    "ResponsesProvider",
    "RetryPolicy",
    "RunContext",
    "RunHandle",
    "RunNotFound",
    "RunResult",
    "RunState",
    "Runner",
    "SQLiteStore",
    "SchemaVersionError",
    "SpanSink",
    "StateError",
    "Status",
    "StopCondition",
    "Store",
    "StoreError",
    "StoreUnreachable",
    "TokenizerError",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutcomeUnknown",
    "ToolPolicy",
    "TopUp",
    "TopUps",
    "Usage",
    "catalog",
    "configure_otlp",
    "default_store_path",
    "detailed_errors",
    "fanout",
    "flush_spans",
    "generic_errors",
    "state_from_dict",
    "state_from_json",
    "state_to_dict",
    "state_to_json",
    "tool",
]

# Each public name is imported from its module on first use (PEP 562), so that
# ``import orchestra`` and commands such as ``orchestra --help`` or ``orchestra
# runs`` load neither the OpenTelemetry SDK, nor jsonschema, nor httpx.
_MODULE_OF: dict[str, str] = {
    name: module
    for module, names in {
        "_agent": ("Agent", "ToolPolicy", "detailed_errors", "generic_errors"),
        "_core.budget": ("MIN_COMPLETION",),
        "_catalog": ("catalog",),
        "_instructions": ("CATALOG_INSTRUCTIONS",),
        "_events": ("Event", "EventRecord", "EventSink", "JsonlSink", "fanout"),
        "_exceptions": (
            "ConfigError",
            "LeaseError",
            "LeaseLost",
            "OrchestraError",
            "PermanentToolError",
            "ProviderError",
            "ProviderHTTPError",
            "ProviderReplyError",
            "ProviderUnreachable",
            "RunNotFound",
            "SchemaVersionError",
            "StateError",
            "StoreError",
            "StoreUnreachable",
            "TokenizerError",
            "ToolError",
            "ToolOutcomeUnknown",
        ),
        "_model.margin": ("FIRST_MARGIN", "Calibration", "Margin"),
        "_stores.memory": ("MemoryStore", "Store"),
        "_money": ("Price", "PriceTier"),
        "_prices": ("PriceTable",),
        "_telemetry.otel": ("OTelTracer", "configure_otlp", "flush_spans"),
        "_model.provider": ("ChatReply", "ChatRequest", "OpenAIProvider", "Provider"),
        "_result": ("RunResult",),
        "_deps": ("RunContext",),
        "_model.retry": ("RetryPolicy",),
        "_carving": ("Carving",),
        "_top_ups": ("TopUp", "TopUps"),
        "_runner": ("RunHandle", "Runner"),
        "_stores.serde": ("state_from_dict", "state_from_json", "state_to_dict", "state_to_json"),
        "_telemetry.spans": ("RecordingTracerProvider", "SpanSink"),
        "_stores.sqlite": ("SQLiteStore", "default_store_path"),
        "_state": (
            "Approval",
            "Interruption",
            "InterruptionKind",
            "LimitRaise",
            "Limits",
            "RunState",
            "Status",
            "Usage",
        ),
        "_core.stops": ("StopCondition",),
        "_settings": ("ModelSettings",),
        "_model.anthropic": ("AnthropicProvider",),
        "_model.responses": ("ResponsesProvider",),
        "_tools": ("Reconciled", "Tool", "ToolContext", "tool"),
    }.items()
    for name in names
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # resolved once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
