"""Tools from Model Context Protocol servers, governed like Orchestra's own.

Needs the ``mcp`` extra (``pip install 'orchestra-trees[mcp]'``); the core never
imports it. :func:`open_tools` connects to servers over stdio
(:class:`StdioServer`) or streamable HTTP (:class:`HttpServer`), lists their
tools and turns each into an Orchestra :class:`~orchestra.Tool`, its JSON
schema from the server and its policy from the server's hints:

* ``readOnlyHint`` → read-only: runs concurrently, dedupable, never in doubt;
* ``destructiveHint`` (or no hints at all: treated as a write) → a human
  approves each call (``destructiveHint: false`` on a write lifts that);
* ``idempotentHint`` → idempotent: after a crash it is run again rather than
  asked about.

The connections live as long as the ``async with`` block that opened them and
close when it exits or is cancelled. A call is a checkpoint: the tree's Stop
or the run's deadline cancels it at once. Results become text (text, JSON for
structured content, a note for images and other media), bounded like any
tool's; an error result is a tool error in words. A server that dies during
a call raises :class:`~orchestra.ToolOutcomeUnknown`: for a read the model
sees an error it can act on, for a write the run stops ``unknown_outcome``
for a human, as after a crash, unless the server can tell: a server's
``reconcile`` maps a write tool to a companion tool of the same server, called
with the write's arguments, that answers JSON ``{"outcome": "done", "result":
...}``, ``{"outcome": "not_done"}`` or ``{"outcome": "unknown", "why": ...}``
(the write's reconcile hook: see :class:`~orchestra.Reconciled`;
``--mcp-reconcile WRITE=CHECK`` on the command line).
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ModuleNotFoundError:  # pragma: no cover - the core install
    raise ModuleNotFoundError(
        "orchestra.mcp needs the mcp extra: pip install 'orchestra-trees[mcp]'", name="mcp"
    ) from None

from ._servers import HttpServer, StdioServer, parse_server
from ._session import open_tools

__all__ = ["HttpServer", "StdioServer", "open_tools", "parse_server"]
