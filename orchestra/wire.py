"""Limits across the wire: a child that is another service runs within its carve.

Inside one tree a child's limits are carved from what its parent has left. When
a tool calls another agent service instead (over HTTP, or MCP), the same can
hold across the wire:

- the caller's tool holds a share of its run's budget for the call
  (``async with ctx.remote(usd=0.01) as call:``), so no sibling can spend it
  meanwhile, and sends ``call.headers()`` with its request: the
  :data:`HEADER` header, a JSON object with the carved budget (USD), the
  caller's deadline (wall-clock seconds since the epoch) and its run id;
- the service reads it (:meth:`WireLimits.from_headers`) and runs its root
  within it (:meth:`WireLimits.within`: the tighter of its own limits and the
  carve), then says what its tree spent in its reply; the caller's tool
  reports that (``call.report(usd)``) and the run is charged it (what was held
  is given back). A call whose spend is never reported (the service failed, the
  call was cancelled) is charged all it held, as a lost model call is;
- a cancel of the caller cancels its tool, which closes the request: a service
  that watches for the client going away (:func:`cancel_on_disconnect`, for an
  ASGI app) cancels its tree at once. The connection is the cancel link.

Bad input is refused with one line (:class:`~orchestra.ConfigError`), never
half-read: a header that is not a JSON object of the known fields, a budget
that is not a non-negative number, a deadline that is not a time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from ._exceptions import ConfigError
from ._state import Limits

__all__ = ["HEADER", "RemoteCall", "WireLimits", "cancel_on_disconnect"]

HEADER = "Orchestra-Limits"
"""The request header that carries a caller's carve (a JSON object)."""

_FIELDS = {"budget_usd", "deadline", "caller"}


def _number(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{HEADER}: {name} must be a finite number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{HEADER}: {name} must not be negative, got {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class WireLimits:
    """A caller's carve for a call to another service.

    Attributes:
        budget_usd: the most the callee's whole tree may spend (None: no budget).
        deadline: when the callee must have stopped, in wall-clock seconds
            since the epoch (None: no deadline).
        caller: the calling run's id (for the callee's traces and metadata).
    """

    budget_usd: float | None = None
    deadline: float | None = None
    caller: str = ""

    def headers(self) -> dict[str, str]:
        """The request headers that carry this carve."""
        body = {"budget_usd": self.budget_usd, "deadline": self.deadline, "caller": self.caller}
        return {HEADER: json.dumps(body, separators=(",", ":"))}

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> WireLimits | None:
        """The carve a request carries (None: it carries none).

        Raises:
            ConfigError: the header is there but is not a carve, in one line.
        """
        raw = next((v for k, v in headers.items() if k.lower() == HEADER.lower()), None)
        if raw is None:
            return None
        try:
            body: Any = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"{HEADER}: not JSON ({exc})") from None
        if not isinstance(body, dict) or set(body) - _FIELDS:
            raise ConfigError(f"{HEADER}: a JSON object of {sorted(_FIELDS)} is expected")
        caller = body.get("caller", "")
        if not isinstance(caller, str) or len(caller) > 200:
            raise ConfigError(f"{HEADER}: caller must be a run id")
        return cls(
            budget_usd=_number(body.get("budget_usd"), "budget_usd"),
            deadline=_number(body.get("deadline"), "deadline"),
            caller=caller,
        )

    def within(self, own: Limits) -> Limits:
        """``own`` limits tightened to this carve (each bound the smaller of the two)."""
        return attrs.evolve(
            own,
            max_budget_usd=_least(own.max_budget_usd, self.budget_usd),
            deadline=_least(own.deadline, self.deadline),
        )


@attrs.define(eq=False)
class RemoteCall:
    """One call to another service, within a carve its tool holds
    (``async with ctx.remote(usd=...) as call``).

    Attributes:
        limits: the carve (send :meth:`headers` with the request).
        spent_usd: what the service said its tree spent (None: not said yet).
    """

    limits: WireLimits
    spent_usd: float | None = None

    def headers(self) -> dict[str, str]:
        """The request headers that carry the carve."""
        return self.limits.headers()

    def report(self, usd: float) -> None:
        """What the service's tree spent, from its reply: the run is charged that
        (once the ``async with`` block ends) instead of all it held.

        Raises:
            ConfigError: not a non-negative number.
        """
        self.spent_usd = _number(usd, "the reported spend")


def _least(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


Receive = Callable[[], Awaitable[Mapping[str, Any]]]


async def cancel_on_disconnect(receive: Receive, cancel: Callable[[], object]) -> None:
    """Call ``cancel()`` once the ASGI client has gone away (its request closed).

    Run it beside the work of a request whose body was read already; the
    caller cancels it (e.g. a nursery's scope) once the work is done.
    Cancellation: returns only after a disconnect; a checkpoint throughout.
    """
    while (await receive()).get("type") != "http.disconnect":
        pass
    cancel()
