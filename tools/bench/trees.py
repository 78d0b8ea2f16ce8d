"""Trees: time per model call of nested runs against the same number of runs flat.

Agents built with the public API (``Agent.as_tool`` nested ``levels`` deep)
run the ``tree`` scenario of the scripted provider, over loopback HTTP (the
server in another process, so the CPU figures are Orchestra's): ``[tree 1000]``
is a root asking for 1,000 children (100 per reply, the batches one after
another), ``[tree 10x10x10]`` 1,111 runs, a chain ``[tree 1x1x...]`` ten
levels below its root. A leaf answers at once (one model call); a parent
makes one call per batch of children plus its answer. The baseline: as many
leaf runs as the tree has, started at once as root runs (flat), on the same
provider. Per model call = wall (or this process's CPU) time / model calls of
the whole tree; the target is read on wall time. Each repeat runs every
shape and the flat baseline once, with a fresh ``Runner`` (default
``MemoryStore``), the tree first in even repeats and the flat runs first in odd ones.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from . import common
from .common import row

FULL = {"fan": 1000, "nested": (10, 10, 10), "chain": 10, "chains": 20, "repeats": 8}
QUICK = {"fan": 50, "nested": (3, 3, 3), "chain": 10, "chains": 2, "repeats": 2}


async def _tree(url: str, spec: tuple[int, ...], copies: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds, model calls and runs of ``copies`` trees of this shape, one
    after another."""
    from orchestra import OpenAIProvider, Runner, Status

    provider = OpenAIProvider(base_url=url, api_key="bench")
    runner = Runner(provider=provider)
    agent = common.tree_agent(common.sandbox(), len(spec))
    task = f"[tree {'x'.join(map(str, spec))}]"
    gc.collect()
    results = []
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(copies):
        results.append(await runner.run(agent, task))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    await provider.aclose()
    calls = runs = 0
    for result in results:  # counted after the clock stops, as _flat does
        tree = result.walk()
        assert all(r.status is Status.COMPLETED for r in tree), result.state.reason
        calls += sum(r.state.turns for r in tree)
        runs += len(tree)
    assert runs == copies * common.tree_runs(spec), runs
    return seconds, cpu, calls, runs


async def _flat(url: str, runs: int) -> tuple[float, float, int]:
    """Wall and CPU seconds and model calls of ``runs`` leaf runs started at once as roots."""
    import trio

    from orchestra import OpenAIProvider, Runner, Status

    provider = OpenAIProvider(base_url=url, api_key="bench")
    runner = Runner(provider=provider)
    agent = common.tree_agent(common.sandbox(), 0)
    results: list[Any] = []

    async def one() -> None:
        results.append(await runner.run(agent, "[tree ]"))

    gc.collect()
    cpu, start = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(one)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    await provider.aclose()
    assert all(r.status is Status.COMPLETED for r in results) and len(results) == runs
    return seconds, cpu, sum(r.state.turns for r in results)


def run(quick: bool) -> common.Section:
    import trio

    p = QUICK if quick else FULL
    common.warm_tokenizer()
    shapes = {
        f"1 root + {p['fan']:,} children": ((p["fan"],), 1),
        f"{p['chains']} chains of depth {p['chain']}": ((1,) * p["chain"], p["chains"]),
        f"{'×'.join(map(str, p['nested']))} tree": (p["nested"], 1),
    }
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "flat_wall": [], "flat_cpu": []} for name in shapes
    }
    facts: dict[str, tuple[int, int]] = {}
    with common.scripted_server() as url:
        trio.run(_tree, url, (3, 3), 1)  # warm up
        for i in range(p["repeats"]):
            for name, (spec, copies) in shapes.items():
                runs = copies * common.tree_runs(spec)
                if i % 2:  # alternate which goes first: neither inherits the other's state
                    flat_wall, flat_cpu, flat_calls = trio.run(_flat, url, runs)
                wall, cpu, calls, runs = trio.run(_tree, url, spec, copies)
                if not i % 2:
                    flat_wall, flat_cpu, flat_calls = trio.run(_flat, url, runs)
                facts[name] = (runs, calls)
                got = samples[name]
                got["wall"].append(wall / calls * 1e3)
                got["cpu"].append(cpu / calls * 1e3)
                got["flat_wall"].append(flat_wall / flat_calls * 1e3)
                got["flat_cpu"].append(flat_cpu / flat_calls * 1e3)
    rows = []
    for key, what in (("wall", "wall"), ("cpu", "client CPU")):
        for name in shapes:
            runs, calls = facts[name]
            got = samples[name]
            rows.append(
                row(
                    f"{name} ({runs:,} runs, {calls:,} model calls): {what} per model call",
                    "ms",
                    got[key],
                    baseline=f"{runs:,} leaf runs flat",
                    baseline_samples=got[f"flat_{key}"],
                    paired=True,
                )
            )
    nested = rows[len(shapes) - 1]
    result = common.section(
        "trees",
        "Trees",
        f"This run: {p['repeats']} repeats.",
        rows,
        [
            common.target(
                f"{'×'.join(map(str, p['nested']))} ≤ 1.2× flat per model call",
                f"{common.ratio_text(nested['ratio'])} wall ({common.fmt(nested['median'])} ms vs "
                f"{common.fmt(nested['baseline_summary']['median'])} ms)",
                nested["ratio"] is not None and nested["ratio"] <= 1.2,
            )
        ],
    )
    result["notes"].append(
        "A flat leaf makes one model call; a parent makes one per batch of up to 100 children "
        "plus its answer, with every child's answer in its prompt, and saves its state when "
        "each child starts and when its answer arrives. A chain runs one model call at a "
        "time, so its wall time per call includes every reply's round trip, which the flat "
        "runs overlap; its client CPU per call compares Orchestra's own work."
    )
    return result
