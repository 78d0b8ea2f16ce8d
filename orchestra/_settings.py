"""Model settings: how a model samples its replies, per agent and per run.

A :class:`ModelSettings` value sits on an :class:`~orchestra.Agent` (every
run of the agent) and may be given per run (``Runner.run(..., settings=)``),
which overrides the agent's field by field. A run saves the settings it uses
in its state, so a resume, in any process or on a worker, asks the model the
same way. A child run uses its own agent's settings.

Fields left ``None`` are not sent: the server's defaults hold. Each provider
maps them to its wire format; ``extra_body`` is merged into the request body
as given (for a server's own parameters), except for the fields Orchestra
decides itself: the model, the messages, the tools, streaming and the reply's
token cap (``max_tokens``, which the budget gate lowers when the budget
cannot pay for it), refused here with a clear error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from ._exceptions import ConfigError

__all__ = ["RESERVED_BODY_FIELDS", "ModelSettings"]

MAX_STOP = 4
"""The most stop sequences a request may carry (OpenAI's limit)."""

RESERVED_BODY_FIELDS = frozenset(
    {
        "model",
        "messages",
        "input",
        "system",
        "tools",
        "tool_choice",
        "response_format",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "n",
    }
)
"""Body fields ``extra_body`` may not set: Orchestra sets them (``n`` would
multiply a reply's cost past what the budget gate reserved)."""


def _unit(name: str, low: float, high: float, *, open_low: bool = False) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: float | None) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        if value < low or value > high or (open_low and value == low):
            bound = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
            raise ConfigError(f"{name} must be in {bound}, got {value!r}")

    return check


def _seed(_: object, __: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"seed must be an integer, got {value!r}")


def _max_tokens(_: object, __: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"max_tokens must be an integer >= 1, got {value!r}")


def _stop(_: object, __: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if len(value) > MAX_STOP:
        raise ConfigError(f"stop takes at most {MAX_STOP} sequences, got {len(value)}")
    for sequence in value:
        if not isinstance(sequence, str) or not sequence:
            raise ConfigError(f"each stop sequence must be a non-empty string, got {sequence!r}")


def _extra(_: object, __: attrs.Attribute[Any], value: Mapping[str, Any]) -> None:
    reserved = sorted(set(value) & RESERVED_BODY_FIELDS)
    if reserved:
        raise ConfigError(
            f"extra_body cannot set {', '.join(reserved)}: Orchestra sets "
            f"{'it' if len(reserved) == 1 else 'them'} (a reply's cap is max_tokens, "
            "which the budget gate may lower)"
        )
    try:
        orjson.dumps(dict(value))
    except TypeError as exc:
        raise ConfigError(f"extra_body must be JSON: {exc}") from None


def _stops(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _body(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return {} if value is None else dict(value)


@attrs.frozen(kw_only=True)
class ModelSettings:
    """How the model samples a reply (None, or empty: the server's default).

    Attributes:
        temperature: sampling temperature, 0 to 2.
        top_p: nucleus sampling mass, above 0 up to 1.
        seed: asks for repeatable sampling, where the server supports it.
        max_tokens: the most tokens a reply may use (the agent's ``max_tokens``
            otherwise); the budget gate lowers it further when it must.
        parallel_tool_calls: whether one reply may make several tool calls
            (sent only with tools).
        stop: up to 4 sequences that end a reply.
        extra_body: more fields for the request body, as the server names them.

    Raises:
        ConfigError: a value out of range, or ``extra_body`` setting a field
            Orchestra sets (see :data:`RESERVED_BODY_FIELDS`) or not JSON.
    """

    temperature: float | None = attrs.field(default=None, validator=_unit("temperature", 0, 2))
    top_p: float | None = attrs.field(default=None, validator=_unit("top_p", 0, 1, open_low=True))
    seed: int | None = attrs.field(default=None, validator=_seed)
    max_tokens: int | None = attrs.field(default=None, validator=_max_tokens)
    parallel_tool_calls: bool | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=_stops, validator=_stop)
    extra_body: dict[str, Any] = attrs.field(factory=dict, converter=_body, validator=_extra)

    def over(self, base: ModelSettings) -> ModelSettings:
        """These settings over ``base``: each field set here wins; ``extra_body``
        is merged key by key (this one's keys win)."""
        fields = {
            f.name: getattr(self, f.name)
            for f in attrs.fields(ModelSettings)
            if f.name != "extra_body" and getattr(self, f.name) not in (None, ())
        }
        return attrs.evolve(base, **fields, extra_body={**base.extra_body, **self.extra_body})

    @property
    def empty(self) -> bool:
        """Nothing is set: every request goes with the server's defaults."""
        return self == ModelSettings()

    def saved(self) -> dict[str, Any]:
        """The fields that are set, as plain JSON (what a run's state keeps)."""
        return {
            f.name: list(value) if isinstance(value, tuple) else value
            for f in attrs.fields(ModelSettings)
            if (value := getattr(self, f.name)) not in (None, (), {})
        }

    def described(self) -> str:
        """One line for people: ``temperature 0, seed 7, stop ["END"]``; ``defaults``."""
        saved = self.saved()
        if not saved:
            return "defaults"
        return ", ".join(f"{k} {orjson.dumps(v).decode()}" for k, v in saved.items())
