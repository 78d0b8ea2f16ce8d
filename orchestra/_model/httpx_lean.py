"""httpx, imported without its command line.

``import httpx`` also imports httpx's command-line client (``httpx._main``:
click, rich and pygments) whenever they are installed, and Orchestra's own
CLI installs them: about a third of the time ``import httpx`` takes, for a
client no library process runs. So the first import of httpx made here
blocks that one module (``None`` in ``sys.modules`` makes its import fail,
and httpx then defines a stub ``main``) and unblocks it at once: an explicit
``import httpx._main`` later still works. A process that imported httpx
before Orchestra keeps httpx as it was.
"""

from __future__ import annotations

import sys

_CLI = "httpx._main"

_block = "httpx" not in sys.modules and _CLI not in sys.modules
if _block:
    sys.modules[_CLI] = None  # type: ignore[assignment]
try:
    import httpx
finally:
    if _block:
        del sys.modules[_CLI]

__all__ = ["httpx"]
