"""Blocking database calls from trio: in worker threads, a few at a time.

(Saves, and budget decisions whose rows are free, are made on the trio
thread instead: one short transaction that waits on no other worker.)

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

A step also holds the worker's claim on its run (a fence, see
:mod:`orchestra._stores.fence`): every save and ledger decision of the step
is fenced by it. A step whose claim was taken over (its worker was declared
dead while it stalled, or a cancel stopped the run in the database) is
*superseded*: its cancel scope is cancelled and it saves nothing more.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import trio

from .._exceptions import StoreUnreachable
from .._stores.fence import Fence

__all__ = [
    "DB_THREADS",
    "Step",
    "StepAbandoned",
    "abandon_step",
    "attempt_here",
    "attempt_in_thread",
    "here",
    "hold",
    "in_thread",
    "step_abandoned",
    "step_fence",
    "step_saved",
    "step_superseded",
    "stepping",
    "supersede_step",
    "until_reachable",
    "while_away",
]


class StepAbandoned(BaseException):
    """The database went away in the middle of a run's step on a worker.

    The step stops where it is and saves nothing more (the run's saved state
    stands: it is as of the last completed save) and is tried again once the
    database is back. A ``BaseException`` so that nothing on the way (a tool's
    error handling, a run's internal-error exit) turns an outage into the
    run's outcome.
    """


class Step:
    """One step of one run on this worker: ``abandoned`` once the database failed it,
    ``superseded`` once its claim (``fence``) was taken over; ``scope`` stops it;
    ``saved``: whether a save of its run got through (it covers all of the
    run's steps it executes, each saved before the next)."""

    __slots__ = ("abandoned", "fence", "saved", "scope", "superseded")

    def __init__(self) -> None:
        self.abandoned = False
        self.superseded = False
        self.saved = False
        self.fence: Fence | None = None
        self.scope = trio.CancelScope()

    def abandon_now(self) -> None:
        """Stop the step where it is, saving nothing more (on the trio thread;
        not a checkpoint): its run is taken up again later, from its saved state."""
        self.abandoned = True
        self.scope.cancel()


_step: contextvars.ContextVar[Step | None] = contextvars.ContextVar(
    "orchestra_worker_step", default=None
)
"""The step the current task belongs to (a trio task, or a thread of
``trio.to_thread``, gets it from the task that started it)."""


@contextlib.contextmanager
def stepping() -> Iterator[Step]:
    """The block (and every task it starts) is one step of one run: a database
    outage in it abandons this step alone. Yields the step, whose ``scope`` is
    to be entered around the step's work (:func:`supersede_step` cancels it)."""
    step = Step()
    token = _step.set(step)
    try:
        yield step
    finally:
        _step.reset(token)


def hold(fence: Fence) -> None:
    """The current step executes under ``fence`` (its worker's claim on its run)."""
    step = _step.get()
    if step is not None:
        step.fence = fence


def step_saved() -> None:
    """A save of the current step got through; outside a step, nothing to do."""
    step = _step.get()
    if step is not None:
        step.saved = True


def step_fence() -> Fence | None:
    """The claim the current step holds (None outside a step or before its claim)."""
    step = _step.get()
    return None if step is None else step.fence


def supersede_step() -> None:
    """The current step lost its claim: it saves nothing more and its scope is
    cancelled (not a checkpoint); outside a step, nothing to do."""
    step = _step.get()
    if step is not None:
        step.superseded = True
        step.scope.cancel()


def step_superseded() -> bool:
    """Whether the current step lost its claim (False outside a step)."""
    step = _step.get()
    return step is not None and step.superseded


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


def here(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` on the calling thread (the trio thread: blocking, as a save
    is), for a short transaction that waits on no other worker's lock.

    Raises:
        StepAbandoned: the database could not be reached (the current step,
            if any, is abandoned).
    """
    try:
        return attempt_here(fn, *args)
    except StepAbandoned:
        abandon_step()
        raise


def attempt_here(fn: Callable[..., _T], *args: object) -> _T:
    """As :func:`here`, but an unreachable database leaves the current step as it
    was (the twin of :func:`attempt_in_thread`).

    Raises:
        StepAbandoned: the database could not be reached.
    """
    try:
        return fn(*args)
    except StoreUnreachable as exc:
        raise StepAbandoned(str(exc)) from exc


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


async def until_reachable(
    fn: Callable[[], _T],
    *,
    patience_s: float,
    poll_s: float,
    on_away: Callable[[StoreUnreachable], None],
) -> _T:
    """``fn()`` in a worker thread, tried again every ``poll_s`` while the
    database cannot be reached, for up to ``patience_s``; ``on_away`` is told
    the first failure (once). For a process that starts before its database.

    Raises:
        StoreUnreachable: the database was still away after ``patience_s``.
    """
    deadline = trio.current_time() + patience_s
    told = False
    while True:
        try:
            return await trio.to_thread.run_sync(fn)
        except StoreUnreachable as exc:
            if trio.current_time() + poll_s > deadline:
                raise
            if not told:
                on_away(exc)
                told = True
        await trio.sleep(poll_s)


def while_away(
    fn: Callable[[], _T],
    *,
    patience_s: float,
    poll_s: float,
    on_away: Callable[[StoreUnreachable], None] | None = None,
) -> _T:
    """``fn()``, tried again every ``poll_s`` while the database cannot be
    reached, for up to ``patience_s`` after its first failure; ``on_away`` is
    told that failure (once). Blocking: the clients' twin of
    :func:`until_reachable` (a cancel, a follower), on the monotonic clock.

    Raises:
        StoreUnreachable: the database was still away after ``patience_s``.
    """
    deadline: float | None = None
    while True:
        try:
            return fn()
        except StoreUnreachable as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + patience_s
                if on_away is not None:
                    on_away(exc)
            if now + poll_s >= deadline:
                raise
        time.sleep(poll_s)
