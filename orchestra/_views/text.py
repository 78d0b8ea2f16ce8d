"""Layouts for people: the run tree and the runs table as lines that fit a width.

Data in, rich ``Text`` lines out: every line fits the width it is given. A
cell that does not fit is cut with ``…`` (the agent's name before the run
id); nothing wraps, so no token is ever split across lines.

This module imports rich; the CLI imports it only when it prints something.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import attrs
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.text import Text

from .._settings import ModelSettings

__all__ = [
    "Node",
    "console",
    "duration",
    "model_cell",
    "runs_lines",
    "shape_words",
    "short_id",
    "status_text",
    "token_details",
    "tokens",
    "tree_lines",
    "usd",
]

STATUS_STYLES = {
    "completed": "green",
    "failed": "bold red",
    "max_turns_exceeded": "yellow",
    "budget_exceeded": "yellow",
    "deadline_exceeded": "yellow",
    "interrupted": "magenta",
    "running": "cyan",
}
GUIDE = "bright_black"


def console(*, stderr: bool = False) -> Console:
    """A console for people: colour only on a terminal and without ``NO_COLOR``
    (then no escape codes at all); its width from the terminal or ``COLUMNS``."""
    plain = os.environ.get("NO_COLOR", "") != ""
    return Console(
        stderr=stderr,
        color_system=None if plain else "auto",
        highlight=False,
        markup=False,
        emoji=False,
    )


# -- values ------------------------------------------------------------------------------------


def usd(value: float) -> str:
    """Dollars as people read them: ``$0.0109``, ``$12.50``; ``<$0.0001`` for dust."""
    if value == 0:
        return "$0"
    if 0 < value < 0.00005:
        return "<$0.0001"
    return f"${value:,.2f}" if value >= 100 else f"${value:.4f}"


def budget_usd(value: float) -> str:
    """A budget: cents when it is whole cents (``$0.05``), else as :func:`usd`."""
    return f"${value:,.2f}" if round(value, 2) == value or value >= 100 else usd(value)


def tokens(count: int) -> str:
    """A token count in at most six characters: ``812``, ``4.1k``, ``50k``, ``1.2M``."""
    if count < 1000:
        return str(count)
    if count < 999_950:
        return f"{count / 1000:.1f}".removesuffix(".0") + "k"
    return f"{count / 1_000_000:.1f}".removesuffix(".0") + "M"


def token_details(cached: int, reasoning: int) -> str:
    """`` (1.2k cached, 300 reasoning)``: the parts of a token count billed or spent
    apart (cached input, reasoning output), or nothing when there are none."""
    parts = [
        f"{tokens(n)} {word}" for n, word in ((cached, "cached"), (reasoning, "reasoning")) if n
    ]
    return f" ({', '.join(parts)})" if parts else ""


def duration(ms: float) -> str:
    """``96 ms``, ``2.4 s``, ``3 min 12 s``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def short_id(run_id: str) -> str:
    """The run id's first twelve characters (``run_`` and 8 hex digits), which
    the commands accept as a prefix; an id of another shape in full."""
    return run_id[:12] if run_id.startswith("run_") and len(run_id) == 20 else run_id


def status_text(status: str) -> Text:
    """The status, in its colour."""
    return Text(status, style=STATUS_STYLES.get(status, ""))


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, ending with ``…`` if it was cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(width - 1, 0)) + "…" if width > 0 else ""


# -- a table whose first flexible column gives way ------------------------------------------


@attrs.frozen
class Flex:
    """A cell that can shrink: ``body`` is cut first (to ``keep`` cells at
    least, if the column allows), then the whole cell."""

    prefix: Text
    body: Text
    suffix: Text = attrs.field(factory=Text)
    keep: int = 5
    """The cells of ``body`` kept before the table drops a droppable column."""

    @property
    def natural(self) -> int:
        return self.prefix.cell_len + self.body.cell_len + self.suffix.cell_len

    @property
    def least(self) -> int:
        """The narrowest this cell gets before its suffix is cut."""
        return self.natural - self.body.cell_len + min(self.body.cell_len, self.keep)

    def fit(self, width: int) -> Text:
        room = width - self.prefix.cell_len - self.suffix.cell_len
        if self.body.cell_len <= room:
            return Text.assemble(self.prefix, self.body, self.suffix)
        body = Text(cut(self.body.plain, max(room, 1)), style=self.body.style)
        if room >= 1:
            return Text.assemble(self.prefix, body, self.suffix)
        whole = Text.assemble(self.prefix, self.body, self.suffix)
        whole.truncate(width, overflow="ellipsis")
        return whole


@attrs.frozen
class Row:
    """One line of cells, and optionally one line under it (not in columns)."""

    cells: Sequence[Text | Flex]
    note: Text | None = None


def table(
    headers: Sequence[str],
    right: set[int],
    rows: Sequence[Row],
    width: int,
    *,
    droppable: Sequence[int] = (),
) -> list[Text]:
    """Rows in aligned columns within ``width``.

    What gives way, in order: gaps of two spaces become one; the ``droppable``
    columns go, in that order (so names stay whole); the :class:`Flex` column
    shrinks down to its least, then further. A note is cut to the width.
    """
    header = Row(cells=[Text(h, style="bold") for h in headers])
    widths = [max(_width(row.cells[i]) for row in (header, *rows)) for i in range(len(headers))]
    cells = rows[0].cells if rows else ()
    flex = next((i for i, c in enumerate(cells) if isinstance(c, Flex)), None)
    least = max((_least(row.cells[flex]) for row in rows), default=0) if flex is not None else 0
    shown, drop, gap = list(range(len(headers))), list(droppable), 2
    while True:
        gap = 2 if sum(widths[i] for i in shown) + 2 * (len(shown) - 1) <= width else 1
        excess = sum(widths[i] for i in shown) + gap * (len(shown) - 1) - width
        if excess <= 0:
            break
        if drop:  # a column goes before a name is cut
            shown.remove(drop.pop(0))
            continue
        if flex is not None and widths[flex] - excess >= max(least, len(headers[flex])):
            widths[flex] -= excess
            break
        if flex is not None:
            widths[flex] = max(widths[flex] - excess, len(headers[flex]), 4)
        break
    lines = []
    for row in (header, *rows):
        line = Text()
        for n, i in enumerate(shown):
            _place(line, row.cells[i], widths[i], i in right, gap if n else 0)
        lines.append(_fitted(line, width))
        if row.note is not None:
            lines.append(_fitted(row.note, width))
    return lines


def _least(cell: Text | Flex) -> int:
    return cell.least if isinstance(cell, Flex) else cell.cell_len


def _width(cell: Text | Flex) -> int:
    return cell.natural if isinstance(cell, Flex) else cell.cell_len


def _place(line: Text, cell: Text | Flex, width: int, right: bool, gap: int) -> None:
    """Append ``cell`` to ``line`` after ``gap`` spaces, padded (or cut) to ``width``."""
    text = cell.fit(width) if isinstance(cell, Flex) else cell
    if text.cell_len > width:
        text = text.copy()
        text.truncate(width, overflow="ellipsis")
    pad = " " * (width - text.cell_len)
    line.append(" " * gap + (pad if right else ""))
    line.append_text(text)
    if not right:
        line.append(pad)


def _fitted(line: Text, width: int) -> Text:
    line.rstrip()
    line.truncate(width, overflow="ellipsis")
    return line


# -- the run tree -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Node:
    """One run as the tree view shows it."""

    agent: str
    run_id: str
    model: str = ""
    """The model the run calls ("": not known yet)."""
    status: str
    turns: int
    cost_usd: float
    tree_cost_usd: float
    budget_usd: float | None = None
    tokens: int = 0
    """The tree's tokens (this run's and its descendants')."""
    budget_tokens: int | None = None
    note: str = ""
    """One line under the run: its answer, why it stopped, or what it does now."""
    note_style: str = ""
    children: tuple[Node, ...] = ()

    @classmethod
    def of(cls, report: dict[str, Any]) -> Node:
        """The node of a run's JSON report (``orchestra show --json``), with its children."""
        status, reason, answer = report["status"], report.get("reason") or "", report["answer"]
        stopped = status != "completed" and reason
        note = reason if stopped else answer or ""
        if stopped and report.get("answer_partial") and answer:
            note = f"partial answer: {answer} ({reason})"
        return cls(
            agent=report["agent"],
            run_id=report["run_id"],
            model=report.get("model") or "",
            status=status,
            turns=report["turns"],
            cost_usd=report["cost_usd"],
            tree_cost_usd=report["tree_cost_usd"],
            budget_usd=report.get("budget_usd"),
            tokens=report.get("tree_tokens") or 0,
            budget_tokens=report.get("budget_tokens"),
            note=one_line(note),
            note_style=STATUS_STYLES.get(status, "") if stopped else "",
            children=tuple(cls.of(child) for child in report["children"]),
        )


TREE_HEADERS = ("run", "model", "status", "turns", "own $", "tree $", "tokens")
"""``tree $`` and ``tokens`` count the run and its descendants (``/`` its budget, if any)."""
MODEL_SHOWN = 20
"""The most cells a model's name takes in a table (a longer one is cut with ``…``)."""


def tree_lines(root: Node, width: int, *, root_note: bool = True) -> list[Text]:
    """A header and one row per run (children in the given order, under guides),
    each with its note on the line below (the root's only if ``root_note``)."""
    rows: list[Row] = []

    def walk(node: Node, first: str, rest: str, depth: int) -> None:
        under = rest + ("│  " if node.children else "   ")
        note = None
        if node.note and (depth or root_note):
            note = Text.assemble((under, GUIDE), (node.note, node.note_style))
        rows.append(Row(cells=_tree_cells(node, first), note=note))
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            walk(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), 1)

    walk(root, "", "", 0)
    # narrow, own $ goes first (tree $ says the spend), then tokens (the footer says
    # them), then the model: the run ids stay whole
    return table(TREE_HEADERS, {3, 4, 5, 6}, rows, width, droppable=(4, 6, 1))


def _tree_cells(node: Node, guides: str) -> list[Text | Flex]:
    spent = usd(node.tree_cost_usd)
    if node.budget_usd is not None:
        spent += f"/{budget_usd(node.budget_usd)}"
    used = tokens(node.tokens)
    if node.budget_tokens is not None:
        used += f"/{tokens(node.budget_tokens)}"
    name = Flex(
        prefix=Text(guides, style=GUIDE),
        body=Text(node.agent, style="bold"),
        suffix=Text(" " + short_id(node.run_id), style="dim"),
    )
    return [
        name,
        model_cell(node.model),
        status_text(node.status),
        Text(str(node.turns)),
        Text(usd(node.cost_usd)),
        Text(spent),
        Text(used),
    ]


def model_cell(model: str) -> Text:
    """A model's name in at most :data:`MODEL_SHOWN` cells."""
    return Text(cut(model, MODEL_SHOWN))


# -- the runs table -----------------------------------------------------------------------------

RUNS_HEADERS = ("run", "agent", "model", "status", "turns", "own $", "tree $", "age")
AGENT_KEPT = 12
"""The cells of an agent's name the runs table keeps before it drops a column."""


def _status_cell(status: str, waits_for: str | None) -> Text:
    """``interrupted: approval``: the status, and why an interrupted run stopped."""
    cell = status_text(status)
    if waits_for:
        cell.append(f": {_WAITS.get(waits_for, waits_for.replace('_', ' '))}")
    return cell


_WAITS = {"provider_unavailable": "provider"}
"""Shorter words for what an interrupted run waits for, where the table is narrow."""


def runs_lines(runs: Sequence[dict[str, Any]], width: int) -> list[Text]:
    """One row per run: ``run_id``, ``agent``, ``model``, ``status`` (with what
    an interrupted run waits for, ``waits_for``: approval, cancelled, …),
    ``turns``, ``cost_usd``, ``tree_cost_usd`` and ``age`` (already in words);
    under a run that ``continues`` another of its conversation, a line saying so."""
    rows = [
        Row(
            cells=[
                Text(short_id(r["run_id"])),
                Flex(prefix=Text(), body=Text(r["agent"], style="bold"), keep=AGENT_KEPT),
                model_cell(r.get("model") or ""),
                _status_cell(r["status"], r.get("waits_for")),
                Text(str(r["turns"])),
                Text(usd(r["cost_usd"])),
                Text(usd(r["tree_cost_usd"])),
                Text(r["age"]),
            ],
            note=_continues(r.get("continues")),
        )
        for r in runs
    ]
    # narrow, own $ goes first (tree $ says a root's spend), then the age, then the model:
    # the agent names stay whole
    return table(RUNS_HEADERS, {4, 5, 6, 7}, rows, width, droppable=(5, 7, 2))


def _continues(run_id: str | None) -> Text | None:
    """``  ↳ continues run_28da7520``: the line under a conversation's later run."""
    if run_id is None:
        return None
    return Text.assemble(("  ↳ continues ", GUIDE), (short_id(run_id), GUIDE))


_SHAPE_WORDS = {
    "max_depth": "{} level(s) below the root",
    "max_children": "{} children per run",
    "max_descendants": "{} runs in the tree",
    "max_concurrent_children": "{} children of a run at once",
}


def shape_words(shape: dict[str, int]) -> str:
    """The limits on a tree's shape, in words: ``at most 2 children per run, ...``."""
    said = [
        _SHAPE_WORDS[name].format(value) for name, value in shape.items() if name in _SHAPE_WORDS
    ]
    return "at most " + ", ".join(said) if said else ""


def settings_words(saved: dict[str, Any]) -> str:
    """A run's saved model settings in one line: ``temperature 0, seed 7, stop ["END"]``."""
    return ModelSettings(**saved).described()
