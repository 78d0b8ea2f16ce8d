"""The tree keeper: the runs a runner executes, their saves, leases and cancels.

Cancellation: a cancel of a root cancels its whole subtree through trio cancel
scopes; the stopped runs are saved together, in one transaction, once the
whole tree has stopped (:class:`_Batch`). With a store that takes cancel
requests (the SQLite store), another process can ask for the same
(``orchestra cancel``); one watcher per keeper, whatever the number of trees
it keeps, polls for such requests every ``poll_interval`` seconds (one query).

Leases: with a store that keeps leases, a root run is executed only while
this keeper holds its tree's lease (renewed by the watcher). Every save is
fenced by that lease (see :meth:`TreeKeeper.save`): if the process stalls past
its lease and another takes the tree over, the keeper stops the tree before
its next effect, saves nothing more, and :meth:`TreeKeeper.hold` raises
:class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from ._core.run import LiveRun
from ._events import EventRecord
from ._exceptions import LeaseError, LeaseLost, StoreError
from ._state import RunState, Status
from ._stores.contract import CancelInbox, Leases, Store, StreamNote, StreamNotes
from ._stores.fence import Fence
from ._stores.shared import process_owner

__all__ = ["LEASE_TTL", "TreeKeeper"]

LEASE_TTL = 30.0


@attrs.define(kw_only=True, eq=False)
class TreeKeeper:
    """The runs executing in this process, their saves (fenced by their tree's
    lease), their cancels (from this process or, through the store, another)
    and the notes of what they stream.

    ``keeps_streams``: whether stream notes go to the store (if it keeps them).
    """

    store: Store
    owner: str = attrs.field(factory=process_owner)
    poll_interval: float = 0.05
    lease_ttl: float = LEASE_TTL
    keeps_streams: bool = True
    _live: dict[str, LiveRun] = attrs.field(factory=dict, init=False)
    _lost: dict[str, str] = attrs.field(factory=dict, init=False)
    _stopping: dict[str, _Batch] = attrs.field(factory=dict, init=False)
    """Trees being cancelled: their saves wait to be made together."""
    _watched: dict[str, float] = attrs.field(factory=dict, init=False)
    """Trees kept with a lease, and when each lease is next renewed."""
    _fences: dict[str, Fence] = attrs.field(factory=dict, init=False)
    """The lease taken on each tree kept (its saves are fenced by it)."""
    _poller: trio.Event | None = attrs.field(default=None, init=False)
    """Set when the watcher that polls for every tree stops (another takes over)."""
    _inbox: CancelInbox | None = attrs.field(default=None, init=False)
    _leases: Leases | None = attrs.field(default=None, init=False)
    _notes: StreamNotes | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        # what the store can do, read once
        self._inbox, self._leases = self.store.inbox, self.store.leases
        self._notes = self.store.stream_notes if self.keeps_streams else None

    # -- stream notes ---------------------------------------------------------

    def note_stream(self, run: LiveRun, stream: StreamNote | None) -> None:
        """Note what ``run`` is streaming now (None: it is not), if the store keeps it
        (see :class:`~orchestra._stores.contract.StreamNotes`). A store that fails this
        write fails the run's next save, not the stream."""
        if self._notes is None:
            return
        with contextlib.suppress(StoreError):
            self._notes.note_stream(run.state.run_id, run.state.root_id, stream)

    @property
    def notes_streams(self) -> bool:
        """Whether the store keeps notes of streams (see :meth:`note_stream`)."""
        return self._notes is not None

    def lost_stream(self, run: LiveRun) -> StreamNote | None:
        """What ``run`` was streaming when the process running it stopped, if noted."""
        return None if self._notes is None else self._notes.stream_note(run.state.run_id)

    # -- saves ------------------------------------------------------------------

    def save(self, state: RunState, events: Sequence[EventRecord] = ()) -> None:
        """Save ``state`` fenced by the lease on its tree.

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
            self.lose(state.root_id, str(exc))
            raise

    def _save_stopped(self, root_id: str) -> None:
        """Save the runs of a cancelled tree together (one transaction if the store can)."""
        batch = self._stopping.pop(root_id, None)
        if batch is None or not batch.states:
            return
        try:
            self.store.save_many(
                list(batch.states.values()), batch.events, fence=self.fence(root_id)
            )
        except LeaseLost as exc:
            self.lose(root_id, str(exc))

    def fence(self, root_id: str) -> Fence | None:
        """What saves of tree ``root_id`` are fenced by: the lease taken on the tree
        (None: the store keeps no leases)."""
        return self._fences.get(root_id)

    def lost_lease(self, root_id: str) -> bool:
        """Whether the lease on tree ``root_id`` was lost (nothing may be saved)."""
        return root_id in self._lost

    def lose(self, root_id: str, why: str) -> None:
        """A save found the tree's lease taken over: the tree is cancelled here and
        saves nothing more."""
        self._lost.setdefault(root_id, why)
        self.cancel(root_id, "this process lost the lease on the run tree")

    # -- the live runs ------------------------------------------------------------

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
            self._stopping.setdefault(run_id, _Batch())  # its tree is saved at once when stopped
        run.request_cancel(reason)
        return True

    # -- holding a tree -------------------------------------------------------------

    async def hold(self, root_id: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run ``body`` (the tree's execution) holding tree ``root_id``: its lease
        taken, its cancel requests watched, and the tree let go after it (a
        cancelled tree's runs saved together first), however it ended.

        Raises:
            LeaseError: another process holds the tree.
            LeaseLost: this process lost the tree while ``body`` ran.
        """
        self._lost.pop(root_id, None)
        inbox = self._inbox
        if self._leases is not None:
            self._fences[root_id] = self._leases.acquire_lease(
                root_id, self.owner, ttl=self.lease_ttl
            )
        if inbox is not None:
            inbox.clear_cancels(root_id)  # requests nobody applied are stale
        try:
            async with trio.open_nursery() as nursery:
                if inbox is not None:
                    nursery.start_soon(self._watch, root_id, inbox)
                await body()
                nursery.cancel_scope.cancel()
        finally:
            self._stop_tree(root_id)
        if root_id in self._lost:
            raise LeaseLost(self._lost.pop(root_id))

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

        One watcher at a time polls for every tree of this keeper; the others
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
            self.lose(root_id, str(exc))
        else:
            self._watched[root_id] = now + self.lease_ttl / 3


@attrs.define(eq=False)
class _Batch:
    """The saves of a tree being cancelled, kept to be made together."""

    states: dict[str, RunState] = attrs.Factory(dict)
    events: list[EventRecord] = attrs.Factory(list)

    def add(self, state: RunState, events: Sequence[EventRecord]) -> None:
        self.states[state.run_id] = state  # the live state: saved as it is at the end
        self.events.extend(events)
