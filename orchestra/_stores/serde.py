"""Run state to JSON and back, losslessly, with a schema version check.

Saved reasons and errors (the run's, its interruption's) are redacted of
secrets on the way out (see :mod:`orchestra._redact`); transcripts are passed
through as they are.
"""

from __future__ import annotations

from typing import Any

import cattrs
import orjson

from .._exceptions import SchemaVersionError, StateError
from .._redact import redact
from .._settings import ModelSettings
from .._state import SCHEMA_VERSION, Interruption, Limits, RunState, Usage

__all__ = ["state_from_dict", "state_from_json", "state_to_dict", "state_to_json"]

_converter = cattrs.Converter(forbid_extra_keys=True)
# Transcripts are JSON already: pass them through instead of walking every message.
_converter.register_unstructure_hook_func(lambda t: t == list[dict[str, Any]], lambda value: value)


_converter.register_unstructure_hook(Limits, Limits.saved)
_converter.register_unstructure_hook(Usage, Usage.to_dict)
# a budget request's own fields only when set: older versions read every other one
_converter.register_unstructure_hook(Interruption, Interruption.to_dict)
_converter.register_unstructure_hook(ModelSettings, ModelSettings.saved)
_converter.register_structure_hook(ModelSettings, lambda data, _: ModelSettings(**data))


def state_to_dict(state: RunState) -> dict[str, Any]:
    """The state as plain JSON-able data (reasons and errors redacted)."""
    data: dict[str, Any] = _converter.unstructure(state)
    for key in ("winding_down", "settings"):  # saved only when set: older versions read it
        if not data.get(key):
            data.pop(key, None)
    _redact_fields(data)
    if isinstance(data.get("interruption"), dict):
        _redact_fields(data["interruption"])
    return data


def _redact_fields(holder: dict[str, Any]) -> None:
    """Redact ``holder``'s ``reason`` and ``error`` strings in place."""
    for key in ("reason", "error"):
        if isinstance(holder.get(key), str):
            holder[key] = redact(holder[key])


def state_to_json(state: RunState) -> str:
    """The state as a JSON document."""
    return orjson.dumps(state_to_dict(state)).decode()


def state_from_dict(data: Any) -> RunState:
    """Load a state saved by :func:`state_to_dict`.

    Raises:
        SchemaVersionError: it was saved by a schema version this code does not know.
        StateError: it is not a run state.
    """
    if not isinstance(data, dict):
        raise StateError(f"a run state is a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"run state has schema version {version!r}; this Orchestra reads version "
            f"{SCHEMA_VERSION} only (upgrade Orchestra, or migrate the state)"
        )
    try:
        return _converter.structure(data, RunState)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise StateError(f"invalid run state: {detail}") from exc


def state_from_json(text: str | bytes) -> RunState:
    """Load a state saved by :func:`state_to_json`."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise StateError(f"run state is not valid JSON: {exc}") from exc
    return state_from_dict(data)
