"""Orchestra from asyncio: the runner's entry points as asyncio coroutines.

Trio stays inside (its cancel scopes are how one Stop reaches every run,
request and tool of a tree); this module is the edge. The trees of an asyncio
program run in one trio run, in a thread of its own per event loop: every
tree started here shares it, so one runner (and its provider's connection
pools) serves them all. The trio run starts with the first tree and stays up
between trees, ending ``LINGER`` seconds after the last one stopped or when
the loop shuts down (``asyncio.run`` ending: a tree still running then is
cancelled, ``SHUT_DOWN``, and the trio run's end waited for, so nothing of it
outlives the loop). As it ends, the providers of the runners used in it
close their pools, which belonged to it; they open new ones on their next use.
The loop is woken once per tree, when it stops (:func:`run`), not while it
runs: a wake-up mid-tree makes the two threads take turns at the GIL.
Chosen over trio's guest mode on the loop, measured side by side
(``tools/bench_aio.py``): 1.06× native trio per tree against a server over
loopback HTTP (guest mode: 1.23–1.29×, each trio scheduling batch of a guest
run being an asyncio callback); a cancel reaches the tree's scope through
the trio token either way.

    result = await aio.run(runner, agent, "Why did the nightly job fail?")

    handle = await aio.start(runner, agent, task)
    async for event in handle.events():   # every run of the tree, as it happens
        ...
    result = await handle.wait()

Cancellation: cancelling the asyncio task that awaits :func:`run`,
:func:`start` or :meth:`Handle.wait` stops the whole tree (every run
``interrupted``, ``cancelled from asyncio``), waits for it to record its
exits, then raises :class:`asyncio.CancelledError` in that task only; a tree
stopped any other way (:meth:`Handle.cancel`, a limit) is a result, never a
``CancelledError``. Readers of events (:meth:`Handle.events`) end when the
tree stops (one opened after that ends at once, the first with what it had
queued); cancelling or closing a reader ends its read on the trio side too,
so nothing of it is left to hold up the loop's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar, Unpack

import attrs
import trio

from ._agent import Agent
from ._deps import DepsT
from ._events import Event
from ._feed import EventFeed
from ._output import OutputT
from ._result import RunResult
from ._runner import Launch, LaunchOptions, ResumeOptions, RunHandle, Runner, agent_and_id
from ._streaming import root_words_async
from ._sync import release

__all__ = ["CANCELLED", "LINGER", "SHUT_DOWN", "Handle", "resume", "run", "start"]

_T = TypeVar("_T")
CANCELLED = "cancelled from asyncio"
"""The reason of a tree stopped by cancelling the asyncio task awaiting it."""
SHUT_DOWN = "the asyncio loop shut down"
"""The reason of a tree still running when its loop shut down."""
LINGER = 30.0
"""Seconds the trio run stays up after the loop's last tree stopped, keeping the
providers' pooled connections for the next (the loop shutting down ends it
at once)."""


@attrs.define(eq=False)
class _Portal:
    """One trio run in a thread of its own, hosting an asyncio loop's trees. Its
    counters, timer and futures belong to the loop's thread; the trio thread
    reaches them with ``call_soon_threadsafe`` only, once per job. ``trees``
    belongs to the trio thread."""

    loop: asyncio.AbstractEventLoop
    token: trio.lowlevel.TrioToken | None = None
    nursery: trio.Nursery | None = None
    jobs: int = 0
    runners: set[Runner] = attrs.Factory(set)
    trees: set[_Slot] = attrs.Factory(set)
    stop: trio.Event | None = None
    stopping: bool = False
    ready: asyncio.Future[None] | None = None
    ended: asyncio.Future[None] | None = None
    idle_since: float = 0.0
    idle: asyncio.TimerHandle | None = None
    closer: AsyncGenerator[None, None] | None = None
    thread: threading.Thread | None = None

    async def open(self) -> None:
        """Start the trio thread (once it is ready, trees can be submitted), and
        have the loop's shutdown stop it (:meth:`_closer`)."""
        self.ready = self.loop.create_future()
        self.ended = self.loop.create_future()
        self.thread = threading.Thread(target=self._thread, name="orchestra-aio", daemon=True)
        self.thread.start()
        self.closer = self._closer()
        await anext(self.closer)
        await asyncio.shield(self.ready)

    async def _closer(self) -> AsyncGenerator[None, None]:
        """Seen starting by the loop, which closes it when it shuts down (as
        ``asyncio.run`` ends): the trio run is stopped then (any tree still
        running is cancelled, ``SHUT_DOWN``) and its end waited for, so nothing
        of it outlives the loop."""
        try:
            yield
        finally:
            self.shut()
            await self.wound_down()

    def _thread(self) -> None:
        try:
            trio.run(self._main)
        finally:
            if self.ready is not None:  # it never was: say why
                failed = RuntimeError("the trio thread of orchestra.aio ended")
                self.to_loop(partial(_settle, self.ready, exc=failed))
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
            # shielded: the portal is closing because it was cancelled; its pooled
            # connections belong to this trio run and must be closed before it ends
            with trio.CancelScope(shield=True):
                await release({runner.provider for runner in self.runners})

    def to_loop(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the loop's thread, soon (from the trio thread; dropped if the
        loop has closed meanwhile)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn)

    def call(
        self, runner: Runner, fn: Callable[[], Awaitable[_T]], slot: _Slot | None = None
    ) -> asyncio.Future[_T]:
        """``fn()`` in the trio thread; its outcome as an asyncio future (the loop is
        woken once, when it is known: a wake-up while the tree runs would make
        the two threads take turns at the GIL). ``slot``: the tree ``fn`` runs,
        cancelled if the loop shuts down meanwhile."""
        future: asyncio.Future[_T] = self.loop.create_future()
        self.hold()
        self.runners.add(runner)

        async def job() -> None:
            failed = RuntimeError("the trio run of orchestra.aio stopped")
            outcome: Callable[[], None] = partial(_settle, future, exc=failed)
            if slot is not None:
                self.trees.add(slot)
            try:
                value = await fn()
                outcome = partial(_settle, future, value=value)
            except Exception as exc:  # handed to the asyncio side as it is
                outcome = partial(_settle, future, exc=exc)
            finally:
                self.trees.discard(slot)
                if slot is not None:  # before the loop hears of it: see Handle.events
                    slot.end()
                self.to_loop(partial(self._done, outcome))

        assert self.token is not None and self.nursery is not None
        nursery = self.nursery
        self.token.run_sync_soon(lambda: nursery.start_soon(job))
        return future

    def _done(self, outcome: Callable[[], None]) -> None:
        outcome()
        self.let_go()

    def hold(self) -> None:
        """Keep the trio run going until :meth:`let_go` (a job, a reader of events)."""
        self.jobs += 1

    def let_go(self) -> None:
        """One job or hold less (on the loop's thread); the trio run stops
        ``LINGER`` seconds after the last one, unless a new one came meanwhile."""
        self.jobs -= 1
        if self.jobs == 0:
            self.idle_since = self.loop.time()
            if self.idle is None and not self.stopping:
                self.idle = self.loop.call_later(LINGER, self._expire)

    def _expire(self) -> None:
        self.idle = None
        if self.jobs:
            return
        left = self.idle_since + LINGER - self.loop.time()
        if left > 0:  # used again since the timer was set
            self.idle = self.loop.call_later(left, self._expire)
        else:
            self.shut()

    def shut(self) -> None:
        """Stop the trio run (on the loop's thread): trees still running are
        cancelled (``SHUT_DOWN``); :meth:`wound_down` waits for its end."""
        if self.stopping:
            return
        self.stopping = True
        if self.idle is not None:
            self.idle.cancel()
        self._send_halt()

    def _send_halt(self, _: object = None) -> None:
        if self.token is not None:
            self.token.run_sync_soon(self._halt)
        elif self.ready is not None and not self.ready.done():  # not started yet: once it is
            self.ready.add_done_callback(self._send_halt)

    def _halt(self) -> None:
        """On the trio side."""
        for slot in list(self.trees):
            slot.cancel(SHUT_DOWN)
        assert self.stop is not None
        self.stop.set()

    async def wound_down(self) -> None:
        """Wait until the trio run has ended, if it is stopping; then the loop
        has no portal (the next tree starts one)."""
        if self.stopping and self.ended is not None:
            await asyncio.shield(self.ended)
            if self.thread is not None:
                self.thread.join()  # it has no more to do than to return
            if _portals.get(self.loop) is self:
                del _portals[self.loop]

    def soon(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the trio side, soon (thread-safe; not awaited), while the
        trio run has any job (dropped if it has ended meanwhile)."""
        if self.token is not None and self.jobs:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(fn)


@attrs.define(eq=False)
class _Slot:
    """The trio side's hold on one tree of the portal: its handle, filled once
    it exists (a cancel that comes first waits in it), or how to cancel it
    (a resumed tree, cancelled by its id); and the readers of its events,
    closed when the tree's job ends. Used on the trio thread only."""

    handle: RunHandle | None = None
    reason: str | None = None
    by_id: Callable[[str], object] | None = None
    readers: list[tuple[Runner, str, EventFeed]] = attrs.Factory(list)
    ended: bool = False

    def subscribe(self, runner: Runner, run_id: str) -> EventFeed:
        """A new reader of the tree's events (one that ends at once if it has ended)."""
        if self.ended:
            return EventFeed.ended()
        feed = runner.hub.feed(run_id)
        self.readers.append((runner, run_id, feed))
        return feed

    def end(self) -> None:
        """The tree's job ended (however: a failed start too): its readers end."""
        self.ended = True
        for runner, run_id, feed in self.readers:
            runner.hub.unsubscribe(run_id, feed)
        self.readers.clear()

    def bind(self, handle: RunHandle) -> None:
        self.handle = handle
        if self.reason is not None:
            handle.cancel(self.reason)

    def cancel(self, reason: str) -> None:
        if self.handle is not None:
            self.handle.cancel(reason)
        elif self.by_id is not None:
            self.by_id(reason)
        else:
            self.reason = reason


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

    A portal winding down ends before the next one starts (its trio run
    closes the providers' pools as it ends)."""
    loop = asyncio.get_running_loop()
    while True:
        portal = _portals.get(loop)
        if portal is None:
            portal = _portals[loop] = _Portal(loop)
            await portal.open()
            return portal
        assert portal.ready is not None
        if not portal.ready.done():
            await asyncio.shield(portal.ready)
        if not portal.stopping:
            return portal
        await portal.wound_down()


@attrs.define(eq=False)
class Handle:
    """A tree started with :func:`start`, seen from asyncio."""

    run_id: str
    _runner: Runner
    _portal: _Portal
    _result: asyncio.Future[RunResult]
    _slot: _Slot
    """The trio side's hold on the tree (how it is cancelled)."""
    _first: EventFeed | None = None
    """A reader subscribed when the tree started: the first :meth:`events` call
    sees the tree's first events."""

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the whole tree; each run ends ``interrupted`` with ``reason``.
        Returns at once; :meth:`wait` returns when every run has stopped."""
        self._portal.soon(partial(self._slot.cancel, reason))

    @property
    def done(self) -> bool:
        """Whether the tree has stopped."""
        return self._result.done()

    async def wait(self) -> RunResult:
        """The tree's result once it stops. Cancelling the waiting task cancels
        the tree (see the module docstring)."""
        return await _finished(self._portal, self._result, partial(self._slot.cancel, CANCELLED))

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the tree from now on (see :meth:`RunHandle.events`); the
        first reader sees the tree's first events. It ends when the tree stops;
        opened after that it ends at once (the first reader: once it has read
        what it had queued). Cancelling or closing it ends its read on the trio
        side as well."""
        feed, self._first = self._first, None
        if self._result.done():  # the trio side is done with the tree's feeds
            for queued in feed.drain() if feed is not None else ():
                yield queued
            return
        self._portal.hold()
        try:
            if feed is None:  # subscribed on the trio side, where events are told
                subscribe = partial(_subscribe, self._slot, self._runner, self.run_id)
                feed = await self._portal.call(self._runner, subscribe)
            read = partial(_next, feed)
            while (event := await self._portal.call(self._runner, read)) is not None:
                yield event
        finally:
            if feed is not None:  # a reader gone early: its feed closes, a read waiting ends
                self._portal.soon(partial(self._runner.hub.unsubscribe, self.run_id, feed))
            self._portal.let_go()

    def text(self) -> AsyncIterator[str]:
        """The root's words as they arrive (the text of its streamed replies), as an
        async iterator over :meth:`events` (the same rules)."""
        return root_words_async(self.events())


async def _subscribe(slot: _Slot, runner: Runner, run_id: str) -> EventFeed:
    return slot.subscribe(runner, run_id)


async def _next(feed: EventFeed) -> Event | None:
    try:
        return await anext(feed)
    except StopAsyncIteration:
        return None


async def start(
    runner: Runner, agent: Agent, task: str, **options: Unpack[LaunchOptions]
) -> Handle:
    """Start a tree from asyncio (as :meth:`Runner.start`); its :class:`Handle`
    once it started (or the error that kept it from starting), with a reader
    of its events subscribed from its first. Cancelled while it waits for the
    start, it stops the tree (as :func:`run` does) and raises ``CancelledError``
    once the tree has stopped."""
    portal, slot = await _portal(), _Slot()
    started: asyncio.Future[tuple[str, EventFeed]] = portal.loop.create_future()
    prepare = partial(runner.prepare, Launch(agent=agent, task=task, **options))

    async def tree() -> RunResult:
        try:
            handle = prepare()
        except Exception as exc:  # the start failed: its error, as it is
            portal.to_loop(partial(_settle, started, exc=exc))
            raise
        slot.bind(handle)
        first = slot.subscribe(runner, handle.run_id)
        portal.to_loop(partial(_settle, started, value=(handle.run_id, first)))
        return await runner.execute(handle)

    result = portal.call(runner, tree, slot)
    try:
        tree_id, events = await asyncio.shield(started)
    except asyncio.CancelledError:
        await _stopped(portal, result, partial(slot.cancel, CANCELLED))
        raise
    return Handle(tree_id, runner, portal, result, slot, events)


async def _finished(
    portal: _Portal, result: asyncio.Future[RunResult], cancel: Callable[[], object]
) -> RunResult:
    """``result`` once the tree stopped; if the awaiting task is cancelled, the
    tree is (``cancel()`` on the trio side) and then ``CancelledError`` raised."""
    try:
        return await asyncio.shield(result)
    except asyncio.CancelledError:
        portal.soon(cancel)
        await asyncio.shield(result)
        raise


async def _stopped(
    portal: _Portal, result: asyncio.Future[Any], cancel: Callable[[], object]
) -> None:
    """Stop the tree whose outcome is ``result`` (``cancel()`` on the trio side) and
    wait until it has stopped, whatever its outcome (``result`` is left as it is)."""
    portal.soon(cancel)
    await asyncio.wait([result])


async def resume(
    runner: Runner,
    agent: Agent | str,
    run_id: str | Agent,
    **options: Unpack[ResumeOptions],
) -> Handle:
    """Resume a stopped tree from asyncio (as :meth:`Runner.resume`: ``resume(runner,
    agent, run_id)``, the older order taken too); its :class:`Handle` (its events:
    from the moment it was resumed)."""
    agent, run_id = agent_and_id(agent, run_id)
    portal, slot = await _portal(), _Slot(by_id=partial(runner.cancel, run_id))
    feed = await portal.call(runner, partial(_subscribe, slot, runner, run_id))
    go = partial(runner.resume, agent, run_id, **options)
    return Handle(run_id, runner, portal, portal.call(runner, go, slot), slot, feed)


async def run(
    runner: Runner, agent: Agent[DepsT, OutputT], task: str, **options: Unpack[LaunchOptions]
) -> RunResult[OutputT]:
    """Run a tree to its end from asyncio (as :meth:`Runner.run`); its result.

    The loop is woken once, when the tree has stopped."""
    portal, slot = await _portal(), _Slot()
    prepare = partial(runner.prepare, Launch(agent=agent, task=task, **options))

    async def tree() -> RunResult:
        handle = prepare()
        slot.bind(handle)
        return await runner.execute(handle)

    return await _finished(portal, portal.call(runner, tree, slot), partial(slot.cancel, CANCELLED))
