"""Letting a cancellation leave our API as ``trio.Cancelled``.

Inside a run, cancellation crosses nurseries (the watcher beside the root,
the concurrent tool calls of a fan-out), and trio's strict exception groups
wrap the ``Cancelled`` of every task in a ``BaseExceptionGroup``. Trio's own
cancel scopes see through such groups, but a caller of :meth:`Runner.run`
cancelled from outside should see what any trio primitive raises: a plain
``trio.Cancelled``. Nothing is swallowed here: a group made only of
``Cancelled`` leaves as its first one; any other group leaves unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

__all__ = ["cancelled_unwrapped"]


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


@contextlib.contextmanager
def cancelled_unwrapped() -> Iterator[None]:
    """Re-raise a group of nothing but ``trio.Cancelled`` as one ``trio.Cancelled``."""
    try:
        yield
    except BaseExceptionGroup as group:
        _, rest = group.split(trio.Cancelled)
        if rest is not None:
            raise
        raise _first_leaf(group) from None
