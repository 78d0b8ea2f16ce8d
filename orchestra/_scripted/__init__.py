"""The scripted provider: a stateless, OpenAI-shaped chat completions server
whose reply is a pure function of the request (o200k counts).

The embedded default of ``orchestra demo`` and of workers running demo
recipes, and the provider of the tests (re-exported by
:mod:`orchestra.testing`): :mod:`.scenarios` (what each scripted model
answers), :mod:`.faults` (the ``+FAULT`` modifiers), :mod:`.server` (the
loopback HTTP server).
"""

from __future__ import annotations

import os
from pathlib import Path

from .scenarios import SANDBOX_FILES

__all__ = ["make_sandbox"]


def make_sandbox(path: str | os.PathLike[str]) -> Path:
    """Write :data:`SANDBOX_FILES` into directory ``path`` (created if needed); returns it."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for name, text in SANDBOX_FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    return root
