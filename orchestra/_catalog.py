"""The chapter's tool catalog over a sandboxed directory.

``list_files``, ``read_file`` (read-only), ``delete_file`` (needs approval),
``scan_archive`` (slow, reports progress, stops at once when cancelled).
Paths are resolved inside the sandbox; a path that escapes it is refused with
:class:`PermanentToolError` (the model cannot fix that by retrying).
"""

from __future__ import annotations

from pathlib import Path

import trio

from ._exceptions import PermanentToolError, ToolError
from ._tools import Tool, ToolContext, tool

__all__ = ["catalog"]

SCAN_FILES = 3000
PROGRESS_EVERY = 200


def _inside(root: Path, name: str) -> Path:
    path = (root / name).resolve()
    if path != root and root not in path.parents:
        raise PermanentToolError(f"permission denied: {name} is outside the sandbox")
    return path


def _missing(name: str) -> ToolError:
    return ToolError(f"no such file: {name}. Call list_files to see what exists.")


def catalog(directory: str | Path) -> tuple[Tool, ...]:
    """The four catalog tools, bound to ``directory``."""
    root = Path(directory).resolve()

    @tool(read_only=True)
    def list_files() -> str:
        """List the files in the working directory, one name per line."""
        return "\n".join(sorted(p.name for p in root.iterdir() if p.is_file()))

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file from the working directory.

        Args:
            path: the file's name, as list_files gives it.
        """
        target = _inside(root, path)
        if not target.is_file():
            raise _missing(path)
        return target.read_text(encoding="utf-8", errors="replace")

    @tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file from the working directory (a human must approve).

        Args:
            path: the file's name, as list_files gives it.
        """
        target = _inside(root, path)
        if not target.is_file():
            raise _missing(path)
        target.unlink()
        return f"Deleted {path}."

    @tool(read_only=True)
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

    return (list_files, read_file, delete_file, scan_archive)
