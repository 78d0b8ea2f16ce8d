"""N concurrent ``plan`` runs over loopback HTTP: Orchestra against the bare loop.

Each (N, mode) runs in a fresh process, so its peak RSS is its own: it
imports, makes one run to load what runs need, notes its RSS, then starts N
runs at once in one nursery. Orchestra: one shared ``OpenAIProvider`` and one
``Runner`` with the default ``MemoryStore`` (which keeps every state, as a
user's would); bare: one shared ``httpx.AsyncClient`` with httpx's default
pool limits (100 connections, 20 kept alive) and the provider's 120 s
timeout. The worker reports progress twice a second; one that has not
finished within its time limit is killed and reported as "did not complete"
with the runs done by then. Throughput at 200: batches of 200 concurrent
runs, Orchestra and bare alternating in one process (after a warm-up batch).

RSS per run = (peak RSS − RSS before the runs) / N.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import common
from .common import emit, row

FULL = {
    "ns": [100, 1000, 10000],
    "repeats": {100: 3},
    "limit_s": {100: 60, 1000: 45, 10000: 120},
    "hopeless_limit_s": 20,
    "throughput_n": 200,
    "throughput_repeats": 3,
}
QUICK = {
    "ns": [20, 100],
    "repeats": {},
    "limit_s": {20: 20, 100: 20},
    "hopeless_limit_s": 10,
    "throughput_n": 40,
    "throughput_repeats": 2,
}
GRACE_S = 1.0


async def _clients(params: dict[str, Any], names: tuple[str, ...]) -> tuple[Any, Any]:
    """One run function per mode named (each sharing one client across its runs), and a
    closer. The bare mode imports neither orchestra nor the tokenizer: its process holds
    only what the bare loop needs."""
    import httpx

    from .bare import TASK, bare_run

    url, directory, tools = params["url"], Path(params["sandbox"]), params["tools"]
    modes: dict[str, Any] = {}
    closers: list[Any] = []
    if "orchestra" in names:
        from orchestra import OpenAIProvider, Runner, Status

        common.warm_tokenizer()
        agent = common.plan_agent(directory)
        provider = OpenAIProvider(base_url=url, api_key="bench")
        runner = Runner(provider=provider)

        async def orchestra_run() -> bool:
            result = await runner.run(agent, TASK)
            return bool(result.status is Status.COMPLETED)

        modes["orchestra"] = orchestra_run
        closers.append(provider.aclose)
    if "bare" in names:
        client = httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer bench"}, timeout=120.0
        )

        async def bare() -> bool:
            return await bare_run(client, tools, directory) == 3

        modes["bare"] = bare
        closers.append(client.aclose)

    async def close() -> None:
        for closer in closers:
            await closer()

    return modes, close


async def _concurrent(params: dict[str, Any]) -> None:
    import trio

    modes, close = await _clients(params, (params["mode"],))
    one = modes[params["mode"]]
    n = params["n"]
    assert await one()  # loads what a run needs (modules, the tokenizer): not per-run memory
    done = 0

    async def counted() -> None:
        nonlocal done
        ok = await one()  # not `done += await one()`: that reads `done` before the await
        done += ok

    base = common.rss_mb()
    emit(ready=True, base_rss_mb=base, peak_before_mb=common.peak_rss_mb())
    start_cpu, start = time.process_time(), time.perf_counter()

    def report(**extra: Any) -> None:
        emit(
            completed=done,
            elapsed_s=time.perf_counter() - start,
            cpu_s=time.process_time() - start_cpu,
            rss_mb=common.rss_mb(),
            peak_rss_mb=common.peak_rss_mb(),
            **extra,
        )

    async def progress() -> None:
        while True:
            await trio.sleep(0.5)
            report()

    async with trio.open_nursery() as outer:
        outer.start_soon(progress)
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(counted)
        outer.cancel_scope.cancel()
    report(final=True)
    await close()


def concurrent_worker(params: dict[str, Any]) -> None:
    """Worker: N concurrent runs of one mode (see the module docstring)."""
    import trio

    common.raise_fd_limit()
    trio.run(_concurrent, params)


async def _throughput(params: dict[str, Any]) -> dict[str, list[float]]:
    import trio

    modes, close = await _clients(params, ("orchestra", "bare"))
    out: dict[str, list[float]] = {name: [] for name in modes}

    async def batch(name: str, n: int) -> float:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(modes[name])
        return n / (time.perf_counter() - start)

    for name in modes:
        await batch(name, 20)
    for i in range(params["repeats"]):
        for name in ("orchestra", "bare") if i % 2 == 0 else ("bare", "orchestra"):
            out[name].append(await batch(name, params["n"]))
    await close()
    return out


def throughput_worker(params: dict[str, Any]) -> None:
    """Worker: batches of N concurrent runs, Orchestra and bare alternating; runs/s each."""
    import trio

    common.raise_fd_limit()
    emit(final=True, **trio.run(_throughput, params))


def _one(shared: dict[str, Any], mode: str, n: int, limit: float) -> dict[str, Any]:
    """Run one (N, mode) worker within ``limit`` seconds of its start; what it reported."""
    worker = common.Worker("concurrent", {**shared, "mode": mode, "n": n})
    try:
        ready = worker.next(time.perf_counter() + 120)
        if not ready or not ready.get("ready"):
            raise RuntimeError(f"{mode} N={n} did not start\n{worker.stderr_tail()}")
        deadline = time.perf_counter() + limit + GRACE_S
        last: dict[str, Any] = {
            "completed": 0,
            "elapsed_s": 0.0,
            "peak_rss_mb": ready["peak_before_mb"],
        }
        while (line := worker.next(deadline)) is not None:
            if line["elapsed_s"] <= limit:
                last = line
            if line.get("final"):
                break
        else:
            if time.perf_counter() < deadline:  # its output ended early: it crashed
                raise RuntimeError(f"{mode} N={n} failed\n{worker.stderr_tail()}")
            # Cut short: a starved event loop may not have reported lately; its peak RSS
            # is read from outside (its count of runs done is then a lower bound).
            peak = common.status_mb("VmHWM", worker.process.pid)
            if peak == peak:  # not NaN: it was still there to be read
                last = {**last, "peak_rss_mb": max(peak, last["peak_rss_mb"])}
    finally:
        worker.close()
    complete = bool(last.get("final")) and last["completed"] == n
    return {**last, "base_rss_mb": ready["base_rss_mb"], "complete": complete, "limit_s": limit}


def _did_not(m: dict[str, Any], n: int) -> str:
    text = f"did not complete in {m['limit_s']:.0f} s ({m['completed']:,} of {n:,} done)"
    if m.get("projected_s"):
        text += f"; its rate at the N before needs ≥ {m['projected_s']:.0f} s"
    return text


def _limit(
    p: dict[str, Any], n: int, before: dict[int, list[dict[str, Any]]]
) -> tuple[float, float]:
    """The time limit for N runs of a mode, and the time its rate at the N before projects.

    A mode that could not finish the N before, or whose rate there projects more than 1.5 times
    the limit (its cost per run does not fall with N), gets the short limit.
    """
    limit = float(p["limit_s"][n])
    smaller = [k for k in before if k < n]
    if not smaller:
        return limit, 0.0
    k = max(smaller)
    if not all(m["complete"] for m in before[k]):
        return min(limit, p["hopeless_limit_s"]), 0.0
    projected = max(m["elapsed_s"] for m in before[k]) * n / k
    if projected > 1.5 * limit:
        return min(limit, p["hopeless_limit_s"]), projected
    return limit, 0.0


def run(quick: bool) -> common.Section:
    p = QUICK if quick else FULL
    rows: list[common.Row] = []
    measured: dict[str, dict[int, list[dict[str, Any]]]] = {"orchestra": {}, "bare": {}}
    directory = common.sandbox()
    tools = common.plan_agent(directory).tool_specs()
    with common.scripted_server() as url:
        shared = {"url": url, "sandbox": str(directory), "tools": tools}
        for n in p["ns"]:
            for i in range(p["repeats"].get(n, 1)):
                for mode in ("orchestra", "bare") if i % 2 == 0 else ("bare", "orchestra"):
                    limit, projected = _limit(p, n, measured[mode])
                    got = _one(shared, mode, n, limit)
                    measured[mode].setdefault(n, []).append({**got, "projected_s": projected})
        tput = common.run_worker(
            "throughput",
            {**shared, "n": p["throughput_n"], "repeats": p["throughput_repeats"]},
            timeout=600,
        )
    for n in p["ns"]:
        rows.extend(_rows_for(n, measured["orchestra"][n], measured["bare"][n]))
    tn = p["throughput_n"]
    rows.append(
        row(
            f"{tn} concurrent runs (batches in one process): throughput",
            "runs/s",
            tput["orchestra"],
            baseline="bare trio+httpx loop",
            baseline_samples=tput["bare"],
            paired=True,
        )
    )
    big = p["ns"][-1]
    last = measured["orchestra"][big][-1]
    tput_row = rows[-1]
    repeats = ", ".join(f"N={n:,}: {p['repeats'].get(n, 1)}" for n in p["ns"])
    limits = ", ".join(f"N={n:,}: {p['limit_s'][n]} s" for n in p["ns"])
    result = common.section(
        "concurrency",
        "Concurrent runs over loopback HTTP",
        f"This run: N = {', '.join(f'{n:,}' for n in p['ns'])}; repeats: {repeats}; time "
        f"limits: {limits} ({p['hopeless_limit_s']} s for a mode that did not complete the N "
        "before, or whose rate there projects over 1.5 times the limit); "
        f"{p['throughput_repeats']} batches of {tn} per mode.",
        rows,
        [
            common.target(
                f"throughput at {tn} concurrent ≥ 1.0× bare",
                f"{common.ratio_text(tput_row['ratio'])} ({common.fmt(tput_row['median'])} vs "
                f"{common.fmt(tput_row['baseline_summary']['median'])} runs/s)",
                tput_row["ratio"] is not None and tput_row["ratio"] >= 1.0,
            ),
            common.target(
                f"{big:,} concurrent runs complete over HTTP",
                f"{last['completed']:,} of {big:,} in {last['elapsed_s']:.1f} s"
                if last["complete"]
                else _did_not(last, big),
                last["complete"],
            ),
        ],
    )
    result["notes"].append(_growth(rows, p["ns"]))
    result["raw"] = {"orchestra": measured["orchestra"], "bare": measured["bare"], "tput": tput}
    return result


def _growth(rows: list[common.Row], ns: list[int]) -> str:
    """One sentence: how runs/s and RSS per run move with N, for each mode."""
    parts = []
    for label, key in (("Orchestra", "median"), ("bare", "baseline")):
        rates, rss = [], []
        for n in ns:
            rate = common.find(rows, f"N={n:,}: throughput")
            per_run = common.find(rows, f"N={n:,}: RSS per run")
            if key == "median":
                rates.append(rate["median"])
                rss.append(per_run["median"])
            else:
                rates.append(rate["baseline_summary"]["median"])
                rss.append(per_run["baseline_summary"]["median"])
        parts.append(
            f"{label}: {' → '.join(common.fmt(r) for r in rates)} runs/s and "
            f"{' → '.join(common.fmt(r) for r in rss)} KB per run"
        )
    shown = " → ".join(f"{n:,}" for n in ns)
    return (
        f"Growth with N ({shown}): {'; '.join(parts)} (flat RSS per run = memory linear in N; "
        "a run cut short counts the runs it finished and the memory of all N in flight)."
    )


def _done_text(measures: list[dict[str, Any]], n: int) -> str:
    last = measures[-1]
    if all(m["complete"] for m in measures):
        seconds = "/".join(f"{m['elapsed_s']:.1f}" for m in measures)
        return f"{n:,} of {n:,} in {seconds} s"
    return _did_not(last, n)


def _rows_for(n: int, ours: list[dict[str, Any]], bare: list[dict[str, Any]]) -> list[common.Row]:
    """Completed, runs/s, peak RSS and RSS per run at one N (a run cut short counts what it did)."""
    base = {"baseline": "bare trio+httpx loop", "paired": len(ours) == len(bare)}

    def per_run(m: dict[str, Any]) -> float:
        return float((m["peak_rss_mb"] - m["base_rss_mb"]) * 1024 / n)

    def rate(m: dict[str, Any]) -> float:
        return float(m["completed"] / m["elapsed_s"]) if m["elapsed_s"] else 0.0

    return [
        row(
            f"N={n:,}: completed",
            "runs",
            [m["completed"] for m in ours],
            baseline="bare trio+httpx loop",
            baseline_samples=[m["completed"] for m in bare],
            text=_done_text(ours, n),
            baseline_text=_done_text(bare, n),
        ),
        row(
            f"N={n:,}: throughput",
            "runs/s",
            [rate(m) for m in ours],
            baseline_samples=[rate(m) for m in bare],
            **base,
        ),
        row(
            f"N={n:,}: peak RSS",
            "MB",
            [m["peak_rss_mb"] for m in ours],
            baseline_samples=[m["peak_rss_mb"] for m in bare],
            **base,
        ),
        row(
            f"N={n:,}: RSS per run",
            "KB",
            [per_run(m) for m in ours],
            baseline_samples=[per_run(m) for m in bare],
            **base,
        ),
    ]
