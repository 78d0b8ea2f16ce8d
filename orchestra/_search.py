"""``search_files``: the lines of a few files that mention some words.

Loose on purpose, for a model's questions ("which file mentions a
timeout?"): case aside, each word matches by its stem, its first letters
(all of a short word; at least four, the length less three for a longer one:
``timeout`` → ``time``, so ``timed out`` and ``times out`` are found), and a
line matches when it has every word. The answer says what was searched and,
when nothing matched, says that plainly: no file mentions them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ._exceptions import ToolError

__all__ = ["search"]

SEARCHED_BYTES = 16 * 1024 * 1024
"""Of each file, the part searched."""
LINES_SHOWN = 40
LINE_CHARS = 200
"""Most characters of a matching line shown."""
MAX_WORDS = 8


def stems(words: str) -> list[str]:
    """The lower-case stems of ``words`` (letters and digits; at most :data:`MAX_WORDS`).

    Raises:
        ToolError: no word to look for, or too many.
    """
    found = re.findall(r"[^\W_]+", words.lower())
    if not found:
        raise ToolError("give one or a few words to look for")
    if len(found) > MAX_WORDS:
        raise ToolError(f"give at most {MAX_WORDS} words to look for, not {len(found)}")
    return [w if len(w) <= 4 else w[: max(4, len(w) - 3)] for w in found]


def search(root: Path, names: Sequence[str], words: str) -> str:
    """Every line of the files ``names`` (in ``root``) that has each stem of ``words``."""
    wanted = stems(words)
    hits: list[str] = []
    files = 0
    for name in names:
        lines = _matching(root / name, wanted)
        files += bool(lines)
        hits.extend(f"{name} line {n}: {_cut(text)}" for n, text in lines)
    said = f"{words.strip()!r}"
    if not hits:
        return f"No line of the {len(names)} files mentions {said}: no file mentions it."
    shown = hits[:LINES_SHOWN]
    head = f"{files} of the {len(names)} files mention {said} ({len(hits)} lines):"
    more = [f"... and {len(hits) - len(shown)} more lines"] if len(hits) > len(shown) else []
    return "\n".join([head, *shown, *more])


def _matching(path: Path, wanted: list[str]) -> list[tuple[int, str]]:
    """The numbered lines of ``path`` (its first :data:`SEARCHED_BYTES`) with every stem."""
    try:
        with path.open("rb") as f:
            text = f.read(SEARCHED_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    return [
        (n, line)
        for n, line in enumerate(text.splitlines(), start=1)
        if all(stem in line.lower() for stem in wanted)
    ]


def _cut(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3] + "..."
