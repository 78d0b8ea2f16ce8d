"""One cancel of a whole tree: ms from ``handle.cancel()`` until every run has stopped.

The ``tree`` scenario with ``[slow]`` leaves (each inside a 600 s
``scan_archive``): ``[tree 99]`` is 100 runs, ``[tree 10x99]`` 1,001 runs
(one reply asks for at most 100 children). Once every leaf is inside its tool
(``tool_start`` events), a garbage collection, then ``handle.cancel()``; the
figure is the time until the last run of the tree has been saved
``interrupted`` (the store is passed through a wrapper that notes when each
``save``/``save_many`` of an interrupted state returns; every run's
``run_stopped`` is checked too). The time until ``handle.wait()`` returns
(the tree's lease and cancel requests let go as well) is shown beside it.
In-process scripted provider (nothing is in flight at the cancel).

Baseline: bare trio, the same number of tasks in nurseries of the same shape,
each in ``trio.sleep_forever()``, cancelled by one cancel scope: the time
until the outer nursery has exited.
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from . import common
from .common import row

FULL = {"trees": [(99,), (10, 99)], "repeats": {(99,): 15, (10, 99): 3}}
QUICK = {"trees": [(9,), (99,)], "repeats": {(9,): 2, (99,): 2}}
QUICK_NOTE = "; not judged with --quick: a time in ms from 2 repeats is noise (run without it)"
CANCEL_LIMIT_S = 120


class _SaveClock:
    """The store, passed through, noting when a save of an ``interrupted`` state returns.

    Wraps ``save`` and ``save_many`` (a runner may save a stopped tree's runs together);
    everything else is the store's own.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self.last_interrupted_save = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in ("save", "save_many"):
            return attr

        def timed(states: Any, *args: Any, **kwargs: Any) -> Any:
            from orchestra import Status

            result = attr(states, *args, **kwargs)
            saved = states if name == "save_many" else [states]
            if any(s.status is Status.INTERRUPTED for s in saved):
                self.last_interrupted_save = time.perf_counter()
            return result

        return timed


class _Clock:
    """Counts leaves inside their slow tool; notes when runs stop."""

    def __init__(self, leaves: int) -> None:
        import trio

        self.leaves = leaves
        self.in_tool = 0
        self.all_in_tool = trio.Event()
        self.stopped: list[float] = []

    def __call__(self, event: Any) -> None:
        if event.type == "tool_start" and event.data.get("tool") == "scan_archive":
            self.in_tool += 1
            if self.in_tool == self.leaves:
                self.all_in_tool.set()
        elif event.type == "run_stopped":
            self.stopped.append(time.perf_counter())


def _leaves(spec: tuple[int, ...]) -> int:
    n = 1
    for size in spec:
        n *= size
    return n


async def _cancel_once(spec: tuple[int, ...], store: Any) -> tuple[float, float]:
    """ms until the last run was saved ``interrupted``, ms until ``handle.wait()`` returned."""
    import trio

    from orchestra import Runner, Status

    clock = _Clock(_leaves(spec))
    provider = common.in_process_provider()
    saves = _SaveClock(store)
    runner = Runner(provider=provider, store=saves, sink=clock)
    agent = common.tree_agent(common.sandbox(), len(spec))
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, f"[tree {'x'.join(map(str, spec))}] [slow]")
        with trio.fail_after(CANCEL_LIMIT_S):
            await clock.all_in_tool.wait()
        gc.collect()
        start = time.perf_counter()
        handle.cancel("benchmark")
        result = await handle.wait()
        done = time.perf_counter()
    await provider.aclose()
    tree = result.walk()
    assert len(tree) == common.tree_runs(spec), len(tree)
    assert all(r.status is Status.INTERRUPTED for r in tree)
    assert store.load(result.state.run_id).status is Status.INTERRUPTED
    assert len(clock.stopped) == len(tree)
    return (saves.last_interrupted_save - start) * 1e3, (done - start) * 1e3


async def _bare_once(spec: tuple[int, ...]) -> float:
    """ms for one cancel scope to stop the same number of sleeping tasks, same shape."""
    import trio

    started = 0
    ready = trio.Event()
    total = common.tree_runs(spec)

    async def node(sizes: tuple[int, ...]) -> None:
        nonlocal started
        started += 1
        if started == total:
            ready.set()
        async with trio.open_nursery() as nursery:
            for _ in range(sizes[0] if sizes else 0):
                nursery.start_soon(node, sizes[1:])
            await trio.sleep_forever()

    async with trio.open_nursery() as outer:
        outer.start_soon(node, spec)
        await ready.wait()
        await trio.sleep(0.01)  # every task is inside its sleep
        gc.collect()
        start = time.perf_counter()
        outer.cancel_scope.cancel()
    return (time.perf_counter() - start) * 1e3


def run(quick: bool) -> common.Section:
    import trio

    from orchestra import MemoryStore, SQLiteStore

    p = QUICK if quick else FULL
    common.warm_tokenizer()
    directory = Path(tempfile.mkdtemp(prefix="orchestra-bench-cancel-"))
    trio.run(_cancel_once, p["trees"][0], MemoryStore())  # warm up
    rows: list[common.Row] = []
    targets = []
    for spec in p["trees"]:
        runs = common.tree_runs(spec)
        got: dict[str, list[tuple[float, float]]] = {"memory": [], "sqlite": []}
        bare: list[float] = []
        for i in range(p["repeats"][spec]):
            for kind in ("memory", "sqlite") if i % 2 == 0 else ("sqlite", "memory"):
                if kind == "memory":
                    got[kind].append(trio.run(_cancel_once, spec, MemoryStore()))
                else:
                    with SQLiteStore(directory / f"{runs}-{i}.db") as store:
                        got[kind].append(trio.run(_cancel_once, spec, store))
            bare.append(trio.run(_bare_once, spec))
        shape = f"{runs:,}-run tree ({'×'.join(map(str, spec))})"
        base = {"baseline": f"bare trio: cancel {runs:,} sleeping tasks", "paired": True}
        for kind, label in (("memory", "MemoryStore"), ("sqlite", "SQLiteStore")):
            rows.append(
                row(
                    f"{shape}, {label}: until every run is saved interrupted",
                    "ms",
                    [saved for saved, _ in got[kind]],
                    baseline_samples=bare,
                    **base,
                )
            )
            rows.append(
                row(
                    f"{shape}, {label}: until handle.wait() returns",
                    "ms",
                    [waited for _, waited in got[kind]],
                    baseline_samples=bare,
                    **base,
                )
            )
        if runs == 100:
            sqlite = rows[-2]
            targets.append(
                common.target(
                    "cancel of a 100-run tree with SQLite ≤ 10 ms",
                    f"{common.fmt(sqlite['median'])} ms (max {common.fmt(sqlite['max'])} ms)"
                    + (QUICK_NOTE if quick else ""),
                    None if quick else sqlite["median"] <= 10,  # an absolute time needs repeats
                )
            )
    repeats = ", ".join(f"{common.tree_runs(s):,} runs: {n}" for s, n in p["repeats"].items())
    return common.section(
        "cancel",
        "Cancel a tree",
        f"This run: repeats per store: {repeats}.",
        rows,
        targets,
    )
