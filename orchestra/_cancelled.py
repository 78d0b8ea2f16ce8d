"""What leaves our API when a tree stops abnormally: one exception, not a group.

Inside a run, errors and cancellation cross nurseries (the watcher beside the
root, the concurrent tool calls of a fan-out, the children of a tree), and
trio's strict exception groups wrap them. A caller of :meth:`Runner.run`
should see what any trio primitive raises: a plain ``trio.Cancelled`` when it
was cancelled, and the error itself (``StoreError``, ``LeaseLost``...) when
one failed the tree. So, on the way out (:func:`unwrapped`):

- a group of nothing but ``trio.Cancelled`` leaves as its first one;
- a group whose other leaves are all of one type (the same disk full, met by
  several runs of the tree) leaves as its first such leaf, the others counted
  in a note;
- any other group (several kinds of failure) leaves unchanged.

Nothing is swallowed, and ``Cancelled`` is never wrapped: a group that mixes
``Cancelled`` with errors leaves as the error (the ``Cancelled`` were the
tree stopping because of it). The group's notes (a cleanup that failed too,
say) go with the leaf that leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

__all__ = ["unwrapped"]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception that stands for ``group``, or None if it holds several kinds."""
    leaves = _leaves(group)
    errors = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if not errors:
        return leaves[0]
    first = errors[0]
    if any(type(other) is not type(first) for other in errors[1:]):
        return None
    if len(errors) > 1:
        first.add_note(f"({len(errors) - 1} more runs of the tree met the same error)")
    for note in getattr(group, "__notes__", ()):
        first.add_note(note)
    return first


@contextlib.contextmanager
def unwrapped() -> Iterator[None]:
    """Re-raise a group that stands for one exception as that exception (see the module)."""
    try:
        yield
    except BaseExceptionGroup as group:
        single = _single(group)
        if single is None:
            raise
        raise single from None
