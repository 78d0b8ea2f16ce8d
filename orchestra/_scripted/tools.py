"""The scripted scenarios' own tool: a canned, slow archive scan.

``scan_archive`` sleeps (reporting progress, stopping at once when cancelled)
and always answers "1 match in errors.log", whatever it is asked: the
scenarios' slow tool, for demos of cancellation, trees and progress. It is
never given to a real model (which would take its answer for a fact): the
catalog (:func:`orchestra.catalog`) does not hold it; :func:`demo_tools` is the
catalog plus it, for agents that run the scripted scenarios.
"""

from __future__ import annotations

from pathlib import Path

import trio

from .._catalog import catalog
from .._tools import Tool, ToolContext, tool

__all__ = ["demo_tools", "scan_archive"]

SCAN_FILES = 3000
PROGRESS_EVERY = 200


@tool(name="scan_archive", read_only=True)
async def scan_archive(query: str, ctx: ToolContext, seconds: float = 3.0) -> str:
    """Scan the log archive for a pattern (slow: about `seconds` seconds).

    Args:
        query: the text to look for.
        seconds: how long the scan takes.
    """
    step = max(seconds, 0.0) / SCAN_FILES
    for done in range(PROGRESS_EVERY, SCAN_FILES + 1, PROGRESS_EVERY):
        await trio.sleep(step * PROGRESS_EVERY)
        ctx.progress(f"scanned {done}/{SCAN_FILES} files")
    return f"Scanned {SCAN_FILES} archived files for {query!r}: 1 match in errors.log."


def demo_tools(directory: str | Path) -> tuple[Tool, ...]:
    """The catalog over ``directory`` and the canned :func:`scan_archive`: the
    tools the scripted scenarios call."""
    return (*catalog(directory), scan_archive)
