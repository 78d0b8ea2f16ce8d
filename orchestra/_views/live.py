"""The live view: each run's turns, spend and current step while a tree runs.

:class:`LiveTree` is an event sink: each event updates a small record under a
lock and nothing else (no drawing, no I/O), so the run loop does not wait on
the terminal. rich's ``Live`` redraws the tree from those records on its own
thread at most four times a second, on stderr, and clears it when the tree
stops, before the summary is printed. Lines written to stderr meanwhile (a
warning, "stopping the run tree") appear above it.

Only for a terminal: :func:`orchestra._cli.session.supervise` (the command line) uses it when
stderr is one and the command prints no JSON.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import attrs
from rich.console import Group
from rich.live import Live
from rich.text import Text

from .._events import Event
from .text import STATUS_STYLES, Node, console, cut, one_line, tree_lines, usd

__all__ = ["LiveTree", "live_tree"]

REFRESH_PER_SECOND = 4
SAID_SHOWN = 60
"""Characters of a run's streaming text shown under its row (its latest)."""


@attrs.define(kw_only=True)
class _Run:
    """What the view knows of one run, from its events."""

    run_id: str
    parent_id: str | None
    agent: str = "?"
    model: str = ""
    status: str = "running"
    turns: int = 0
    cost_usd: float = 0.0
    tree_cost_usd: float = 0.0
    budget_usd: float | None = None
    budget_tokens: int | None = None
    tokens: int = 0
    step: str = "starting"
    reason: str = ""
    tools: dict[str, str] = attrs.Factory(dict)
    """What each running tool call says it does, by call id."""
    said: str = ""
    """The end of the text the model is streaming now (its latest words)."""

    def note(self) -> tuple[str, str]:
        """The line under the run, and its style."""
        if self.status != "running":
            return ("", "") if self.status == "completed" else (self.reason, self.style)
        if self.said and not self.tools:
            return "…" + one_line(self.said)[-SAID_SHOWN:], ""
        if len(self.tools) == 1:
            return next(iter(self.tools.values())), "cyan"
        if self.tools:
            names = Counter(label.split(":")[0] for label in self.tools.values())
            calls = ", ".join(f"{n} ×{count}" if count > 1 else n for n, count in names.items())
            return f"waiting on {calls}", "cyan"
        return self.step, "dim"

    @property
    def style(self) -> str:
        return STATUS_STYLES.get(self.status, "")


class LiveTree:
    """An event sink that keeps, per run, what the live view draws.

    Called on the trio thread (cheap: a few field updates under a lock); read
    by :meth:`lines` on rich's refresh thread.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._version = 0
        self._drawn: tuple[tuple[int, int, int], str, list[Text]] | None = None
        """The last tree drawn (version, width, height), its spend and lines."""

    def __call__(self, event: Event) -> None:
        handle = _HANDLERS.get(event.type)
        if handle is None:
            return
        with self._lock:
            self._version += 1
            run = self._runs.get(event.run_id)
            if run is None:
                run = self._runs[event.run_id] = _Run(
                    run_id=event.run_id, parent_id=event.parent_id
                )
            handle(self, run, event.data)

    def _add_to_ancestors(self, run: _Run, usd_: float, tokens: int) -> None:
        """A child's spend shows in its ancestors' tree spend at once (their own
        next event brings the exact figure)."""
        parent = self._runs.get(run.parent_id or "")
        while parent is not None:
            parent.tree_cost_usd += usd_
            parent.tokens += tokens
            parent = self._runs.get(parent.parent_id or "")

    def tree(
        self, lines: int, *, notes: bool = True, finished: bool = True
    ) -> tuple[Node | None, int]:
        """The tree as it is now in at most ``lines`` lines (depth first; with
        each run's note if ``notes``; finished runs below the root only if
        ``finished``), and how many runs were left out. None before the first
        run starts."""
        with self._lock:
            kids: dict[str | None, list[_Run]] = {}
            for run in self._runs.values():
                kids.setdefault(run.parent_id, []).append(run)
            roots = [r for r in self._runs.values() if r.parent_id not in self._runs]
            if not roots:
                return None, 0
            room = lines

            def node(run: _Run) -> Node:
                nonlocal room
                note, style = run.note() if notes else ("", "")
                room -= 1 + bool(note)
                shown = []
                for kid in kids.get(run.run_id, ()):
                    if room >= 1 and (finished or kid.status == "running"):
                        shown.append(node(kid))
                return Node(
                    agent=run.agent,
                    run_id=run.run_id,
                    model=run.model,
                    status=run.status,
                    turns=run.turns,
                    cost_usd=run.cost_usd,
                    tree_cost_usd=run.tree_cost_usd,
                    budget_usd=run.budget_usd,
                    tokens=run.tokens,
                    budget_tokens=run.budget_tokens,
                    note=one_line(note),
                    note_style=style,
                    children=tuple(shown),
                )

            root = node(roots[0])
            return root, len(self._runs) - _count(root)

    def counts(self) -> tuple[int, int]:
        """Runs running, runs stopped."""
        with self._lock:
            running = sum(r.status == "running" for r in self._runs.values())
            return running, len(self._runs) - running

    def lines(self, width: int, height: int) -> list[Text]:
        """The view in at most ``height`` lines of at most ``width`` cells: a
        status line, then the tree (laid out again only after an event or a
        resize). When it is too long the notes go first, then the finished
        runs, then the runs that do not fit (counted)."""
        running, stopped = self.counts()
        elapsed = self._clock() - self._started
        key = (self._version, width, height)
        if self._drawn is None or self._drawn[0] != key:
            self._drawn = (key, *self._draw(width, height, running + stopped))
        _, spent, body = self._drawn
        if not body:
            return [Text(f"starting… {elapsed:.1f} s", style="dim")]
        head = f"{elapsed:.1f} s · {running} running, {stopped} stopped · {spent} spent"
        return [Text(cut(head, width), style="dim"), *body]

    def _draw(self, width: int, height: int, every: int) -> tuple[str, list[Text]]:
        room = max(height - 3, 1)  # the status line, the header, "… more runs"
        root, hidden = self.tree(
            room, notes=2 * every <= room, finished=every <= room or 2 * every <= room
        )
        if root is None:
            return "", []
        body = tree_lines(root, width)
        if hidden:
            body.append(Text(f"… {hidden} more run{'s' if hidden != 1 else ''}", style="dim"))
        return usd(root.tree_cost_usd), body


def _count(node: Node) -> int:
    return 1 + sum(_count(child) for child in node.children)


def _started(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    limits = data.get("limits") or {}
    run.agent = data.get("agent", run.agent)
    run.model = str(data.get("model", run.model))
    run.budget_usd = limits.get("max_budget_usd")
    run.budget_tokens = limits.get("max_tokens_total")
    run.status, run.step = "running", "resuming" if data.get("resumed") else "starting"


def _request(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.step = f"asking the model (turn {data.get('turn', run.turns + 1)})"
    run.said = ""


def _delta(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.said = (run.said + str(data.get("text", "")))[-4 * SAID_SHOWN :]


def _retry(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.step = f"model retry {data.get('attempt', '')}: {data.get('error', '')}"


def _turn(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.turns = int(data.get("turn", run.turns + 1))
    run.cost_usd = float(data.get("cost_usd", run.cost_usd))
    before = run.tree_cost_usd
    run.tree_cost_usd = float(data.get("tree_cost_usd", run.tree_cost_usd))
    spent = int(data.get("total_tokens", 0))
    run.tokens += spent
    view._add_to_ancestors(run, max(run.tree_cost_usd - before, 0.0), spent)
    calls = data.get("tool_calls") or []
    run.step = f"calling {', '.join(calls)}" if calls else "answering"


def _tool_start(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.tools[data.get("call_id", "")] = str(data.get("tool", "tool"))


def _tool_progress(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    seconds = float(data.get("elapsed_ms", 0.0)) / 1000
    label = f"{data.get('tool', 'tool')}: {data.get('label', '')} ({seconds:.1f} s)"
    run.tools[data.get("call_id", "")] = label


def _tool_result(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.tools.pop(data.get("call_id", ""), None)
    run.step = "thinking"


def _tool_waiting(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.tools[data.get("call_id", "")] = f"{data.get('tool', 'tool')}: waiting for its child run"


def _approval(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.step = f"waiting for a human to approve {data.get('tool', 'a call')}"


def _stopped(view: LiveTree, run: _Run, data: dict[str, Any]) -> None:
    run.status = str(data.get("status", "failed"))
    run.reason = str(data.get("reason", ""))
    run.turns = int(data.get("turns", run.turns))
    run.cost_usd = float(data.get("cost_usd", run.cost_usd))
    run.tree_cost_usd = float(data.get("tree_cost_usd", run.tree_cost_usd))
    run.tools.clear()


_HANDLERS: dict[str, Callable[[LiveTree, _Run, dict[str, Any]], None]] = {
    "run_started": _started,
    "model_request": _request,
    "text_delta": _delta,
    "model_retry": _retry,
    "turn": _turn,
    "tool_start": _tool_start,
    "tool_progress": _tool_progress,
    "tool_result": _tool_result,
    "tool_waiting": _tool_waiting,
    "approval_required": _approval,
    "run_stopped": _stopped,
}


@contextlib.contextmanager
def live_tree() -> Iterator[LiveTree]:
    """Draw a :class:`LiveTree` on stderr while the block runs; cleared after."""
    con = console(stderr=True)
    view = LiveTree()

    def draw() -> Group:
        return Group(*view.lines(con.width, con.height - 1))

    with Live(
        console=con,
        get_renderable=draw,
        refresh_per_second=REFRESH_PER_SECOND,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=True,
    ):
        yield view
