"""What leaves our API when a tree stops abnormally: one exception, not a group.

Inside a run, errors and cancellation cross nurseries (the watcher beside the
root, the concurrent tool calls of a fan-out, the children of a tree), and
trio's strict exception groups wrap them. A caller of :meth:`Runner.run`
should see what any trio primitive raises: a plain ``trio.Cancelled`` when it
was cancelled, and the error itself (``StoreError``, ``LeaseLost``...) when
one failed the tree. So, on the way out (:func:`unwrapped`):

- a group of nothing but ``trio.Cancelled`` leaves as its first one;
- a group whose errors are all of one type (the same full disk, met by
  several runs of the tree) leaves as its first error, each other one
  described in a note on it (runs that met the same message are counted);
- a group of several types of error stays a group: an ``ExceptionGroup`` of
  those errors alone (never reduced to one of them).

Nothing is swallowed, and ``Cancelled`` is never wrapped: a group that mixes
``Cancelled`` with errors leaves as its error(s), the ``Cancelled`` dropped
(they were the tree stopping because of the error; a scope cancelled from
outside still raises ``Cancelled`` at the caller's next checkpoint). The
group's notes (a cleanup that failed too, say) go with what leaves.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import trio

__all__ = ["leaves", "unwrapped"]


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """Every exception of a (nested) group, in order."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _describe_others(first: BaseException, others: list[BaseException]) -> None:
    """Note on ``first`` every other error of its group: none is dropped unsaid."""
    for text, count in Counter(repr(other) for other in others).items():
        if text == repr(first):
            first.add_note(f"({count} more run(s) of the tree met the same error)")
        else:
            first.add_note(f"and {count} more run(s) of the tree failed with {text}")


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What leaves for ``group``: one exception, or the group of its errors (see the module)."""
    found = leaves(group)
    errors = [leaf for leaf in found if not isinstance(leaf, trio.Cancelled)]
    if not errors:
        return found[0]
    first, *others = errors
    if any(type(other) is not type(first) for other in others):
        if len(errors) == len(found):
            return group
        _, rest = group.split(trio.Cancelled)  # keeps the group's notes and nesting
        assert rest is not None  # errors holds at least one leaf that is not Cancelled
        return rest
    _describe_others(first, others)
    for note in getattr(group, "__notes__", ()):
        first.add_note(note)
    return first


@contextlib.contextmanager
def unwrapped() -> Iterator[None]:
    """Re-raise a group as the one exception it stands for (see the module).

    Not a checkpoint. Raises what the body raised: a plain exception
    unchanged; a group as :func:`_single` makes it (``trio.Cancelled`` is
    re-raised, never wrapped).
    """
    try:
        yield
    except BaseExceptionGroup as group:
        single = _single(group)
        if single is group:
            raise
        raise single from None
