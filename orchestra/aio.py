"""Orchestra from asyncio: the runner's entry points as asyncio coroutines.

Trio stays inside (its cancel scopes are how one Stop reaches every run,
request and tool of a tree); this module is the edge. The trees of an asyncio
program run in one trio *guest run* on the program's own event loop
(:func:`trio.lowlevel.start_guest_run`): no extra thread, and every tree
started here shares one trio run, so one runner (and its provider's
connection pools) serves them all. The guest run starts with the first tree
and ends when the last one has stopped (then the providers of the runners
used in it close their pools, which belonged to it; they open new ones on
their next use). Chosen over a trio thread: a guest run hands results back
without a thread hop on either side.

    result = await aio.run(runner, agent, "Why did the nightly job fail?")

    handle = await aio.start(runner, agent, task)
    async for event in handle.events():   # every run of the tree, as it happens
        ...
    result = await handle.wait()

Cancellation: cancelling the asyncio task that awaits :func:`run` or
:meth:`Handle.wait` stops the whole tree (every run ``interrupted``,
``cancelled from asyncio``), waits for it to record its exits, then raises
:class:`asyncio.CancelledError` in that task only; a tree stopped any other
way (:meth:`Handle.cancel`, a limit) is a result, never a ``CancelledError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import trio

from ._agent import Agent
from ._events import Event
from ._feed import EventFeed
from ._result import RunResult
from ._runner import RunHandle, Runner
from ._state import Limits
from ._sync import release

__all__ = ["Handle", "resume", "run", "start"]

_T = TypeVar("_T")
CANCELLED = "cancelled from asyncio"


@attrs.define(eq=False)
class _Portal:
    """One trio guest run on an asyncio loop, hosting trees while any runs."""

    loop: asyncio.AbstractEventLoop
    token: trio.lowlevel.TrioToken | None = None
    nursery: trio.Nursery | None = None
    jobs: int = 0
    runners: set[Runner] = attrs.Factory(set)
    stop: trio.Event | None = None
    stopping: bool = False
    ready: asyncio.Future[None] | None = None
    ended: asyncio.Future[None] | None = None

    async def open(self) -> None:
        """Start the guest run (once it is ready, trees can be submitted)."""
        ready = self.ready = self.loop.create_future()
        self.ended = self.loop.create_future()
        trio.lowlevel.start_guest_run(
            self._main,
            ready,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self.loop.call_soon,
            done_callback=self._done,
            host_uses_signal_set_wakeup_fd=True,
        )
        await ready

    async def _main(self, ready: asyncio.Future[None]) -> None:
        self.token, self.stop = trio.lowlevel.current_trio_token(), trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                ready.set_result(None)
                await self.stop.wait()
        finally:
            with trio.CancelScope(shield=True):
                await release({runner.provider for runner in self.runners})

    def _done(self, outcome: Any) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)
        outcome.unwrap()

    def call(self, runner: Runner, fn: Callable[[], Awaitable[_T]]) -> asyncio.Future[_T]:
        """``fn()`` in the guest run; its outcome as an asyncio future."""
        future: asyncio.Future[_T] = self.loop.create_future()
        self.jobs += 1
        self.runners.add(runner)

        async def job() -> None:
            try:
                value = await fn()
            except BaseException as exc:  # handed to the asyncio side as it is
                _settle(future, exc=exc)
            else:
                _settle(future, value=value)
            finally:
                self.let_go()

        assert self.token is not None and self.nursery is not None
        nursery = self.nursery
        self.token.run_sync_soon(lambda: nursery.start_soon(job))
        return future

    def hold(self) -> None:
        """Keep the guest run going until :meth:`let_go` (a reader of events)."""
        self.jobs += 1

    def let_go(self) -> None:
        """One job or hold less; the last one stops the guest run (same thread:
        in guest mode trio runs in the host loop's callbacks)."""
        self.jobs -= 1
        if self.jobs == 0 and self.stop is not None and not self.stopping:
            self.stopping = True
            stop = self.stop
            assert self.token is not None
            self.token.run_sync_soon(stop.set)

    async def wound_down(self) -> None:
        """If this was the last tree, wait until the guest run has ended (so that
        an ``asyncio.run`` that returns next leaves nothing of it behind)."""
        if self.stopping and self.ended is not None:
            await asyncio.shield(self.ended)

    def soon(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the trio side, soon (thread-safe; not awaited)."""
        if self.token is not None and self.jobs:
            self.token.run_sync_soon(fn)


def _settle(
    future: asyncio.Future[Any], *, value: Any = None, exc: BaseException | None = None
) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
    else:
        future.set_result(value)


_portals: dict[asyncio.AbstractEventLoop, _Portal] = {}


async def _portal() -> _Portal:
    """This loop's portal, started (or started again) if it is not running.

    One trio run per thread at a time: a portal winding down (its last tree
    stopped) ends before the next one starts."""
    loop = asyncio.get_running_loop()
    while True:
        portal = _portals.get(loop)
        if portal is None:
            portal = _portals[loop] = _Portal(loop)
            await portal.open()
            return portal
        if not portal.stopping:
            assert portal.ready is not None
            await portal.ready
            if not portal.stopping:
                return portal
        assert portal.ended is not None
        await portal.ended
        if _portals.get(loop) is portal:
            del _portals[loop]


@attrs.define(eq=False)
class Handle:
    """A tree started with :func:`start`, seen from asyncio."""

    run_id: str
    _runner: Runner
    _portal: _Portal
    _result: asyncio.Future[RunResult]
    _handle: RunHandle | None = None
    """The trio side's handle of a tree started here (None: resumed)."""
    _first: EventFeed | None = None
    """A reader subscribed when the tree started: the first :meth:`events` call
    sees the tree's first events."""

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the whole tree; each run ends ``interrupted`` with ``reason``.
        Returns at once; :meth:`wait` returns when every run has stopped."""
        if self._handle is not None:
            handle = self._handle
            self._portal.soon(lambda: handle.cancel(reason))
        else:
            self._portal.soon(lambda: self._runner.cancel(self.run_id, reason))

    @property
    def done(self) -> bool:
        """Whether the tree has stopped."""
        return self._result.done()

    async def wait(self) -> RunResult:
        """The tree's result once it stops. Cancelling the waiting task cancels
        the tree (see the module docstring)."""
        try:
            result = await asyncio.shield(self._result)
        except asyncio.CancelledError:
            self.cancel(CANCELLED)
            await asyncio.shield(self._result)
            await self._portal.wound_down()
            raise
        await self._portal.wound_down()
        return result

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the tree from now on (see :meth:`RunHandle.events`)."""
        feed, self._first = self._first or self._runner.feed(self.run_id), None
        self._portal.hold()
        try:
            while True:
                event = await self._portal.call(self._runner, lambda: _next(feed))
                if event is None:
                    return
                yield event
        finally:
            self._portal.let_go()
            await self._portal.wound_down()


async def _next(feed: EventFeed) -> Event | None:
    try:
        return await anext(feed)
    except StopAsyncIteration:
        return None


async def start(
    runner: Runner,
    agent: Agent,
    task: str,
    *,
    limits: Limits | None = None,
    run_id: str | None = None,
    metadata: dict[str, str] | None = None,
    continue_from: str | None = None,
) -> Handle:
    """Start a tree from asyncio (as :meth:`Runner.start`); its :class:`Handle`."""
    return await _begin(runner, agent, task, limits, run_id, metadata, continue_from, feed=True)


async def _begin(
    runner: Runner,
    agent: Agent,
    task: str,
    limits: Limits | None,
    run_id: str | None,
    metadata: dict[str, str] | None,
    continue_from: str | None,
    *,
    feed: bool,
) -> Handle:
    """:meth:`Runner.start` in the guest run, as :func:`start` and :func:`run` ask."""
    go = partial(
        runner.start,
        agent=agent,
        task=task,
        limits=limits,
        run_id=run_id,
        metadata=metadata,
        continue_from=continue_from,
    )
    return await _start(runner, go, feed=feed)


async def _start(
    runner: Runner, go: Callable[[trio.Nursery], Awaitable[RunHandle]], *, feed: bool
) -> Handle:
    """``go(nursery)`` in the guest run; with ``feed``, a reader of the tree's events
    subscribed at once (:func:`run` has none: a reader costs every event)."""
    portal = await _portal()
    started: asyncio.Future[tuple[RunHandle, EventFeed | None]] = portal.loop.create_future()

    async def tree() -> RunResult:
        async with trio.open_nursery() as nursery:
            try:
                handle = await go(nursery)
            except BaseException as exc:  # the start failed: its error, as it is
                _settle(started, exc=exc)
                raise
            _settle(started, value=(handle, handle.events() if feed else None))
            return await handle.wait()

    result = portal.call(runner, tree)
    handle, events = await started
    return Handle(handle.run_id, runner, portal, result, handle, events)


async def resume(
    runner: Runner, run_id: str, agent: Agent, *, limits: Limits | None = None, note: str = ""
) -> Handle:
    """Resume a stopped tree from asyncio (as :meth:`Runner.resume`); its :class:`Handle`
    (its events: from the moment it was resumed)."""
    portal = await _portal()
    feed = runner.feed(run_id)
    result = portal.call(runner, lambda: runner.resume(run_id, agent, limits=limits, note=note))
    return Handle(run_id, runner, portal, result, None, feed)


async def run(
    runner: Runner,
    agent: Agent,
    task: str,
    *,
    limits: Limits | None = None,
    run_id: str | None = None,
    metadata: dict[str, str] | None = None,
    continue_from: str | None = None,
) -> RunResult:
    """Run a tree to its end from asyncio (as :meth:`Runner.run`); its result."""
    handle = await _begin(runner, agent, task, limits, run_id, metadata, continue_from, feed=False)
    return await handle.wait()
