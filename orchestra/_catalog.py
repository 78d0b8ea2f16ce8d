"""The chapter's tool catalog over a sandboxed directory.

``list_files`` (each file with its size and line count), ``read_file`` and
``search_files`` (the lines that mention some words, in every file) read
only; ``delete_file`` needs approval. Results say what they are, in
words a small model can act on. The scripted scenarios' canned slow scan is not
here: it is :func:`orchestra.testing.demo_tools`'s (a model given it takes its
made-up answer for a fact).

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

from ._exceptions import ConfigError, PermanentToolError, ToolError
from ._search import search
from ._tools import MIN_RESULT_BYTES, NOTE_BYTES, Tool, tool, utf8_prefix

__all__ = ["catalog"]


COUNT_LINES_UP_TO = 16 * 1024 * 1024
"""Files up to this size have their lines counted by ``list_files`` (larger: not)."""
TITLE_NAME_CHARS = 200
"""Most characters of a path said in the line above a file's text."""


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


def _read_head(path: Path, limit: int, name: str) -> str:
    """A line saying what follows (``The text of notes.txt (294 bytes):``), then the
    file's text if both fit in ``limit`` bytes; else its start and a note.

    Reads at most ``limit + 1`` bytes. For UTF-8 text, line, start and note
    together fit in ``limit`` bytes (a character cut in two at the end is
    dropped), so the result passes a tool result bound of the same size unchanged.
    """
    with path.open("rb") as f:
        data = f.read(limit + 1)
        size = max(os.fstat(f.fileno()).st_size, len(data))
    title = f"The text of {name[:TITLE_NAME_CHARS]} ({size:,} byte{'s' if size != 1 else ''}):\n"
    room = limit - len(title.encode())
    if len(data) <= room:
        return title + _decode(data)
    head = utf8_prefix(data, room - NOTE_BYTES)
    return title + (
        f"{_decode(head)}\n[truncated: showing the first {len(head):,} bytes of {size:,}; "
        f"the file is larger than the read limit of {limit:,} bytes]"
    )


def catalog(directory: str | Path, *, max_read_bytes: int = 64 * 1024) -> tuple[Tool, ...]:
    """The four catalog tools, bound to ``directory``: ``list_files``,
    ``read_file``, ``search_files`` and ``delete_file``.

    ``read_file`` returns at most ``max_read_bytes`` of a file (at least 1024).
    """
    if max_read_bytes < MIN_RESULT_BYTES:
        raise ConfigError(f"max_read_bytes must be >= {MIN_RESULT_BYTES}, got {max_read_bytes}")
    root = Path(directory).resolve()

    @tool(read_only=True)
    def list_files() -> str:
        """List the files in the working directory with each one's size in bytes
        and number of lines."""
        return _list(root)

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file from the working directory.

        Args:
            path: the file's name, as list_files gives it.
        """
        target = _inside(root, path)
        if not target.is_file():
            raise _missing(path)
        return _read_head(target, max_read_bytes, path)

    @tool(read_only=True)
    def search_files(words: str) -> str:
        """Find the files that mention some words: every line, in every file of the
        working directory, that has all of them (case and word endings aside:
        'timeout' also finds 'timed out').

        Args:
            words: one or a few words to look for.
        """
        return search(root, _listing(root), words)

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

    return (list_files, read_file, search_files, delete_file)


def _list(root: Path) -> str:
    """``list_files``'s answer: how many files, then one line per file."""
    names = _listing(root)
    if not names:
        return "The working directory has no files."
    rows = [f"{name}: {_describe(root / name)}" for name in names]
    head = f"{len(names)} file{'s' if len(names) != 1 else ''} in the working directory:"
    return "\n".join([head, *rows])


def _describe(path: Path) -> str:
    """``12 lines, 1,024 bytes`` (lines not counted past :data:`COUNT_LINES_UP_TO`)."""
    try:
        size = path.stat().st_size
        if size > COUNT_LINES_UP_TO:
            return f"{size:,} bytes (too large to count its lines)"
        lines = _count_lines(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return f"{lines:,} line{'s' if lines != 1 else ''}, {size:,} bytes"


def _count_lines(path: Path) -> int:
    """Lines as a reader counts them: a last line without a newline counts too."""
    lines, last = 0, b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")
