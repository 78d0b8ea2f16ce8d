"""Blocking database calls from trio: in worker threads, a few at a time.

psycopg's async API is asyncio-only, so the distributed side calls its sync
API through :func:`trio.to_thread.run_sync`. The PostgreSQL store keeps one
connection per thread; capping the threads that run such calls at once
(:data:`DB_THREADS`) caps this process's connections too (trio's thread
cache reuses idle threads).

Cancellation: as :func:`trio.to_thread.run_sync` (``abandon_on_cancel``
False): a call that started runs to its end (one short transaction).

A call that finds the database away abandons the step it is part of
(:func:`stepping`: one run's step, with every task it starts), and only that
step: the steps of other runs of the same tree, executing on the same worker
at the same time, go on saving.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TypeVar

import trio

from .._exceptions import StoreUnreachable

__all__ = [
    "DB_THREADS",
    "StepAbandoned",
    "abandon_step",
    "attempt_in_thread",
    "in_thread",
    "step_abandoned",
    "stepping",
]


class StepAbandoned(BaseException):
    """The database went away in the middle of a run's step on a worker.

    The step stops where it is and saves nothing more (the run's saved state
    stands: it is as of the last completed save) and is tried again once the
    database is back. A ``BaseException`` so that nothing on the way (a tool's
    error handling, a run's internal-error exit) turns an outage into the
    run's outcome.
    """


class _Step:
    """One step of one run on this worker; ``abandoned`` once the database failed it."""

    __slots__ = ("abandoned",)

    def __init__(self) -> None:
        self.abandoned = False


_step: contextvars.ContextVar[_Step | None] = contextvars.ContextVar(
    "orchestra_worker_step", default=None
)
"""The step the current task belongs to (a trio task, or a thread of
``trio.to_thread``, gets it from the task that started it)."""


@contextlib.contextmanager
def stepping() -> Iterator[None]:
    """The block (and every task it starts) is one step of one run: a database
    outage in it abandons this step alone."""
    token = _step.set(_Step())
    try:
        yield
    finally:
        _step.reset(token)


def abandon_step() -> None:
    """Save nothing more in the current step (the database failed it); outside
    a step, nothing to do."""
    step = _step.get()
    if step is not None:
        step.abandoned = True


def step_abandoned() -> bool:
    """Whether the current step was abandoned (False outside a step)."""
    step = _step.get()
    return step is not None and step.abandoned


DB_THREADS = 8
"""Most blocking database calls at once, per trio run."""

_T = TypeVar("_T")
_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("orchestra_db")


async def in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread, at most :data:`DB_THREADS` at once.

    Raises:
        StepAbandoned: the database could not be reached (the current step,
            if any, is abandoned).
    """
    try:
        return await attempt_in_thread(fn, *args)
    except StepAbandoned:
        abandon_step()
        raise


async def attempt_in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """As :func:`in_thread`, but an unreachable database leaves the current step
    as it was: for a call that is tried again until it gets through.

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
