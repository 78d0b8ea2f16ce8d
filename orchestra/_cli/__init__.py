"""The ``orchestra`` command line: its commands (:mod:`.commands`) and the modules they use.

``run`` (the console script's entry point) and ``main`` (the click group) are
imported from :mod:`.commands` on first use (PEP 562), so that importing one of
this package's modules (:mod:`.demo`, :mod:`.view`, ...) loads only that module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .commands import main, run

__all__ = ["main", "run"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.commands"), name)
    globals()[name] = value  # resolved once: later lookups do not come here
    return value
