"""Blocking database calls from trio: in worker threads, a few at a time.

psycopg's async API is asyncio-only, so the distributed side calls its sync
API through :func:`trio.to_thread.run_sync`. The PostgreSQL store keeps one
connection per thread; capping the threads that run such calls at once
(:data:`DB_THREADS`) caps this process's connections too (trio's thread
cache reuses idle threads).

Cancellation: as :func:`trio.to_thread.run_sync` (``abandon_on_cancel``
False): a call that started runs to its end (one short transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from .._exceptions import StoreUnreachable

__all__ = ["DB_THREADS", "StepAbandoned", "in_thread"]


class StepAbandoned(BaseException):
    """The database went away in the middle of a run's step on a worker.

    The step stops where it is and saves nothing more (the run's saved state
    stands: it is as of the last completed save) and is tried again once the
    database is back. A ``BaseException`` so that nothing on the way (a tool's
    error handling, a run's internal-error exit) turns an outage into the
    run's outcome.
    """


DB_THREADS = 8
"""Most blocking database calls at once, per trio run."""

_T = TypeVar("_T")
_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("orchestra_db")


async def in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread, at most :data:`DB_THREADS` at once.

    Raises:
        StepAbandoned: the database could not be reached.
    """
    try:
        limiter = _limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(DB_THREADS)
        _limiter.set(limiter)
    try:
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
    except StoreUnreachable as exc:
        raise StepAbandoned(str(exc)) from exc
