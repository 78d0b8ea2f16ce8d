"""The runner: the public way to start, watch, cancel and resume runs.

Cancellation: a root run's handle (or :meth:`Runner.cancel`) cancels the
run's whole subtree through trio cancel scopes: every descendant run, every
model request and every tool in flight stops at its next checkpoint, and the
stopped runs are saved together, in one transaction, once the whole tree has
stopped. A cancel aimed at a child alone stops that child; its parent gets a
tool result saying so and continues. With a store that takes cancel requests
(the SQLite store), another process can ask for the same (``orchestra
cancel``); one watcher per runner, whatever the number of trees it runs,
polls for such requests every ``poll_interval`` seconds (one query).

Leases: with a store that keeps leases, a root run is executed only while
this runner holds its tree's lease (renewed by the watcher). Every save is
fenced by that lease (see :meth:`Runner.save`): if the process stalls past its
lease and another takes the tree over, this runner stops the tree before its
next effect, saves nothing more, and :meth:`Runner.run` raises
:class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any

import attrs
import trio

from ._agent import Agent
from ._approval import approve, reject
from ._cancelled import unwrapped
from ._events import Event, EventSink, event_record
from ._exceptions import LeaseError, LeaseLost, StateError, StoreError
from ._execute import (
    continued_state,
    execute,
    load_live,
    new_state,
    reopen,
    result_of,
    spawn_child,
)
from ._feed import EventFeed
from ._model.margin import Calibration, Margin, provider_key
from ._model.provider import Provider
from ._model.retry import RetryPolicy
from ._money import Price
from ._prices import PriceTable
from ._redact import redact_data
from ._result import RunResult
from ._run import Ledger, LiveRun
from ._state import Interruption, Limits, RunState, Status
from ._stores.contract import CancelInbox, Leases, LiveStream, LiveText, Store
from ._stores.fence import Fence
from ._stores.memory import MemoryStore
from ._sync import blocking

__all__ = ["RunHandle", "Runner"]

LEASE_TTL = 30.0


@attrs.define(kw_only=True, eq=False)
class RunHandle:
    """A root run started with :meth:`Runner.start`."""

    run_id: str
    _live: LiveRun = attrs.field(alias="live")
    _runner: Runner = attrs.field(alias="runner")
    _done: trio.Event = attrs.Factory(trio.Event)
    _result: RunResult | None = None
    _error: Exception | None = None

    def events(self) -> EventFeed:
        """Every event of the tree from now on, deltas of streamed replies included,
        as an async iterator that ends after the root's ``run_stopped``, or once
        the tree stopped however it stopped (see :mod:`orchestra._feed`); opened
        after that, it ends at once. Call it right after :meth:`Runner.start` to
        see the tree's first events; each call is a reader of its own."""
        if self.done:
            return EventFeed.ended()
        return self._runner.feed(self.run_id)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run and its whole subtree; each ends ``interrupted`` with ``reason``.

        Not a checkpoint; returns at once. Works from the moment the handle
        exists: a run cancelled before its first step stops at that step.
        :meth:`wait` returns once every run in the tree has recorded its exit.
        """
        if not self.done and not self._runner.cancel(self.run_id, reason):
            self._live.request_cancel(reason)  # not executing yet: stops at its first step

    @property
    def done(self) -> bool:
        """Whether the run has stopped."""
        return self._done.is_set()

    async def wait(self) -> RunResult:
        """Wait until the run stops; its result.

        A checkpoint; cancelling the waiter does not cancel the run (use
        :meth:`cancel`). Errors leave as :meth:`Runner.run`'s do.

        Raises:
            StoreError: the store failed the tree (the error itself, never a
                group; the nursery the run was started in gets it too).
            LeaseLost: this process lost the tree to another.
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


@attrs.define(kw_only=True, eq=False)
class Runner:
    """Runs agents against a provider, keeping their states in a store.

    Attributes:
        provider: where model calls go.
        prices: USD per million tokens, by model.
        store: where states are saved after every step.
        sink: receives every event (e.g. a :class:`JsonlSink`).
        prompt_margin: the least slack on our prompt count when reserving budget;
            combined with what ``calibration`` learnt (the larger of each field).
        calibration: the prompt-count gaps learnt per (provider, model); before
            the first reply of a pair its ``first`` margin (twice our count plus
            256 tokens) is used.
        poll_interval: how often a root run checks the store for cancel requests.
        retry: how model calls are retried after transient provider failures.
        lease_ttl: seconds a tree's lease lasts unless renewed (the watcher renews
            it every third of that).
        tracer: sees every event with its live run first (e.g. an :class:`OTelTracer`).
        ledger: budget numbers shared with other processes (a distributed
            worker's); None: the tree's numbers live in its runs' memory.
    """

    provider: Provider
    prices: PriceTable = PriceTable()
    store: Store = attrs.Factory(MemoryStore)
    sink: EventSink | None = None
    prompt_margin: Margin = Margin()
    calibration: Calibration = attrs.Factory(Calibration)
    poll_interval: float = 0.05
    lease_ttl: float = LEASE_TTL
    retry: RetryPolicy = RetryPolicy()
    tracer: Callable[[LiveRun, Event], None] | None = None
    ledger: Ledger | None = None
    _live: dict[str, LiveRun] = attrs.field(factory=dict, init=False)
    _lost: dict[str, str] = attrs.field(factory=dict, init=False)
    _clock_origin: tuple[float, float] | None = attrs.field(default=None, init=False)
    _stopping: dict[str, _Batch] = attrs.field(factory=dict, init=False)
    """Trees being cancelled: their saves wait to be made together."""
    _watched: dict[str, float] = attrs.field(factory=dict, init=False)
    """Trees this runner executes with a lease, and when each lease is next renewed."""
    _fences: dict[str, Fence] = attrs.field(factory=dict, init=False)
    """The lease this runner took on each tree it executes (saves are fenced by it)."""
    _feeds: dict[str, list[EventFeed]] = attrs.field(factory=dict, init=False)
    """The readers of each tree's events (:meth:`RunHandle.events`)."""
    _poller: trio.Event | None = attrs.field(default=None, init=False)
    """Set when the watcher that polls for every tree stops (another takes over)."""
    owner: str = attrs.field(factory=lambda: f"pid {os.getpid()} on {socket.gethostname()}")
    _inbox: CancelInbox | None = attrs.field(default=None, init=False)
    """The store's cancel requests, if it takes any (read once, when the runner is built)."""
    _live_text: LiveText | None = attrs.field(default=None, init=False)
    """Where the text runs stream is kept for other processes, if the store keeps it."""
    _leases: Leases | None = attrs.field(default=None, init=False)
    """The store's leases, if it keeps any (read once, when the runner is built)."""

    def __attrs_post_init__(self) -> None:
        self._inbox, self._leases = self.store.inbox, self.store.leases
        self._live_text = self.store.live

    def now(self) -> float:
        """Wall-clock seconds, advancing with trio's clock (so a MockClock moves it too)."""
        if self._clock_origin is None:
            self._clock_origin = (time.time(), trio.current_time())
        wall, trio0 = self._clock_origin
        return wall + trio.current_time() - trio0

    @property
    def endpoint(self) -> str | None:
        """The base URL of the provider, if it has one (it picks published prices)."""
        url = provider_key(self.provider)
        return url if isinstance(url, str) else None

    def price_of(self, model: str) -> Price:
        """What a call of ``model`` costs on this runner's provider."""
        return self.prices.price(model, endpoint=self.endpoint)

    def margin_for(self, model: str) -> Margin:
        """The prompt margin for the next call of ``model``."""
        learnt = self.calibration.margin(provider_key(self.provider), model)
        return learnt.widened(self.prompt_margin)

    def observe_prompt(self, model: str, *, ours: int, theirs: int, messages: int) -> None:
        """Learn how the provider counts ``model``'s prompts (see :class:`Calibration`)."""
        self.calibration.observe(
            provider_key(self.provider), model, ours=ours, theirs=theirs, messages=messages
        )

    def emit(self, run: LiveRun, type_: str, data: dict[str, Any]) -> None:
        """Send an event to the sink now, and to the store with the run's next save.

        ``data`` is redacted here, once. With no sink and no tracer no
        :class:`Event` is made: only the record the store keeps.
        """
        s = run.state
        if self.tracer is None and self.sink is None and s.root_id not in self._feeds:
            record = event_record(
                type_, s.run_id, s.root_id, s.parent_id, self.now(), redact_data(data)
            )
            run.events.append(record)
            return
        event = self._event(run, type_, data)
        if self.tracer is not None:
            self.tracer(run, event)
        if self.sink is not None:
            self.sink(event)
        run.events.append(event.to_dict())
        if s.root_id in self._feeds:
            self._to_feeds(run, event)

    def delta(self, run: LiveRun, text: str, tokens: int) -> None:
        """A piece of a streamed reply's text: to the sink and the tree's readers
        only (never saved, never traced)."""
        s = run.state
        if self.sink is None and s.root_id not in self._feeds:
            return
        event = self._event(run, "text_delta", {"text": text, "tokens": tokens})
        if self.sink is not None:
            self.sink(event)
        if s.root_id in self._feeds:
            self._to_feeds(run, event)

    def live_text(self, run: LiveRun, stream: LiveStream | None) -> None:
        """Note what ``run`` is streaming now (None: it is not), if the store keeps it
        (see :class:`~orchestra._stores.contract.LiveText`). A store that fails this
        write fails the run's next save, not the stream."""
        if self._live_text is None:
            return
        with contextlib.suppress(StoreError):
            self._live_text.put_live_text(run.state.run_id, run.state.root_id, stream)

    @property
    def notes_streams(self) -> bool:
        """Whether the store keeps notes of streams (see :meth:`live_text`)."""
        return self._live_text is not None

    def lost_stream(self, run: LiveRun) -> LiveStream | None:
        """What ``run`` was streaming when the process running it stopped, if noted."""
        return None if self._live_text is None else self._live_text.live_stream(run.state.run_id)

    def _event(self, run: LiveRun, type_: str, data: dict[str, Any]) -> Event:
        s = run.state
        return Event(
            type=type_,
            run_id=s.run_id,
            root_id=s.root_id,
            parent_id=s.parent_id,
            at=self.now(),
            data=data,
            depth=len(run.lineage()) - 1,
        )

    def feed(self, root_id: str) -> EventFeed:
        """A new reader of the events of tree ``root_id`` (see :meth:`RunHandle.events`),
        until the tree's run here ends (it is closed then: :meth:`end_feeds`)."""
        feed = EventFeed()
        self._feeds.setdefault(root_id, []).append(feed)
        return feed

    def unsubscribe(self, root_id: str, feed: EventFeed) -> None:
        """Close ``feed`` (a reader that went away) and stop queueing events to it."""
        feed.close()
        feeds = self._feeds.get(root_id, [])
        if feed in feeds:
            feeds.remove(feed)
        if not feeds:
            self._feeds.pop(root_id, None)

    def end_feeds(self, root_id: str) -> None:
        """Close every reader of tree ``root_id``: its run here has ended (their
        iterators end once what is queued is read)."""
        for feed in self._feeds.pop(root_id, ()):
            feed.close()

    def _to_feeds(self, run: LiveRun, event: Event) -> None:
        shown = attrs.evolve(event, data={**event.data, "depth": event.depth})
        feeds = self._feeds[event.root_id]
        for feed in feeds:
            feed.put(shown)
        if event.type == "run_stopped" and event.parent_id is None:
            self.end_feeds(event.root_id)

    def save(self, state: RunState, events: Sequence[dict[str, Any]] = ()) -> None:
        """Save ``state`` fenced by this runner's lease on its tree.

        Raises:
            LeaseLost: the lease was taken over (now or earlier): nothing was
                saved, and the tree is being cancelled in this process.
        """
        lost = self._lost.get(state.root_id)
        if lost is not None:
            raise LeaseLost(lost)
        batch = self._stopping.get(state.root_id)
        if batch is not None:
            batch.add(state, events)
            if state.run_id == state.root_id and state.status is not Status.RUNNING:
                self._save_stopped(state.root_id)  # the root stops last: the tree is saved
            return
        try:
            self.store.save(state, events, fence=self.fence(state.root_id))
        except LeaseLost as exc:
            self._lose(state.root_id, str(exc))
            raise

    def _save_stopped(self, root_id: str) -> None:
        """Save the runs of a cancelled tree together (one transaction if the store can)."""
        batch = self._stopping.pop(root_id, None)
        if batch is None or not batch.states:
            return
        fence = self.fence(root_id)
        try:
            self.store.save_many(list(batch.states.values()), batch.events, fence=fence)
        except LeaseLost as exc:
            self._lose(root_id, str(exc))

    def fence(self, root_id: str) -> Fence | None:
        """What this runner's saves of tree ``root_id`` are fenced by: the lease it
        took on the tree (None: the store keeps no leases)."""
        return self._fences.get(root_id)

    def lost_lease(self, root_id: str) -> bool:
        """Whether this runner lost the lease on tree ``root_id`` (it must not save)."""
        return root_id in self._lost

    def _lose(self, root_id: str, why: str) -> None:
        self._lost.setdefault(root_id, why)
        self.cancel(root_id, "this process lost the lease on the run tree")

    # -- the live tree ----------------------------------------------------------

    def register(self, run: LiveRun) -> None:
        """Note a run as executing in this process (done by ``execute``)."""
        self._live[run.state.run_id] = run

    def unregister(self, run: LiveRun) -> None:
        """Forget a run that stopped executing."""
        self._live.pop(run.state.run_id, None)

    def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Cancel a run executing in this process, and its subtree.

        Returns False if no such run is executing here. Not a checkpoint.
        """
        run = self._live.get(run_id)
        if run is None:
            return False
        if run.parent is None and run.cancel_reason is None:
            self._stopping.setdefault(run_id, _Batch())
        run.request_cancel(reason)
        return True

    # -- starting runs --------------------------------------------------------

    async def run(
        self,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        run_id: str | None = None,
        metadata: dict[str, str] | None = None,
        continue_from: str | None = None,
    ) -> RunResult:
        """Run ``agent`` on ``task`` as a root run until it stops; its result.

        ``continue_from``: the id of a stopped root run (in this runner's store)
        that this run continues, ``task`` being the next user message (see
        :mod:`orchestra._conversation`; limits count per message).

        Never raises for a run's own failure: how it ended is in the result.
        Cancellation: if the caller's scope is cancelled, the tree records
        ``interrupted`` and saves before ``Cancelled`` propagates (a plain
        ``trio.Cancelled``, never a group).

        Raises:
            StoreError: the store failed the tree (the error itself, never a
                group, however many runs met it; the others are notes on it).
            LeaseLost: this process lost the tree to another.
            ExceptionGroup: only for failures of several types at once (see
                :mod:`orchestra._cancelled`).

        If stopping the tree (saving it, letting its lease go) fails while an
        error is on its way out, that error is raised, the failure a note on it.
        """
        handle = self._prepare(agent, task, limits, run_id, metadata, continue_from)
        with unwrapped():
            return await self._root(handle._live)

    def run_sync(
        self,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        run_id: str | None = None,
        metadata: dict[str, str] | None = None,
        continue_from: str | None = None,
    ) -> RunResult:
        """:meth:`run` from plain code (a script, a notebook cell): blocks until the
        tree stops; its result. Works with an asyncio loop running in this
        thread too (the tree then runs in a thread of its own). See
        :mod:`orchestra._sync`; from asyncio code use ``orchestra.aio``."""
        go = partial(
            self.run,
            agent,
            task,
            limits=limits,
            run_id=run_id,
            metadata=metadata,
            continue_from=continue_from,
        )
        return blocking([self.provider], go)

    def resume_sync(
        self, run_id: str, agent: Agent, *, limits: Limits | None = None, note: str = ""
    ) -> RunResult:
        """:meth:`resume` from plain code, as :meth:`run_sync`."""
        return blocking(
            [self.provider], partial(self.resume, run_id, agent, limits=limits, note=note)
        )

    async def start(
        self,
        nursery: trio.Nursery,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        run_id: str | None = None,
        metadata: dict[str, str] | None = None,
        continue_from: str | None = None,
    ) -> RunHandle:
        """Start a root run in ``nursery``; a handle to cancel it or wait for it.

        ``metadata`` is saved with the run (e.g. what a later process needs to
        rebuild the agent and resume it); ``continue_from`` as in :meth:`run`.
        """
        handle = self._prepare(agent, task, limits, run_id, metadata, continue_from)
        nursery.start_soon(self._run_for, handle)
        return handle

    def _prepare(
        self,
        agent: Agent,
        task: str,
        limits: Limits | None,
        run_id: str | None,
        metadata: dict[str, str] | None,
        continue_from: str | None,
    ) -> RunHandle:
        """The handle of a new root run, continuing ``continue_from`` if given; not
        started yet (:meth:`_run_for` runs it; ``orchestra.aio`` does, in the
        task it has for the tree).

        Raises:
            RunNotFound: no run ``continue_from`` in the store.
            StateError: that run cannot be continued (running, a child, another agent's).
        """
        limits = (limits or agent.limits).anchored(self.now())
        if continue_from is None:
            state = new_state(agent, task, limits, run_id=run_id, metadata=metadata)
        else:
            earlier = self.store.load(continue_from)
            state = continued_state(earlier, agent, task, limits, run_id=run_id, metadata=metadata)
        live = LiveRun(state=state, agent=agent, runner=self)
        return RunHandle(run_id=state.run_id, live=live, runner=self)

    async def _run_for(self, handle: RunHandle) -> RunResult:
        """Run a prepared root for ``handle``; its result, which
        :meth:`RunHandle.wait` gets too, or the error that failed it (unwrapped
        as :meth:`run`'s), raised here as well. A ``Cancelled`` is not kept: it
        only propagates."""
        live, result = handle._live, None
        try:
            with unwrapped():
                result = await self._root(live)
        except Exception as exc:  # for wait() too; the nursery gets it as well
            handle._error = exc
            raise
        finally:
            handle._result = result or result_of(live)
            handle._done.set()
        return result

    async def resume(
        self, run_id: str, agent: Agent, *, limits: Limits | None = None, note: str = ""
    ) -> RunResult:
        """Continue a saved root run from where it stopped; its result.

        What was spent and the turns taken carry over: a run stopped by a limit
        stops again at once unless ``limits`` raises it. A raise is recorded in
        ``state.limit_raises``. Pending tool calls run first, on the same path
        as in a fresh run; saved model replies are never requested again.

        Every unfinished run of the tree is resumed on the way, whichever
        process left it: a pending call that spawned a child re-attaches to
        that child (never a second child for one call).

        Raises:
            RunNotFound: no such run in the store.
            StateError: the run is a child run, or its status cannot be resumed.
            LeaseError: another process is running it.
            LeaseLost: this process lost the lease while running it.
            StoreError: the store failed the tree.

        Errors leave as :meth:`run`'s do: the error itself, never a group of one.
        """
        live = load_live(self, run_id, agent, None)
        if live.state.parent_id is not None:
            raise StateError(f"run {run_id} is a child run; resume its root {live.state.root_id}")
        reopen(live, limits, note)
        with unwrapped():
            return await self._root(live)

    def approve(self, run_id: str, call_id: str | None = None) -> Interruption:
        """Approve the call run ``run_id``'s tree waits on; then :meth:`resume` it."""
        return approve(self.store, run_id, call_id)

    def reject(self, run_id: str, call_id: str | None = None, reason: str = "") -> Interruption:
        """Reject the waiting call; ``reason`` becomes its tool result. Then :meth:`resume`."""
        return reject(self.store, run_id, call_id, reason)

    def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
    ) -> Coroutine[Any, Any, str]:
        """Run ``agent`` as a child of ``parent``; its answer (used by agent tools).

        Returns the coroutine to await rather than awaiting it here: every run
        of a tree sits under this call, and a frame less under each is what a
        cancel of the tree unwinds (and frees) less.
        """
        return spawn_child(self, parent, call_id, agent, task, limits=limits)

    async def _root(self, live: LiveRun) -> RunResult:
        root_id = live.state.run_id
        self._lost.pop(root_id, None)
        inbox, leases = self._inbox, self._leases
        try:
            if leases is not None:
                self._fences[root_id] = leases.acquire_lease(
                    root_id, self.owner, ttl=self.lease_ttl
                )
            if inbox is not None:
                inbox.clear_cancels(root_id)  # requests nobody applied are stale
            try:
                async with trio.open_nursery() as nursery:
                    if inbox is not None:
                        nursery.start_soon(self._watch, root_id, inbox)
                    await execute(live)
                    nursery.cancel_scope.cancel()
            finally:
                self._stop_tree(root_id)
        finally:  # however the tree ended (a lease refused, a store error): its readers end
            self.end_feeds(root_id)
        if root_id in self._lost:
            raise LeaseLost(self._lost.pop(root_id))
        return result_of(live)

    def _stop_tree(self, root_id: str) -> None:
        """Save a cancelled tree's runs and let the tree go; called in a ``finally``.

        If that fails while another exception is on its way out, the original
        goes on, with the failure attached as a note (never hiding it); if it
        fails after a run that ended normally, its failure is raised.
        """
        pending = sys.exception()
        failures: list[Exception] = []
        for step in (self._save_stopped, self._let_go):
            try:
                step(root_id)
            except Exception as failure:  # the other step still runs
                failures.append(failure)
        if not failures:
            return
        if pending is None:
            first, *rest = failures
            for later in rest:
                first.add_note(f"and then letting the tree go failed too: {later!r}")
            raise first
        for later in failures:
            pending.add_note(f"and then stopping the tree failed too: {later!r}")

    def _let_go(self, root_id: str) -> None:
        """Release the tree: its lease (if still ours) and cancel requests nobody applied."""
        self._fences.pop(root_id, None)
        if self._leases is None:
            if self._inbox is not None:
                self._inbox.clear_cancels(root_id)
        elif root_id in self._lost:
            self._leases.release_lease(root_id, self.owner)
        else:
            self._leases.let_go(root_id, self.owner)  # its cancel requests too, at once

    async def _watch(self, root_id: str, inbox: CancelInbox) -> None:
        """Keep tree ``root_id`` watched (cancel requests, lease) while it runs.

        One watcher at a time polls for every tree of this runner; the others
        wait, and one of them takes over when the polling one's tree stops.
        """
        self._watched[root_id] = trio.current_time() + self.lease_ttl / 3
        try:
            while True:
                if self._poller is None:
                    self._poller = trio.Event()
                    try:
                        await self._poll(inbox)
                    finally:
                        self._poller.set()
                        self._poller = None
                else:
                    await self._poller.wait()
        finally:
            del self._watched[root_id]

    async def _poll(self, inbox: CancelInbox) -> None:
        """Apply cancel requests other processes leave in the store; keep the leases.

        One query per ``poll_interval`` for all trees. If a lease cannot be
        renewed (another process took the tree over while this one stalled),
        that tree is cancelled here and saves nothing more.
        """
        while True:
            await trio.sleep(self.poll_interval)
            for run_id, reason in inbox.pending_cancels().items():
                if self.cancel(run_id, reason):
                    inbox.clear_cancel(run_id)
            now = trio.current_time()
            for root_id, renew_at in list(self._watched.items()):
                if now >= renew_at and root_id not in self._lost:
                    self._renew(root_id, now)

    def _renew(self, root_id: str, now: float) -> None:
        if self._leases is None:
            return
        try:
            self._leases.renew_lease(root_id, self.owner, ttl=self.lease_ttl)
        except LeaseError as exc:
            self._lose(root_id, str(exc))
        else:
            self._watched[root_id] = now + self.lease_ttl / 3


@attrs.define(eq=False)
class _Batch:
    """The saves of a tree being cancelled, kept to be made together."""

    states: dict[str, RunState] = attrs.Factory(dict)
    events: list[dict[str, Any]] = attrs.Factory(list)

    def add(self, state: RunState, events: Sequence[dict[str, Any]]) -> None:
        self.states[state.run_id] = state  # the live state: saved as it is at the end
        self.events.extend(events)
