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

import time
from collections.abc import Coroutine, Mapping
from functools import partial
from typing import Any, ClassVar, TypedDict, Unpack

import attrs
import trio

from ._agent import Agent
from ._approval import approve, grant, reject
from ._cancelled import unwrapped
from ._core.execute import (
    continued_state,
    execute,
    instruct,
    load_live,
    new_state,
    reopen,
    result_of,
    spawn_child,
)
from ._core.run import Ledger, LiveRun
from ._deps import DepsT, check_deps
from ._events import EventSink
from ._exceptions import StateError
from ._feed import EventFeed
from ._hub import EventHub, Tracer
from ._keeper import LEASE_TTL, TreeKeeper
from ._model.margin import Calibration, Margin
from ._model.provider import Provider
from ._model.retry import RetryPolicy
from ._output import OutputT
from ._prices import PriceTable
from ._pricing import Pricing
from ._result import RunResult
from ._settings import ModelSettings
from ._state import Interruption, Limits
from ._stores.contract import Store
from ._stores.memory import MemoryStore
from ._stores.shared import process_owner
from ._streaming import TreeStream
from ._sync import blocking
from ._top_ups import TopUp

__all__ = ["Launch", "LaunchOptions", "RunHandle", "Runner"]


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
        return self._runner.hub.feed(self.run_id)

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


@attrs.frozen(kw_only=True)
class Launch:
    """A new root run, as one value: what :meth:`Runner.prepare` takes.

    ``continue_from``: the id of a stopped root run (in the runner's store) that
    this run continues, ``task`` being the next user message (see
    :mod:`orchestra._conversation`; limits count per message). ``metadata`` is
    saved with the run (e.g. what a later process needs to rebuild the agent).
    """

    agent: Agent
    task: str
    limits: Limits | None = None
    run_id: str | None = None
    metadata: dict[str, str] | None = None
    continue_from: str | None = None
    settings: ModelSettings | None = None
    """How this run asks its model, over its agent's settings (field by field)."""
    deps: Any = None
    """What its tools (and its children's) get as ``ctx.deps``; never saved
    (see :mod:`orchestra._deps`)."""


class ResumeOptions(TypedDict, total=False):
    """The options of :meth:`Runner.resume` beside its agent and run id."""

    deps: Any
    limits: Limits | None
    note: str


def agent_and_id(
    first: Agent[DepsT, OutputT] | str, second: str | Agent[DepsT, OutputT]
) -> tuple[Agent[DepsT, OutputT], str]:
    """``(agent, run_id)`` of a resume given them in either order.

    Raises:
        TypeError: one is not an Agent or the other not a run id, in one line.
    """
    if isinstance(first, Agent) and isinstance(second, str):
        return first, second
    if isinstance(first, str) and isinstance(second, Agent):
        return second, first
    got = f"{type(first).__name__}, {type(second).__name__}"
    raise TypeError(f"resume takes an Agent and a run id (resume(agent, run_id)), got ({got})")


class LaunchOptions(TypedDict, total=False):
    """The options of :class:`Launch` beside its agent and task (``**options``
    of :meth:`Runner.run`, :meth:`Runner.start`, :meth:`Runner.run_sync` and
    ``orchestra.aio``)."""

    limits: Limits | None
    run_id: str | None
    metadata: dict[str, str] | None
    continue_from: str | None
    settings: ModelSettings | None
    deps: Any


@attrs.define(kw_only=True, eq=False)
class Runner:
    """Runs agents against a provider, keeping their states in a store.

    A façade over three parts with one job each: :attr:`pricing` (what calls
    cost, prompt margins), :attr:`hub` (every event, to the sink, the tracer,
    live readers and the store) and :attr:`keeper` (the live runs, their
    fenced saves, leases and cancels; see :mod:`orchestra._keeper`).

    Attributes:
        provider: where model calls go.
        providers: more providers, by name: an agent whose model is written
            ``NAME:MODEL`` (``"anthropic:claude-sonnet-4-5"``) is asked through
            ``providers[NAME]`` for ``MODEL``, so one tree may mix providers.
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
        owner: how this process names itself on the leases it takes.
    """

    provider: Provider
    providers: Mapping[str, Provider] = attrs.field(factory=dict)
    prices: PriceTable = PriceTable()
    store: Store = attrs.Factory(MemoryStore)
    sink: EventSink | None = None
    prompt_margin: Margin = Margin()
    calibration: Calibration = attrs.Factory(Calibration)
    poll_interval: float = 0.05
    lease_ttl: float = LEASE_TTL
    retry: RetryPolicy = RetryPolicy()
    tracer: Tracer | None = None
    ledger: Ledger | None = None
    owner: str = attrs.field(factory=process_owner)
    pricing: Pricing = attrs.field(init=False)
    hub: EventHub = attrs.field(init=False)
    keeper: TreeKeeper = attrs.field(init=False)
    KEEPER: ClassVar[type[TreeKeeper]] = TreeKeeper
    """The kind of keeper a runner of this class builds (a worker's fences its
    saves by its step's claim)."""
    _clock_origin: tuple[float, float] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.pricing = Pricing(
            provider=self.provider,
            prices=self.prices,
            prompt_margin=self.prompt_margin,
            calibration=self.calibration,
        )
        self.hub = EventHub(clock=self.now, sink=self.sink, tracer=self.tracer)
        self.keeper = self.KEEPER(
            store=self.store,
            owner=self.owner,
            poll_interval=self.poll_interval,
            lease_ttl=self.lease_ttl,
        )

    def now(self) -> float:
        """Wall-clock seconds, advancing with trio's clock (so a MockClock moves it too)."""
        if self._clock_origin is None:
            self._clock_origin = (time.time(), trio.current_time())
        wall, trio0 = self._clock_origin
        return wall + trio.current_time() - trio0

    def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Cancel a run executing in this process, and its subtree (each ends
        ``interrupted`` with ``reason``). False if no such run executes here.
        Not a checkpoint."""
        return self.keeper.cancel(run_id, reason)

    def _providers(self) -> list[Provider]:
        """Every provider this runner asks (their connections are released after a
        run from plain code)."""
        return [self.provider, *self.providers.values()]

    # -- starting runs --------------------------------------------------------

    async def run(
        self, agent: Agent[DepsT, OutputT], task: str, **options: Unpack[LaunchOptions]
    ) -> RunResult[OutputT]:
        """Run ``agent`` on ``task`` as a root run until it stops; its result
        (``options``: see :class:`Launch`).

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
        handle = self.prepare(Launch(agent=agent, task=task, **options))
        with unwrapped():
            return await self._root(handle._live)

    def run_sync(
        self, agent: Agent[DepsT, OutputT], task: str, **options: Unpack[LaunchOptions]
    ) -> RunResult[OutputT]:
        """:meth:`run` from plain code (a script, a notebook cell): blocks until the
        tree stops; its result. Works with an asyncio loop running in this
        thread too (the tree then runs in a thread of its own). See
        :mod:`orchestra._sync`; from asyncio code use ``orchestra.aio``."""
        return blocking(self._providers(), partial(self.run, agent, task, **options))

    def stream_sync(
        self, agent: Agent[DepsT, OutputT], task: str, **options: Unpack[LaunchOptions]
    ) -> TreeStream[OutputT]:
        """Start a tree in a thread of its own and read it from plain code: iterate
        the stream for each event as it happens, or ``.text()`` for the root's
        words; ``.result`` once it stopped (see :mod:`orchestra._streaming`).

        Raises:
            ConfigError: the tree cannot start (its error, here, at once).
        """
        return TreeStream(partial(self.start, agent=agent, task=task, **options), self._providers())

    def resume_sync(
        self,
        agent: Agent[DepsT, OutputT] | str,
        run_id: str | Agent[DepsT, OutputT],
        **options: Unpack[ResumeOptions],
    ) -> RunResult[OutputT]:
        """:meth:`resume` from plain code, as :meth:`run_sync`."""
        return blocking(self._providers(), partial(self.resume, agent, run_id, **options))

    async def start(
        self, nursery: trio.Nursery, agent: Agent, task: str, **options: Unpack[LaunchOptions]
    ) -> RunHandle:
        """Start a root run in ``nursery``; a handle to cancel it or wait for it
        (``options``: see :class:`Launch`)."""
        handle = self.prepare(Launch(agent=agent, task=task, **options))
        nursery.start_soon(self.execute, handle)
        return handle

    def prepare(self, launch: Launch) -> RunHandle:
        """The handle of a new root run, not started yet: :meth:`execute` runs it
        (in the task the caller has for the tree, as ``orchestra.aio`` does).

        Raises:
            RunNotFound: no run ``launch.continue_from`` in the store.
            StateError: that run cannot be continued (running, a child, another agent's).
        """
        agent = launch.agent
        limits = (launch.limits or agent.limits).anchored(self.now())
        run_id, metadata, settings = launch.run_id, launch.metadata, launch.settings
        if launch.continue_from is None:
            state = new_state(agent, launch.task, limits, None, None, run_id, metadata, settings)
        else:
            earlier = self.store.load(launch.continue_from)
            state = continued_state(earlier, agent, launch.task, limits, run_id, metadata, settings)
        check_deps(agent.name, agent.deps_type, launch.deps, "start")
        live = LiveRun(state=state, agent=agent, runner=self, deps=launch.deps)
        if launch.continue_from is None:
            instruct(live)
        return RunHandle(run_id=state.run_id, live=live, runner=self)

    async def execute(self, handle: RunHandle) -> RunResult:
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
        self,
        agent: Agent[DepsT, OutputT] | str,
        run_id: str | Agent[DepsT, OutputT],
        **options: Unpack[ResumeOptions],
    ) -> RunResult[OutputT]:
        """Continue a saved root run from where it stopped; its result.

        ``resume(agent, run_id)``, as ``run(agent, task)``; the older order
        ``resume(run_id, agent)`` is taken too. ``deps``: the run's dependencies,
        given again (they are never saved); ``limits``: raised limits (``note``:
        why, recorded with the raise).

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
        agent, run_id = agent_and_id(agent, run_id)
        deps = options.get("deps")
        check_deps(agent.name, agent.deps_type, deps, "resume")
        live = load_live(self, run_id, agent, None, deps)
        if live.state.parent_id is not None:
            raise StateError(f"run {run_id} is a child run; resume its root {live.state.root_id}")
        reopen(live, options.get("limits"), options.get("note", ""))
        with unwrapped():
            return await self._root(live)

    def approve(self, run_id: str, call_id: str | None = None) -> Interruption:
        """Approve the call run ``run_id``'s tree waits on; then :meth:`resume` it."""
        return approve(self.store, run_id, call_id)

    def reject(self, run_id: str, call_id: str | None = None, reason: str = "") -> Interruption:
        """Reject the waiting call (``reason``: its tool result), or refuse a budget
        request (the run ends with its answer so far). Then :meth:`resume`."""
        return reject(self.store, run_id, call_id, reason)

    def grant(
        self, run_id: str, *, usd: float = 0.0, turns: int = 0, tokens: int = 0
    ) -> Interruption:
        """Grant the budget request ``run_id``'s tree waits on (see
        :func:`~orchestra._approval.grant`: StateError if refused); then :meth:`resume`."""
        return grant(self.store, run_id, TopUp(usd=usd, turns=turns, tokens=tokens))

    def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        deps: Any = None,
    ) -> Coroutine[Any, Any, str]:
        """Run ``agent`` as a child of ``parent``; its answer (used by agent tools).

        Returns the coroutine to await rather than awaiting it here: every run
        of a tree sits under this call, and a frame less under each is what a
        cancel of the tree unwinds (and frees) less.
        """
        return spawn_child(self, parent, call_id, agent, task, limits=limits, deps=deps)

    async def _root(self, live: LiveRun) -> RunResult:
        """Execute the root ``live`` while the keeper holds its tree; its result.
        However the tree ended (a lease refused, a store error), its readers end."""
        root_id = live.state.run_id
        try:
            await self.keeper.hold(root_id, partial(execute, live))
        finally:
            self.hub.end_feeds(root_id)
        return result_of(live)
