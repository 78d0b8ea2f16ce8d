"""Persistence per step: what saving costs per turn as a run's transcript grows.

Replays the saves of a ``runaway`` run (a ``read_file`` call and its result
each turn, the scenario's files in turn) through ``store.save(state, events)``,
the documented store method the runner calls: per turn, one save after the
reply (with its ``model_request`` and ``turn`` events) and one after the tool
result (``tool_start``, ``tool_result``), the state growing by two messages;
SQLite saves are fenced by the tree's lease (``fence=``), as the runner's are.
Save cost per turn = both saves; at turn T it is the median over turns
T−5..T+5 (clipped to the run). Each repeat replays a whole run into a fresh
``MemoryStore`` and a fresh ``SQLiteStore`` file. The WAL size is that of
the SQLite file after the last repeat's run.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from . import common
from .common import row

FULL = {"turns": 500, "marks": (10, 100, 500), "repeats": 3}
QUICK = {"turns": 50, "marks": (10, 50), "repeats": 2}
WINDOW = 5
OWNER = f"pid {os.getpid()} on {socket.gethostname()}"


def _events(state: Any, turn: int, kinds: tuple[str, str]) -> list[dict[str, Any]]:
    from orchestra import Event

    at = time.time()
    return [
        Event(
            type=kind,
            run_id=state.run_id,
            root_id=state.root_id,
            parent_id=None,
            at=at,
            data={"turn": turn, "tool": "read_file", "ok": True, "ms": 0.1},
        ).to_dict()
        for kind in kinds
    ]


def replay(store: Any, turns: int) -> tuple[list[float], Any]:
    """Seconds of saving in each turn 1..``turns`` of a runaway-shaped run, and its last state."""
    from orchestra import Limits, RunState, Usage
    from orchestra.testing import SANDBOX_FILES

    from .bare import INSTRUCTIONS

    names = sorted(SANDBOX_FILES)
    run_id = f"run_{time.perf_counter_ns():016x}"[-20:]
    state = RunState(
        run_id=run_id,
        root_id=run_id,
        agent="assistant",
        model="runaway",
        limits=Limits(max_turns=turns),
        messages=[
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": "Look into the logs and tell me what went wrong."},
        ],
    )
    owner = {}
    if hasattr(store, "acquire_lease"):  # as the runner does: every save fenced by the lease
        owner = {"fence": store.acquire_lease(run_id, OWNER)}
    store.save(state, _events(state, 0, ("run_started",)), **owner)
    per_turn = []
    for turn in range(1, turns + 1):
        name = names[turn % len(names)]
        call_id = f"call_{turn - 1}_0"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path":"{name}"}}'},
        }
        state.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        state.own = state.tree = Usage(
            model_calls=turn, prompt_tokens=150 * turn, completion_tokens=15 * turn
        )
        events = _events(state, turn, ("model_request", "turn"))
        start = time.perf_counter()
        store.save(state, events, **owner)
        spent = time.perf_counter() - start
        state.messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": SANDBOX_FILES[name]}
        )
        state.own = state.tree = Usage(
            model_calls=turn, prompt_tokens=150 * turn, completion_tokens=15 * turn, tool_runs=turn
        )
        events = _events(state, turn, ("tool_start", "tool_result"))
        start = time.perf_counter()
        store.save(state, events, **owner)
        per_turn.append(spent + time.perf_counter() - start)
    return per_turn, state


def wal_per_save(path: Path, turns: int = 20) -> tuple[float, float]:
    """KB of WAL written per save over the first ``turns`` turns of a run in a fresh file
    (fewer than SQLite's 1,000 pages: nothing checkpointed yet), and KB of JSON per save the
    run adds (its new messages and events)."""
    from orchestra import SQLiteStore

    with SQLiteStore(path) as store:
        before = os.path.getsize(f"{path}-wal")
        _, state = replay(store, turns)
        wal = os.path.getsize(f"{path}-wal") - before
    saves = 2 * turns + 1
    events = 2 * saves * len(json.dumps(_events(state, turns, ("turn",))[0]))
    added = len(json.dumps(state.messages[2:])) + events
    return wal / saves / 1024, added / saves / 1024


def at(per_turn: list[float], mark: int) -> float:
    """The median save cost per turn around turn ``mark`` (1-based), in µs."""
    window = per_turn[max(mark - 1 - WINDOW, 0) : mark + WINDOW]
    return statistics.median(window) * 1e6


def run(quick: bool) -> common.Section:
    from orchestra import MemoryStore, SQLiteStore, state_to_json

    p = QUICK if quick else FULL
    directory = Path(tempfile.mkdtemp(prefix="orchestra-bench-store-"))
    marks = p["marks"]
    memory: dict[int, list[float]] = {m: [] for m in marks}
    sqlite: dict[int, list[float]] = {m: [] for m in marks}
    replay(MemoryStore(), 20)  # warm up
    wal = state_mb = 0.0
    for i in range(p["repeats"]):
        for kind in ("memory", "sqlite") if i % 2 == 0 else ("sqlite", "memory"):
            if kind == "memory":
                per_turn, _ = replay(MemoryStore(), p["turns"])
                for m in marks:
                    memory[m].append(at(per_turn, m))
                continue
            path = directory / f"runs-{i}.db"
            with SQLiteStore(path) as store:
                per_turn, state = replay(store, p["turns"])
                state_mb = len(state_to_json(state).encode()) / 2**20
                wal = os.path.getsize(f"{path}-wal") if os.path.exists(f"{path}-wal") else 0
            for m in marks:
                sqlite[m].append(at(per_turn, m))
    first, last = marks[0], marks[-1]
    rows = [
        row(
            f"SQLiteStore, turn {m}: save cost per turn",
            "µs",
            sqlite[m],
            baseline=f"MemoryStore, turn {m}",
            baseline_samples=memory[m],
            paired=True,
        )
        for m in marks
    ]
    rows.append(
        row(
            f"SQLiteStore: turn {last} against turn {first}",
            "µs",
            sqlite[last],
            baseline=f"SQLiteStore, turn {first}",
            baseline_samples=sqlite[first],
            paired=True,
        )
    )
    rows.append(
        row(
            f"MemoryStore: turn {last} against turn {first}",
            "µs",
            memory[last],
            baseline=f"MemoryStore, turn {first}",
            baseline_samples=memory[first],
            paired=True,
        )
    )
    rows.append(
        row(
            f"SQLite WAL after a {p['turns']}-turn run",
            "MB",
            [wal / 2**20],
            baseline="its last state as JSON",
            baseline_samples=[state_mb],
        )
    )
    wal_kb, added_kb = wal_per_save(directory / "wal-per-save.db")
    rows.append(
        row(
            "SQLite WAL written per save (first 20 turns)",
            "KB",
            [wal_kb],
            baseline="JSON the save adds (messages, events)",
            baseline_samples=[added_kb],
        )
    )
    growth = rows[len(marks)]
    result = common.section(
        "persistence",
        "Persistence per step",
        f"This run: {p['repeats']} replays of a {p['turns']}-turn run per store.",
        rows,
        [
            common.target(
                f"SQLite save at turn {last} ≤ 2× turn {first}",
                f"{common.ratio_text(growth['ratio'])} ({common.fmt(growth['median'])} µs vs "
                f"{common.fmt(growth['baseline_summary']['median'])} µs)",
                growth["ratio"] is not None and growth["ratio"] <= 2.0,
            )
        ],
    )
    result["notes"].append(
        "SQLite checkpoints the WAL every 1,000 pages (about 4 MB) by default and then reuses "
        "the file without shrinking it, so after a long run the WAL's size is that bound, "
        "not the run's."
    )
    return result
