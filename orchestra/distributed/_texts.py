"""What runs executing on workers stream now, for a reader in another process
(the web console).

Embedded, the process running a tree notes each run's streaming text in the
store (``live_text``); a worker does not (a write per piece would hold up its
loop). :class:`FollowingStore` is a PostgreSQL store whose
:meth:`~FollowingStore.streaming_texts` follows each tree it is asked about (a
:class:`~._follow.Follower` on a thread of its own, so the workers publish
the tree's live events) and keeps each run's text from its deltas: begun at
its ``model_request``, dropped at its ``turn``, ``reply_cut`` or
``run_stopped``. A tree is followed until its root stops, or until nobody
asked about it for :data:`LINGER_S`.
"""

from __future__ import annotations

import contextlib
import threading
import time

from .._events import Event
from .._exceptions import StoreError
from ._follow import TICK_S, Follower
from ._pgstore import PostgresStore

__all__ = ["LINGER_S", "FollowingStore", "StreamingTexts"]

LINGER_S = 30.0
"""A tree nobody asked about for this long is no longer followed."""
KEPT = 2000
"""Characters of a run's streaming text kept (its end)."""
_ENDS = frozenset({"turn", "reply_cut", "run_stopped"})


class _Tree:
    """One followed tree: its runs' streaming texts, kept by a thread."""

    def __init__(self, database: str, root_id: str) -> None:
        self.texts: dict[str, str] = {}
        self.asked = time.monotonic()
        self.ended = False
        self.stopping = threading.Event()
        self._follower = Follower(database, root_id)
        self._thread = threading.Thread(target=self._follow, daemon=True, name="orchestra follow")
        self._thread.start()

    def _follow(self) -> None:
        try:
            self._follower.open()
            while not self._follower.done and not self.stopping.is_set():
                if time.monotonic() - self.asked > LINGER_S:
                    return
                for event in self._follower.poll(TICK_S):
                    self._apply(event)
            self.ended = self._follower.done
        except StoreError:
            return  # asked again, it is followed again
        finally:
            self._follower.close()
            self.texts = {}

    def _apply(self, event: Event) -> None:
        texts = dict(self.texts)  # replaced whole: readers on other threads see one or the other
        if event.type == "model_request":
            texts[event.run_id] = ""
        elif event.type == "text_delta":
            texts[event.run_id] = (texts.get(event.run_id, "") + event.data["text"])[-KEPT:]
        elif event.type in _ENDS:
            texts.pop(event.run_id, None)
        self.texts = texts

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(TICK_S * 4 + 5)


class StreamingTexts:
    """The streaming texts of the trees asked about (see the module docstring)."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._trees: dict[str, _Tree] = {}

    def texts(self, root_id: str) -> dict[str, str]:
        """What each run of tree ``root_id`` streams now, as far as its live
        events said (following it from now on, if it was not)."""
        with self._lock:
            tree = self._trees.get(root_id)
            if tree is None or (not tree.alive and not tree.ended):
                tree = self._trees[root_id] = _Tree(self._database, root_id)
            tree.asked = time.monotonic()
            return dict(tree.texts)

    def close(self) -> None:
        """Stop following every tree (waits for their threads)."""
        with self._lock:
            trees, self._trees = list(self._trees.values()), {}
        for tree in trees:
            tree.stop()


class FollowingStore(PostgresStore):
    """A :class:`PostgresStore` whose stream notes include what runs on workers
    stream (see the module docstring): for readers such as the console."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._streaming = StreamingTexts(url)

    def streaming_texts(self, root_id: str) -> dict[str, str]:
        """What each run of the tree ``root_id`` is streaming now, by run id."""
        noted = super().streaming_texts(root_id)
        return {**noted, **self._streaming.texts(root_id)}

    def close(self) -> None:
        """Stop following, then close the connections."""
        with contextlib.suppress(AttributeError):  # closed by a failed __init__
            self._streaming.close()
        super().close()
