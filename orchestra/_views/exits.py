"""How a command's end is said to a shell: its exit code.

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      the run tree completed (and every command that did its job)
1      the run failed
2      usage: a bad option or argument, a value out of range
3      the run stopped at its turn limit (``max_turns_exceeded``)
4      the run stopped at its budget (``budget_exceeded``)
5      the run stopped at its deadline (``deadline_exceeded``)
6      the run was interrupted: cancelled, waits for a human, provider unavailable
8      operational: no such run, a run that cannot be resumed or decided, another
       process holds the run, the store or a file cannot be read or written, a
       server cannot listen
9      internal error: a bug in Orchestra (``--debug`` shows where)
130    interrupted (Ctrl-C) before a run tree was started
=====  ==========================================================================

A run is never reported ``running``: ``demo``, ``run`` and ``resume`` return once
the tree has stopped, so no code stands for it.

The command line exits with these; the web console reads them from the
commands it launches. This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .._state import Status

__all__ = ["INTERNAL", "INTERRUPTED", "OPERATIONAL", "USAGE", "status_exit"]

USAGE: Final = 2
OPERATIONAL: Final = 8
INTERNAL: Final = 9
INTERRUPTED: Final = 130

_STATUS_EXIT: Final[Mapping[Status, int]] = {
    Status.COMPLETED: 0,
    Status.FAILED: 1,
    Status.MAX_TURNS_EXCEEDED: 3,
    Status.BUDGET_EXCEEDED: 4,
    Status.DEADLINE_EXCEEDED: 5,
    Status.INTERRUPTED: 6,
}


def status_exit(status: Status) -> int:
    """The exit code of a command that ran a tree until it stopped with ``status``.

    Raises:
        ValueError: ``status`` is ``running`` (a tree is reported once stopped).
    """
    try:
        return _STATUS_EXIT[status]
    except KeyError:
        raise ValueError(f"a run tree is reported once stopped, not {status.value}") from None
