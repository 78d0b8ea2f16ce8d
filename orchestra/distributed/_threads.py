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

__all__ = ["DB_THREADS", "in_thread"]

DB_THREADS = 8
"""Most blocking database calls at once, per trio run."""

_T = TypeVar("_T")
_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("orchestra_db")


async def in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread, at most :data:`DB_THREADS` at once."""
    try:
        limiter = _limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(DB_THREADS)
        _limiter.set(limiter)
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
