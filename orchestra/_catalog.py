"""The chapter's tool catalog over a sandboxed directory.

``list_files``, ``read_file`` (read-only), ``delete_file`` (needs approval),
``scan_archive`` (slow, reports progress, stops at once when cancelled).

Paths are file names relative to the sandbox. A name the model can fix is
answered in words (a :class:`ToolError`, the run goes on): an absolute path,
``~``, a NUL byte or an empty name, with the file to use instead when the
sandbox has one of that name (``/var/log/errors.log``: "use 'errors.log'").
A path that leaves the sandbox, through ``..`` or a symlink (the file's own or
a parent directory's), is refused with :class:`PermanentToolError` (no retry
makes it allowed; the run stops ``failed``). Either way nothing outside the
sandbox is read, listed or deleted: every path is checked after resolving
every symlink, before any file is opened.

``read_file`` reads at most ``max_read_bytes`` of a file, never the whole of a
larger one: it shows the start and says, in words, how large the file is.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import trio

from ._exceptions import ConfigError, PermanentToolError, ToolError
from ._tools import MIN_RESULT_BYTES, NOTE_BYTES, Tool, ToolContext, tool, utf8_prefix

__all__ = ["catalog"]

SCAN_FILES = 3000
PROGRESS_EVERY = 200


def _inside(root: Path, name: str) -> Path:
    """The resolved path ``name`` names in ``root`` (checked before anything is opened).

    Raises:
        ToolError: ``name`` is not a relative path (the model can fix that).
        PermanentToolError: it leaves the sandbox, by ``..`` or a symlink.
    """
    problem = _not_relative(name)
    if problem is not None:
        raise ToolError(
            f"{problem}; paths must be relative to the working directory: {_hint(root, name)}"
        )
    path = _plain_entry(root, name) or (root / name).resolve()
    if not _contained(root, path):
        raise PermanentToolError(f"permission denied: {name} is outside the sandbox")
    return path


def _plain_entry(root: Path, name: str) -> Path | None:
    """``root / name`` if ``name`` is one plain component naming no symlink (so
    it is inside ``root`` without resolving), else None (resolve it)."""
    if "/" in name or os.sep in name or name in (".", ".."):
        return None
    path = root / name
    try:
        return None if path.is_symlink() else path
    except (OSError, ValueError):
        return None


def _listing(root: Path) -> list[str]:
    """Names of the files whose real location is inside ``root``, sorted.

    A plain file needs no further look; a symlink is resolved and checked.
    """
    with os.scandir(root) as entries:
        names = [
            entry.name
            for entry in entries
            if (
                _sandbox_file(root, root / entry.name)
                if entry.is_symlink()
                else entry.is_file(follow_symlinks=False)
            )
        ]
    return sorted(names)


def _contained(root: Path, path: Path) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it."""
    return path == root or root in path.parents


def _not_relative(name: str) -> str | None:
    """What makes ``name`` unusable as a path relative to the sandbox, if anything."""
    if "\x00" in name:
        return "the path contains a NUL byte"
    if not name.strip():
        return "the path is empty"
    if name.startswith("~"):
        return f"{name!r} starts with '~', which is not expanded"
    if os.path.isabs(name):
        return f"{name!r} is an absolute path"
    return None


def _hint(root: Path, name: str) -> str:
    """The sandbox file to use instead of ``name`` (same base name), if there is one."""
    base = PurePosixPath(name.replace("\x00", "")).name
    if base not in ("", ".", "..") and _sandbox_file(root, root / base):
        return f"use {base!r}."
    return "call list_files to see what exists."


def _sandbox_file(root: Path, path: Path) -> bool:
    """Whether ``path`` is a file whose real location is inside ``root`` (False if
    it cannot be looked at: a name too long, a symlink loop)."""
    try:
        return path.is_file() and _contained(root, path.resolve())
    except (OSError, RuntimeError):
        return False


def _missing(name: str) -> ToolError:
    return ToolError(f"no such file: {name}. Call list_files to see what exists.")


def _decode(data: bytes) -> str:
    """Bytes as text, as ``Path.read_text`` gives it (bad bytes replaced, newlines ``\\n``)."""
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_head(path: Path, limit: int) -> str:
    """The file's text if it has at most ``limit`` bytes; else its start and a note.

    Reads at most ``limit + 1`` bytes. For UTF-8 text, start and note together
    fit in ``limit`` bytes (a character cut in two at the end is dropped), so
    the result passes a tool result bound of the same size unchanged.
    """
    with path.open("rb") as f:
        data = f.read(limit + 1)
        size = max(os.fstat(f.fileno()).st_size, len(data))
    if len(data) <= limit:
        return _decode(data)
    head = utf8_prefix(data, limit - NOTE_BYTES)
    return (
        f"{_decode(head)}\n[truncated: showing the first {len(head):,} bytes of {size:,}; "
        f"the file is larger than the read limit of {limit:,} bytes]"
    )


def catalog(directory: str | Path, *, max_read_bytes: int = 64 * 1024) -> tuple[Tool, ...]:
    """The four catalog tools, bound to ``directory``.

    ``read_file`` returns at most ``max_read_bytes`` of a file (at least 1024).
    """
    if max_read_bytes < MIN_RESULT_BYTES:
        raise ConfigError(f"max_read_bytes must be >= {MIN_RESULT_BYTES}, got {max_read_bytes}")
    root = Path(directory).resolve()

    @tool(read_only=True)
    def list_files() -> str:
        """List the files in the working directory, one name per line."""
        return "\n".join(_listing(root))

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file from the working directory.

        Args:
            path: the file's name, as list_files gives it.
        """
        target = _inside(root, path)
        if not target.is_file():
            raise _missing(path)
        return _read_head(target, max_read_bytes)

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
