"""The store contract: what the runner, the approvals, the CLI, the console and
the workers may ask of a store, written as typed protocols.

Three parts, each a protocol::

    Store           run states and events; every store (memory, SQLite, PostgreSQL)
    CancelInbox     cancel requests left by one process for the one running a tree
    Leases          who executes a tree, with fencing tokens (see :mod:`.fence`)
    StreamNotes        the text each run is streaming now, for readers in other processes
    DurableStore    all four: a store other processes share (SQLite, PostgreSQL)

A :class:`Store` says which of the other two it offers through its
:attr:`Store.inbox` and :attr:`Store.leases` (itself, or None): a
:class:`~orchestra.Runner` reads them once, when it is built, and never looks
a method up by name. ``tests/stores/test_contract.py`` holds every store to
the same behaviour.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import attrs

from .._events import EventRecord
from .._state import RunState
from .fence import Fence

__all__ = ["CancelInbox", "DurableStore", "Leases", "Store", "StreamNote", "StreamNotes"]


class CancelInbox(Protocol):
    """Cancel requests: ``orchestra cancel`` in one process, applied by the one
    running the tree (its watcher polls :meth:`pending_cancels`)."""

    def request_cancel(self, run_id: str, reason: str) -> None:
        """Ask whichever process runs ``run_id``'s tree to cancel that run (a newer
        request replaces an older one's reason). Raises ``RunNotFound``."""
        ...

    def pending_cancels(self, root_id: str | None = None) -> dict[str, str]:
        """Requests for the tree ``root_id`` (every tree if None): reason by run id,
        oldest first."""
        ...

    def clear_cancel(self, run_id: str) -> None:
        """Forget the request for ``run_id`` (it has been applied)."""
        ...

    def clear_cancels(self, root_id: str) -> None:
        """Forget every request of the tree ``root_id`` (taken or let go)."""
        ...


class Leases(Protocol):
    """One process executes a tree at a time; its writes are fenced by its lease."""

    def acquire_lease(
        self, root_id: str, owner: str, ttl: float = 30.0, now: float | None = None
    ) -> Fence:
        """Take (or extend) the tree's lease; the fence of this taking, at the tree's
        next epoch. Raises ``LeaseError`` while another owner holds it."""
        ...

    def renew_lease(
        self, root_id: str, owner: str, ttl: float = 30.0, now: float | None = None
    ) -> None:
        """Extend ``owner``'s lease. Raises ``LeaseError`` if it does not hold it."""
        ...

    def lease_holder(self, root_id: str, now: float | None = None) -> str | None:
        """The owner of the tree's live lease, or None."""
        ...

    def release_lease(self, root_id: str, owner: str) -> None:
        """Drop ``owner``'s lease (another owner's is left alone)."""
        ...

    def let_go(self, root_id: str, owner: str) -> None:
        """Clear the tree's cancel requests and release ``owner``'s lease, at once."""
        ...


@attrs.frozen(kw_only=True)
class StreamNote:
    """What a run is streaming now: the text so far (its end) and, by our count,
    the tokens that arrived, with the prompt reserved for the call and its cap."""

    text: str
    tokens: int = 0
    prompt: int = 0
    cap: int = 0

    @property
    def counts(self) -> tuple[int, int, int]:
        return self.tokens, self.prompt, self.cap


class StreamNotes(Protocol):
    """What each run is streaming now, noted by the process running it as each
    piece arrives: readers in other processes show the text (the web console),
    and a resume after that process died charges the tokens that had arrived.

    A save of the run clears its note in the same transaction (what the stream
    cost is then in the state saved), so a stream is charged once.
    """

    def note_stream(self, run_id: str, root_id: str, stream: StreamNote | None) -> None:
        """Note what run ``run_id`` is streaming now; None: it is not (cleared)."""
        ...

    def stream_note(self, run_id: str) -> StreamNote | None:
        """What run ``run_id`` was streaming when last noted, if it was."""
        ...

    def streaming_texts(self, root_id: str) -> dict[str, str]:
        """What each run of the tree ``root_id`` is streaming now, by run id."""
        ...


class Store(Protocol):
    """Run states and their events. ``save`` is synchronous and atomic: a run's
    state is replaced whole or not at all, with its events."""

    @property
    def inbox(self) -> CancelInbox | None:
        """The store's cancel requests, if other processes can leave some."""
        ...

    @property
    def leases(self) -> Leases | None:
        """The store's leases, if it keeps any (then saves are fenced by them)."""
        ...

    @property
    def stream_notes(self) -> StreamNotes | None:
        """Where the text runs are streaming is kept, if other processes read it."""
        ...

    def save(
        self, state: RunState, events: Sequence[EventRecord] = (), *, fence: Fence | None = None
    ) -> None:
        """Replace the saved state of ``state.run_id`` and append ``events``, atomically.

        With ``fence`` (a lease or a claim the store granted), only if that
        fence is still current, checked in the same transaction; raises
        :class:`~orchestra.LeaseLost` otherwise.
        """
        ...

    def save_many(
        self,
        states: Sequence[RunState],
        events: Sequence[EventRecord] = (),
        *,
        fence: Fence | None = None,
    ) -> None:
        """Save several states and ``events``, all or none (fenced as :meth:`save`)."""
        ...

    def load(self, run_id: str) -> RunState:
        """The last saved state. Raises ``RunNotFound``."""
        ...

    def update(self, run_id: str, change: Callable[[RunState], RunState | None]) -> RunState:
        """Compare-and-swap: read the saved state and save ``change``'s version of it
        in one transaction that no other writer of the run interleaves with
        (``change`` returning None writes nothing; what it raises writes
        nothing). The state saved, or read. Raises ``RunNotFound``."""
        ...

    def tree(self, root_id: str) -> list[RunState]:
        """Every run of the tree: the root, then by creation time. Raises ``RunNotFound``."""
        ...

    def list_runs(self, *, limit: int = 50, roots_only: bool = True) -> list[RunState]:
        """Up to ``limit`` runs, most recently updated first (only roots by default)."""
        ...

    def resolve(self, prefix: str) -> str:
        """The run id ``prefix`` starts (an exact id wins). Raises ``RunNotFound``,
        ``StateError`` (ambiguous) or ``ConfigError`` (empty)."""
        ...

    def add_events(self, events: Iterable[EventRecord], *, fence: Fence | None = None) -> None:
        """Append events, all or none (fenced as :meth:`save`)."""
        ...

    def events(self, run_id: str | None = None, root_id: str | None = None) -> list[EventRecord]:
        """Events in the order they were added, for one run or one tree (or all)."""
        ...

    def close(self) -> None:
        """Let go of the store's resources; closing twice is fine."""
        ...


class DurableStore(Store, CancelInbox, Leases, StreamNotes, Protocol):
    """A store several processes share: cancel requests and leases included."""

    @property
    def path(self) -> str | os.PathLike[str]:
        """What ``--store`` takes to open this store again (a file, or a URL whose
        password it keeps: never print it)."""
        ...

    @property
    def shown(self) -> str:
        """The store as messages and pages show it (never a password)."""
        ...

    @property
    def inbox(self) -> CancelInbox:
        """Itself."""
        ...

    @property
    def leases(self) -> Leases:
        """Itself."""
        ...

    @property
    def stream_notes(self) -> StreamNotes:
        """Itself."""
        ...
