"""Trees from plain code: a blocking call that runs a trio function to its end.

``Runner.run_sync`` and ``Runner.resume_sync`` use :func:`blocking`. From a
plain script it is ``trio.run``. Where an asyncio loop is already running in
this thread (a notebook cell), ``trio.run`` cannot share the thread, so the
tree runs in a worker thread of its own and the call waits for it (the
notebook's loop is held meanwhile, as by any blocking call). Either way the
providers' pooled connections, which belong to that trio run, are closed when
it ends (the provider opens new ones on its next use).

Cancellation: Ctrl-C in a plain script interrupts the tree as trio does; in
the worker-thread case the wait is not interruptible (use ``orchestra.aio``
from asyncio code).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

from ._model.provider import Provider
from ._model.provider import release as release_pool

__all__ = ["blocking", "release"]

_T = TypeVar("_T")


def blocking(providers: Iterable[Provider], fn: Callable[[], Awaitable[_T]]) -> _T:
    """``await fn()`` in a trio run of its own; its value (or its error)."""
    used = list(providers)

    async def main() -> _T:
        try:
            return await fn()
        finally:
            # shielded: a cancelled tree still closes the connections this trio run
            # pooled (the next run_sync is another trio run, which cannot reuse them)
            with trio.CancelScope(shield=True):
                await release(used)

    if not _loop_running():
        return trio.run(main)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="orchestra") as pool:
        return pool.submit(trio.run, main).result()


async def release(providers: Iterable[Provider]) -> None:
    """Close the connections the providers pooled in the trio run that ends."""
    for provider in providers:
        await release_pool(provider)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
