"""Orchestra from asyncio: the runner's entry points as asyncio coroutines.

Trio stays inside (its cancel scopes are how one Stop reaches every run,
request and tool of a tree); this module is the edge. The trees of an asyncio
program run in one trio run, in a thread of its own per event loop: every
tree started here shares it, so one runner (and its provider's connection
pools) serves them all. The trio run starts with the first tree and ends when
the last one has stopped (then the providers of the runners used in it close
their pools, which belonged to it; they open new ones on their next use).
The loop is woken once per tree, when it stops (:func:`run`), not while it
runs: a wake-up mid-tree makes the two threads take turns at the GIL.
Chosen over trio's guest mode on the loop, measured side by side
(``tools/bench_aio.py``): 1.12× native trio per tree against 1.25× (each trio
scheduling batch of a guest run is an asyncio callback); a cancel reaches
the tree's scope through the trio token either way.

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
import contextlib
import threading
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
    """One trio run in a thread of its own, hosting an asyncio loop's trees while
    any runs. Its counters and futures belong to the loop's thread; the trio
    thread reaches them with ``call_soon_threadsafe`` only, once per job."""

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
        """Start the trio thread (once it is ready, trees can be submitted)."""
        self.ready = self.loop.create_future()
        self.ended = self.loop.create_future()
        threading.Thread(target=self._thread, name="orchestra-aio", daemon=True).start()
        await self.ready

    def _thread(self) -> None:
        try:
            trio.run(self._main)
        finally:
            if self.ended is not None:
                self.to_loop(partial(_settle, self.ended))

    async def _main(self) -> None:
        self.token, self.stop = trio.lowlevel.current_trio_token(), trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                if self.ready is not None:
                    self.to_loop(partial(_settle, self.ready))
                await self.stop.wait()
        finally:
            with trio.CancelScope(shield=True):
                await release({runner.provider for runner in self.runners})

    def to_loop(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the loop's thread, soon (from the trio thread; dropped if the
        loop has closed meanwhile)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn)

    def call(self, runner: Runner, fn: Callable[[], Awaitable[_T]]) -> asyncio.Future[_T]:
        """``fn()`` in the trio thread; its outcome as an asyncio future (the loop is
        woken once, when it is known: a wake-up while the tree runs would make
        the two threads take turns at the GIL)."""
        future: asyncio.Future[_T] = self.loop.create_future()
        self.jobs += 1
        self.runners.add(runner)

        async def job() -> None:
            outcome: Callable[[], None]
            try:
                value = await fn()
            except BaseException as exc:  # handed to the asyncio side as it is
                outcome = partial(_settle, future, exc=exc)
            else:
                outcome = partial(_settle, future, value=value)
            self.to_loop(partial(self._done, outcome))

        assert self.token is not None and self.nursery is not None
        nursery = self.nursery
        self.token.run_sync_soon(lambda: nursery.start_soon(job))
        return future

    def _done(self, outcome: Callable[[], None]) -> None:
        outcome()
        self.let_go()

    def hold(self) -> None:
        """Keep the trio run going until :meth:`let_go` (a reader of events)."""
        self.jobs += 1

    def let_go(self) -> None:
        """One job or hold less (on the loop's thread); the last one stops the trio run."""
        self.jobs -= 1
        if self.jobs == 0 and self.stop is not None and not self.stopping:
            self.stopping = True
            stop = self.stop
            assert self.token is not None
            self.token.run_sync_soon(stop.set)

    async def wound_down(self) -> None:
        """If this was the last tree, wait until the trio run has ended (so that
        an ``asyncio.run`` that returns next leaves nothing of it behind)."""
        if self.stopping and self.ended is not None:
            await asyncio.shield(self.ended)

    def soon(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the trio side, soon (thread-safe; not awaited)."""
        if self.token is not None and self.jobs:
            self.token.run_sync_soon(fn)


@attrs.define(eq=False)
class _Slot:
    """The trio side's handle of a tree :func:`run` starts, filled once it started;
    a cancel that comes first waits in it. Used on the trio thread only."""

    handle: RunHandle | None = None
    reason: str | None = None

    def bind(self, handle: RunHandle) -> None:
        self.handle = handle
        if self.reason is not None:
            handle.cancel(self.reason)

    def cancel(self, reason: str) -> None:
        if self.handle is None:
            self.reason = reason
        else:
            self.handle.cancel(reason)


def _settle(
    future: asyncio.Future[Any], *, value: Any = None, exc: BaseException | None = None
) -> None:
    """Give ``future`` its outcome (on the loop's thread), unless it has one."""
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
        self._portal.soon(partial(self._cancel_now, reason))

    def _cancel_now(self, reason: str) -> None:
        """On the trio side."""
        if self._handle is not None:
            self._handle.cancel(reason)
        else:
            self._runner.cancel(self.run_id, reason)

    @property
    def done(self) -> bool:
        """Whether the tree has stopped."""
        return self._result.done()

    async def wait(self) -> RunResult:
        """The tree's result once it stops. Cancelling the waiting task cancels
        the tree (see the module docstring)."""
        return await _finished(self._portal, self._result, partial(self._cancel_now, CANCELLED))

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the tree from now on (see :meth:`RunHandle.events`)."""
        feed, self._first = self._first, None
        self._portal.hold()
        try:
            if feed is None:  # subscribed on the trio side, where events are told
                feed = await self._portal.call(
                    self._runner, partial(_feed, self._runner, self.run_id)
                )
            while True:
                event = await self._portal.call(self._runner, lambda: _next(feed))
                if event is None:
                    return
                yield event
        finally:
            self._portal.let_go()
            await self._portal.wound_down()


async def _feed(runner: Runner, run_id: str) -> EventFeed:
    return runner.feed(run_id)


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
    go = partial(
        runner.start,
        agent=agent,
        task=task,
        limits=limits,
        run_id=run_id,
        metadata=metadata,
        continue_from=continue_from,
    )
    return await _start(runner, go, feed=True)


async def _start(
    runner: Runner, go: Callable[[trio.Nursery], Awaitable[RunHandle]], *, feed: bool
) -> Handle:
    """``go(nursery)`` in the trio thread, a reader of the tree's events subscribed
    at once; its handle once it started (or the error that kept it from starting)."""
    portal = await _portal()
    started: asyncio.Future[tuple[RunHandle, EventFeed | None]] = portal.loop.create_future()

    async def tree() -> RunResult:
        async with trio.open_nursery() as nursery:
            try:
                handle = await go(nursery)
            except BaseException as exc:  # the start failed: its error, as it is
                portal.to_loop(partial(_settle, started, exc=exc))
                raise
            reader = handle.events() if feed else None
            portal.to_loop(partial(_settle, started, value=(handle, reader)))
            return await handle.wait()

    result = portal.call(runner, tree)
    handle, events = await started
    return Handle(handle.run_id, runner, portal, result, handle, events)


async def _finished(
    portal: _Portal, result: asyncio.Future[RunResult], cancel: Callable[[], object]
) -> RunResult:
    """``result`` once the tree stopped; if the awaiting task is cancelled, the
    tree is (``cancel()`` on the trio side) and then ``CancelledError`` raised."""
    try:
        value = await asyncio.shield(result)
    except asyncio.CancelledError:
        portal.soon(cancel)
        await asyncio.shield(result)
        await portal.wound_down()
        raise
    await portal.wound_down()
    return value


async def resume(
    runner: Runner, run_id: str, agent: Agent, *, limits: Limits | None = None, note: str = ""
) -> Handle:
    """Resume a stopped tree from asyncio (as :meth:`Runner.resume`); its :class:`Handle`
    (its events: from the moment it was resumed)."""
    portal = await _portal()
    feed = await portal.call(runner, partial(_feed, runner, run_id))
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
    """Run a tree to its end from asyncio (as :meth:`Runner.run`); its result.

    The loop is woken once, when the tree has stopped."""
    portal, slot = await _portal(), _Slot()
    go = partial(
        runner.start,
        agent=agent,
        task=task,
        limits=limits,
        run_id=run_id,
        metadata=metadata,
        continue_from=continue_from,
    )

    async def tree() -> RunResult:
        async with trio.open_nursery() as nursery:
            handle = await go(nursery)
            slot.bind(handle)
            return await handle.wait()

    return await _finished(portal, portal.call(runner, tree), partial(slot.cancel, CANCELLED))
