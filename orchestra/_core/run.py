"""A live run: its state plus the objects that only exist while it runs.

``LiveRun`` is the node of the run tree in memory: it links to its parent and
children, holds the budget reserved by calls in flight in its subtree, its
cancel scope and its message counter. Everything worth keeping is in
``state``; the rest is rebuilt when a saved run is resumed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
import trio

from .._agent import Agent
from .._events import EventRecord
from .._exceptions import LeaseLost
from .._model.tokens import MessageCounter
from .._money import to_usd
from .._redact import redact
from .._settings import ModelSettings
from .._state import Interruption, Limits, RunState, Status, Usage

if TYPE_CHECKING:
    from .._model.margin import Margin
    from .._model.provider import Provider
    from .._model.retry import RetryPolicy
    from .._money import Price
    from .._prices import PriceTable
    from .._stores.contract import StreamNote
    from .._stores.memory import Store

__all__ = [
    "ChildPending",
    "ChildWaiting",
    "Emitter",
    "Exit",
    "Host",
    "Keeper",
    "Ledger",
    "LiveRun",
    "Pricer",
]

_DEFAULTS = ModelSettings()
"""The settings of a run that saved none: the server's defaults."""


_T = TypeVar("_T")


class Ledger(Protocol):
    """Budget numbers shared with runs in other processes (see :mod:`orchestra.distributed`).

    Without one (the default), a tree's numbers live in its runs' memory.
    """

    async def guarded(self, run: LiveRun, decide: Callable[[], _T]) -> _T:
        """Call ``decide`` (a budget decision over ``run``'s lineage) atomically
        with every other process: the lineage's tree usage and reservations
        are loaded (locked) before it, and what it changed is written after.

        Cancellation: a cancel before it runs leaves nothing changed.
        """
        ...

    async def released(self, run: LiveRun, release: Callable[[], _T]) -> _T:
        """As :meth:`guarded`, for releasing a call's reservation and charging
        its real cost: tried again while the ledger cannot be reached, so the
        real cost is recorded rather than the reservation charged later.

        Cancellation: the caller shields it.
        """
        ...


class Pricer(Protocol):
    """What calls cost and how much prompt slack to reserve
    (:class:`orchestra._pricing.Pricing`)."""

    @property
    def prices(self) -> PriceTable: ...

    @property
    def endpoint(self) -> str | None: ...

    def price_of(self, model: str) -> Price: ...

    def margin_for(self, model: str) -> Margin:
        """The prompt margin for the next call of ``model``."""
        ...

    def observe_prompt(self, model: str, *, ours: int, theirs: int, messages: int) -> None:
        """Learn how the provider counts ``model``'s prompts."""
        ...


class Emitter(Protocol):
    """Where a run's events go (:class:`orchestra._hub.EventHub`)."""

    def emit(self, run: LiveRun, type_: str, data: dict[str, Any]) -> None:
        """Record event ``type_`` about ``run`` (``data``: not redacted yet)."""
        ...

    def delta(self, run: LiveRun, text: str, tokens: int) -> None:
        """A piece of a streamed reply's text (to live readers only, never saved)."""
        ...


class Keeper(Protocol):
    """What keeps the live runs: saves, leases, stream notes
    (:class:`orchestra._keeper.TreeKeeper`)."""

    def note_stream(self, run: LiveRun, stream: StreamNote | None) -> None:
        """Note what ``run`` is streaming now (None: it is not), if the store keeps it."""
        ...

    def lost_stream(self, run: LiveRun) -> StreamNote | None:
        """What ``run`` was streaming when the process running it stopped, if noted."""
        ...

    @property
    def notes_streams(self) -> bool:
        """Whether the store keeps notes of streams (see :meth:`note_stream`)."""
        ...

    def save(self, state: RunState, events: Sequence[EventRecord] = ()) -> None:
        """Save ``state`` (fenced by the tree's lease)."""
        ...

    def lost_lease(self, root_id: str) -> bool:
        """Whether this process lost the tree's lease."""
        ...

    def register(self, run: LiveRun) -> None:
        """Note ``run`` as live (cancellable by id)."""
        ...

    def unregister(self, run: LiveRun) -> None:
        """Forget ``run`` once it stopped."""
        ...


class Host(Protocol):
    """What a run needs from whatever runs it (a :class:`~orchestra.Runner`): its
    provider, store and ledger, and three parts with one job each.

    The layers below the runner (execute, loop, budget, dispatch) see the
    runner only through this, so they never import it.
    """

    provider: Provider
    providers: Mapping[str, Provider]
    """More providers by name, for models written ``NAME:MODEL`` (see :attr:`LiveRun.route`)."""
    retry: RetryPolicy
    store: Store
    ledger: Ledger | None

    @property
    def pricing(self) -> Pricer:
        """What calls cost, and the prompt margins."""
        ...

    @property
    def hub(self) -> Emitter:
        """Where the runs' events go."""
        ...

    @property
    def keeper(self) -> Keeper:
        """What keeps the live runs and saves them."""
        ...

    def now(self) -> float:
        """Wall-clock seconds, advancing with trio's clock."""
        ...

    def spawn_child(
        self,
        parent: LiveRun,
        call_id: str,
        agent: Agent,
        task: str,
        *,
        limits: Limits | None = None,
        deps: Any = None,
    ) -> Awaitable[str]:
        """Run a child of ``parent`` for call ``call_id``; its answer as text (awaited;
        ``deps``: the child's dependencies, None: the parent's)."""
        ...


@attrs.frozen(kw_only=True)
class Exit:
    """How a run ends: a status and its reason, as data."""

    status: Status
    reason: str = ""
    error: str | None = None
    interruption: Interruption | None = None


class ChildWaiting(Exception):
    """Internal: a child run stopped to wait for a human; its parent must stop too.

    Raised by an agent tool instead of returning a result, so the parent's
    call stays pending and resuming the parent resumes the child.
    """

    def __init__(self, interruption: Interruption) -> None:
        super().__init__(interruption.reason)
        self.interruption = interruption


class ChildPending(Exception):
    """Internal: a child run executes elsewhere (on a worker) and has not ended.

    Raised by an agent tool instead of returning a result: the parent's call
    stays pending, the parent *parks* (its step ends, holding no worker) and
    is taken up again once its children have ended; the call then gets the
    child's saved answer (see :mod:`orchestra.distributed._host`).
    """

    def __init__(self, child_id: str) -> None:
        super().__init__(f"child run {child_id} has not ended")
        self.child_id = child_id


@attrs.define(kw_only=True, eq=False)
class LiveRun:
    """One run of the tree while it executes."""

    state: RunState
    agent: Agent
    runner: Host
    parent: LiveRun | None = None
    children: list[LiveRun] = attrs.Factory(list)
    counter: MessageCounter = attrs.Factory(MessageCounter)
    reserved_pico: int = 0
    reserved_turns: int = 0
    reserved_tokens: int = 0
    scope: trio.CancelScope | None = None
    cancel_reason: str | None = None
    cut_streams: int = 0
    """Streamed replies cut in a row (reset by a whole reply): past the retry
    policy's attempts, the provider is taken as unavailable."""
    events: list[EventRecord] = attrs.Factory(list)
    """Events emitted since the last save; they are stored with the next one."""
    deadline: float = float("inf")
    """Trio-clock deadline of this run (already the min over its ancestors)."""
    clock_started: float | None = None
    """Trio time this process started executing the run (its elapsed time is
    added to ``state.elapsed_s`` when it finishes)."""
    parked: bool = False
    """Whether a call of this step waits for a child run executing elsewhere
    (:class:`ChildPending`): the step ends with the call pending."""
    child_slots: trio.Semaphore | None = None
    """Held by each child running (``Limits.max_concurrent_children``; made on first use)."""
    plans: list[Any] = attrs.Factory(list)
    """How the children of this run's replies share its budget (:class:`orchestra._core.fair.Plan`;
    in memory only: a run taken up again plans the children it has not started)."""
    deps: Any = None
    """The run's dependencies (see :mod:`orchestra._deps`): in memory only, never saved."""
    estimated: int = 0
    """Replies this process charged without the server's usage (as estimated:
    see :func:`~orchestra._core.budget.settle`); the run's reason says so."""

    _lineage: tuple[LiveRun, ...] = attrs.field(init=False, repr=False)
    """This run and its ancestors (a run's parent never changes)."""

    @_lineage.default
    def _lineage_of(self) -> tuple[LiveRun, ...]:
        return (self,) if self.parent is None else (self, *self.parent._lineage)

    def lineage(self) -> tuple[LiveRun, ...]:
        """This run, then its parent, up to the root."""
        return self._lineage

    @property
    def route(self) -> tuple[Provider, str]:
        """The provider this run's calls go to, and the model name they send: a model
        written ``NAME:MODEL`` goes to the runner's provider called ``NAME`` as
        ``MODEL``; any other (or an unknown ``NAME``) to the runner's provider."""
        name, colon, model = self.state.model.partition(":")
        chosen = self.runner.providers.get(name) if colon else None
        return (self.runner.provider, self.state.model) if chosen is None else (chosen, model)

    @property
    def settings(self) -> ModelSettings:
        """How this run asks its model (saved with it: see :attr:`RunState.settings`)."""
        return self.state.settings or _DEFAULTS

    @property
    def reply_cap(self) -> int:
        """The most tokens a reply may use before the budget gate lowers it: the
        run's ``settings.max_tokens`` if set, else its agent's ``max_tokens``."""
        return self.settings.max_tokens or self.agent.max_tokens

    def subtree(self) -> Iterator[LiveRun]:
        """This run and every live descendant."""
        yield self
        for child in self.children:
            yield from child.subtree()

    # -- accounting ----------------------------------------------------------

    def charge(self, usage: Usage) -> None:
        """Add ``usage`` to this run's own counters and to every ancestor's tree."""
        self.state.own = self.state.own + usage
        for node in self.lineage():
            node.state.tree = node.state.tree + usage

    def _left(self, measure: Callable[[LiveRun], int | None]) -> tuple[int, LiveRun] | None:
        """The least ``measure`` over this run's lineage (None: unbounded), and its run."""
        least: tuple[int, LiveRun] | None = None
        for node in self._lineage:
            value = measure(node)
            if value is not None and (least is None or value < least[0]):
                least = (value, node)
        return least

    def available_pico(self) -> int | None:
        """What this run may still commit: the least left over it and its ancestors."""
        left = self._left(_pico_left)
        return None if left is None else left[0]

    def tightest(self, kind: str) -> LiveRun | None:
        """The run of the lineage whose budget (``"usd"`` or ``"tokens"``) leaves the
        least (None: unbounded): whose budget a stop names."""
        left = self._left(_pico_left if kind == "usd" else _tokens_left)
        return None if left is None else left[1]

    def available_tokens(self) -> int | None:
        """Tokens this run may still commit under its and its ancestors' token budgets."""
        left = self._left(_tokens_left)
        return None if left is None else left[0]

    def available_turns(self) -> tuple[int, LiveRun] | None:
        """Model calls this run may still make (``max_turns`` counts the run's own
        calls: its children have turn limits of their own), and the run (itself)."""
        left = _turns_left(self)
        return None if left is None else (left, self)

    def overspent(self) -> tuple[LiveRun, str] | None:
        """The first run of the lineage whose tree spent past a budget, and by how much."""
        for node in self.lineage():
            limits, tree = node.state.limits, node.state.tree
            budget = limits.budget_pico
            if budget is not None and tree.cost_pico > budget:
                over = to_usd(tree.cost_pico - budget)
                return node, f"${to_usd(tree.cost_pico):.6f} spent, ${over:.6f} over"
            cap = limits.max_tokens_total
            if cap is not None and tree.tokens > cap:
                return node, f"{tree.tokens} tokens spent, {tree.tokens - cap} over"
        return None

    def reserve(self, pico: int, turns: int, tokens: int = 0) -> None:
        """Hold ``pico`` and ``tokens`` against this run and every ancestor, and
        ``turns`` against this run (turn limits are a run's own)."""
        self.reserved_turns += turns
        for node in self.lineage():
            node.reserved_pico += pico
            node.reserved_tokens += tokens

    async def decided(self, decide: Callable[[], _T]) -> _T:
        """``decide()`` (a budget decision: a reservation, a release, a carve),
        through the runner's ledger if it has one (workers: one transaction
        over the lineage's locked rows), else here."""
        ledger = self.runner.ledger
        return decide() if ledger is None else await ledger.guarded(self, decide)

    # -- recording -----------------------------------------------------------

    def emit(self, type_: str, **data: Any) -> None:
        """Send one event about this run to the runner's sinks (``data`` is redacted)."""
        self.runner.hub.emit(self, type_, data)

    def request_cancel(self, reason: str) -> None:
        """Cancel this run and its subtree (at once, or as soon as its scope exists)."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    def checkpoint(self) -> None:
        """Save the state now (synchronous: a cancel cannot tear it).

        Raises:
            LeaseLost: this process no longer holds the tree (nothing was saved).
        """
        self.state.updated_at = time.time()
        self.runner.keeper.save(self.state, self.events)
        self.events.clear()

    def stop_clock(self) -> None:
        """Add the time this process executed the run to ``state.elapsed_s``."""
        if self.clock_started is not None:
            self.state.elapsed_s += trio.current_time() - self.clock_started
            self.clock_started = None

    def finish(self, exit_: Exit) -> None:
        """Record the run's one exit, emit ``run_stopped`` and save.

        If this process lost the tree's lease, the exit is recorded in memory
        only: the new holder's saved state is never overwritten.
        """
        s = self.state
        self.stop_clock()
        s.status, s.reason, s.error, s.interruption = (
            exit_.status,
            redact(exit_.reason + estimate_note(self.estimated)),
            None if exit_.error is None else redact(exit_.error),
            exit_.interruption,
        )
        self.emit(
            "run_stopped",
            status=s.status.value,
            reason=s.reason,
            turns=s.turns,
            cost_usd=to_usd(s.own.cost_pico),
            tree_cost_usd=to_usd(s.tree.cost_pico),
            interruption=s.interruption.to_dict() if s.interruption else None,
        )
        self.save_held()

    def save_held(self) -> None:
        """Save, unless this process lost the tree's lease (then the state stays in
        memory: the new holder's saved state is never overwritten)."""
        if not self.runner.keeper.lost_lease(self.state.root_id):
            with contextlib.suppress(LeaseLost):  # the runner has noted it and cancels the tree
                self.checkpoint()


def estimate_note(replies: int) -> str:
    """What the reason of a run adds when ``replies`` of its replies came without
    usage (nothing when none did)."""
    if not replies:
        return ""
    some = "1 reply" if replies == 1 else f"{replies} replies"
    return (
        f" ({some} without usage, charged as estimated: the prompt as reserved, "
        "our count widened by the prompt margin; the reply by our count)"
    )


def _pico_left(node: LiveRun) -> int | None:
    budget = node.state.limits.budget_pico
    return None if budget is None else budget - node.state.tree.cost_pico - node.reserved_pico


def _tokens_left(node: LiveRun) -> int | None:
    budget = node.state.limits.max_tokens_total
    return None if budget is None else budget - node.state.tree.tokens - node.reserved_tokens


def _turns_left(node: LiveRun) -> int | None:
    turns = node.state.limits.max_turns
    return None if turns is None else turns - node.state.own.model_calls - node.reserved_turns
