"""A tool's call to another service, within a share of its run's budget.

:func:`remote` holds ``usd`` (at most what the run and its ancestors have left)
against the run and every ancestor, as a model call's reservation is held, so
no sibling spends it meanwhile; yields the :class:`~orchestra.wire.RemoteCall`
whose headers carry the carve; and when the block ends gives the hold back and
charges what the service reported (all it held if it reported nothing: the
call failed or was cancelled, and the service may have spent it). Through the
runner's ledger when it has one (workers), as every budget decision is.

Cancellation: the hold is given back and charged in a shielded scope, so a
cancelled call is charged too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator

import trio

from .._exceptions import ToolError
from .._money import from_usd, to_usd
from .._state import Usage
from ..wire import RemoteCall, WireLimits
from .run import LiveRun

__all__ = ["remote"]


@contextlib.asynccontextmanager
async def remote(run: LiveRun, call_id: str, usd: float) -> AsyncIterator[RemoteCall]:
    """Hold up to ``usd`` of ``run``'s budget for a call to another service.

    Raises:
        ToolError: ``usd`` is not a positive number, or nothing is left to hold.
    """
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not usd > 0:
        raise ToolError(f"remote(usd=...) takes a positive amount, got {usd!r}")
    pico = await run.decided(lambda: _hold(run, from_usd(float(usd))))
    call = RemoteCall(limits=_carve(run, pico))
    run.emit("remote_call", call_id=call_id, held_usd=to_usd(pico))
    try:
        yield call
    finally:
        spent = pico if call.spent_usd is None else from_usd(call.spent_usd)
        with trio.CancelScope(shield=True):  # a cancelled call is charged too
            await run.decided(lambda: _settle(run, pico, spent))
        said = call.spent_usd is not None
        run.emit("remote_spend", call_id=call_id, cost_usd=to_usd(spent), reported=said)


def _hold(run: LiveRun, wanted: int) -> int:
    left = run.available_pico()
    pico = wanted if left is None else min(wanted, max(left, 0))
    if pico <= 0:
        raise ToolError("no budget is left to pass on to another service")
    run.reserve(pico, 0)
    return pico


def _settle(run: LiveRun, pico: int, spent: int) -> None:
    run.reserve(-pico, 0)
    run.charge(Usage(cost_pico=spent))


def _carve(run: LiveRun, pico: int) -> WireLimits:
    """The carve a service is given: the budget held, the run's deadline (wall clock)."""
    left_s = run.deadline - trio.current_time()
    deadline = None if math.isinf(left_s) else run.runner.now() + left_s
    return WireLimits(budget_usd=to_usd(pico), deadline=deadline, caller=run.state.run_id)
