"""A tree's events and words from plain code: a script, a notebook cell.

:meth:`Runner.stream_sync <orchestra.Runner.stream_sync>` starts a tree in a
thread of its own (its own trio run, so it works where an asyncio loop is
already running, as in a notebook) and returns a :class:`TreeStream`: iterate
it for every event of the tree as it happens (deltas of streamed replies
included, each with its run's depth), or iterate :meth:`TreeStream.text` for
the root's words alone. ``result`` waits for the tree's end.

Cancellation: :meth:`TreeStream.cancel`, or leaving its ``with`` block before
the tree's end (a ``break``, an error, Ctrl-C), stops the whole tree as
``RunHandle.cancel`` does: the tree's runs end ``interrupted``, saved.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (see TreeStream.__init__)
import contextlib
import queue
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol

import trio

from ._cancelled import unwrapped
from ._events import Event
from ._model.provider import Provider
from ._output import OutputT
from ._result import RunResult
from ._sync import release

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["RunningTree", "TreeStream", "root_words", "root_words_async"]


class RunningTree(Protocol):
    """What the stream needs of a started tree (a :class:`~orchestra.RunHandle`)."""

    def events(self) -> AsyncIterable[Event]:
        """Every event of the tree from now on."""
        ...

    async def wait(self) -> RunResult[Any]:
        """The tree's result once it stopped."""
        ...

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the whole tree."""
        ...


_END = object()
EXITED = "the script exited while the tree ran"
"""The reason of a tree a script left running when it ended."""


def _is_root_words(event: Event) -> bool:
    return event.type == "text_delta" and event.depth == 0


def root_words(events: Iterator[Event]) -> Iterator[str]:
    """The text of the root's streamed replies, piece by piece, of ``events``."""
    for event in events:
        if _is_root_words(event):
            yield event.data["text"]


async def root_words_async(events: AsyncIterable[Event]) -> AsyncIterator[str]:
    """:func:`root_words` of an async iterator of events (``orchestra.aio``)."""
    async for event in events:
        if _is_root_words(event):
            yield event.data["text"]


class TreeStream(Generic[OutputT]):
    """A tree running in a thread of its own; its events read from plain code.

    Iterate it once: each event of the tree, as it happens; the iteration ends
    when the tree has stopped. Use it in a ``with`` block so that leaving early
    stops the tree.
    """

    def __init__(
        self,
        start: Callable[[trio.Nursery], Awaitable[RunningTree]],
        providers: Iterable[Provider] = (),
    ) -> None:
        self._providers = list(providers)
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._handle: RunningTree | None = None
        self._result: RunResult[OutputT] | None = None
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(
            target=trio.run, args=(self._main, start), name="orchestra-stream", daemon=True
        )
        # A tree left running stops, saved, as the script ends. Until then it runs
        # on after the main thread finished, when a module that registers an exit
        # hook of its own can no longer be imported (concurrent.futures.thread,
        # which the tokenizer imports on first use): imported above, here.
        atexit.register(self._at_exit)
        self._thread.start()
        self._started.wait()
        if self._handle is None and self._error is not None:
            raise self._error  # the tree could not start (a bad task, missing deps)

    async def _main(self, start: Callable[[trio.Nursery], Awaitable[RunningTree]]) -> None:
        try:
            with unwrapped():
                await self._read(start)
        except Exception as exc:  # handed to the reading thread
            self._error = exc
        finally:
            with trio.CancelScope(shield=True):  # this trio run's pooled connections
                await release(self._providers)
            atexit.unregister(self._at_exit)
            self._started.set()
            self._events.put(_END)

    async def _read(self, start: Callable[[trio.Nursery], Awaitable[RunningTree]]) -> None:
        """Start the tree and queue its events for the reading thread."""
        async with trio.open_nursery() as nursery:
            self._token = trio.lowlevel.current_trio_token()
            self._handle = await start(nursery)
            feed = self._handle.events()
            self._started.set()
            async for event in feed:
                self._events.put(event)
            self._result = await self._handle.wait()

    def __iter__(self) -> Iterator[Event]:
        while (item := self._events.get()) is not _END:
            assert isinstance(item, Event)
            yield item
        self._events.put(_END)  # a second iteration ends at once
        if self._error is not None:
            raise self._error

    def text(self) -> Iterator[str]:
        """The root's words as they arrive (its streamed replies' text); if the
        provider did not stream, the root's answer at the end, whole."""
        said = False
        for piece in root_words(iter(self)):
            said = True
            yield piece
        if not said and self.result.state.answer:
            yield self.result.state.answer

    @property
    def result(self) -> RunResult[OutputT]:
        """The tree's result, once it has stopped (waits for it).

        Raises:
            the error that failed the tree, if one did.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the whole tree (its runs end ``interrupted`` with ``reason``)."""
        handle, token = self._handle, self._token
        if handle is None or token is None or not self._thread.is_alive():
            return
        with contextlib.suppress(trio.RunFinishedError):  # it stopped meanwhile
            trio.from_thread.run_sync(handle.cancel, reason, trio_token=token)

    def _at_exit(self) -> None:
        """The script ends with the tree still running: it is cancelled (its runs end
        ``interrupted``, saved, resumable) and waited for."""
        self.cancel(EXITED)
        self._thread.join()

    def __enter__(self) -> TreeStream[OutputT]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._thread.is_alive():
            self.cancel("left the stream's block" if kind is None else f"{kind.__name__}")
        self._thread.join()
