"""Scale-out: trees per second and CPU per model call on workers over PostgreSQL.

Trees shaped as ``orchestra demo research`` (a root and 3 ``researcher``
children: 11 model calls) are submitted with
``orchestra.distributed.submit`` to 1, 2 and 4 ``orchestra worker --store
URL --concurrency C`` processes on a throwaway PostgreSQL cluster
(``tools/postgres.py``, a fresh database per group of workers), with a
window of trees in flight (C / 4 per worker: each tree's 4 runs may hold a
slot at once, so the window never needs more slots than the cluster has; a
tree is submitted as another finishes). The baseline: the same trees in one
process (``Runner`` with a ``SQLiteStore``), the same window, measured
interleaved with the workers (repeats alternate which goes first). Both ask
``orchestra serve-scripted`` in its own process, once with no latency and
once with ``--latency-ms 200``. CPU: the worker processes' and PostgreSQL's
(its server process, its live backends and those that ended) user + system
time from /proc, the embedded process's own; per model call = CPU / model
calls of the batch (counted from the saved trees after the clock stops).
Growth: trees/s of 4 workers against 1. Burst: ``10×`` the slots of a
cluster of 2 workers with ``--concurrency 4``, submitted at once, no
latency; it either completes within its time limit or is reported as not
completed with the runs left running (it must never hang the suite).
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import common
from .common import row

FULL: dict[str, Any] = {
    "workers": (1, 2, 4),
    "concurrency": 8,
    "rounds": 4,
    "repeats": 3,
    "latencies": (0.0, 200.0),
    "burst": (2, 4, 10),
    "burst_s": 240.0,
}
QUICK: dict[str, Any] = {
    "workers": (1, 2),
    "concurrency": 8,
    "rounds": 2,
    "repeats": 1,
    "latencies": (0.0, 200.0),
    "burst": (1, 2, 10),
    "burst_s": 60.0,
}
"""``rounds``: trees per batch = window × rounds; ``burst``: (workers,
concurrency, trees per slot); ``burst_s``: the burst's time limit."""

RUNS_PER_TREE = 4
"""A root and its 3 children: at most this many slots per tree at once."""
SCENARIO = "research"
SANDBOX_ENV = "ORCHESTRA_BENCH_SANDBOX"
AGENTS = "bench.scaleout:research_tree"
"""What workers import to rebuild the tree (``tools`` is on their path)."""
READY_S = 120.0
BATCH_S = 300.0
"""A batch of the throughput figures that takes longer is a failure of the section."""
POLL_S = 0.025
GROWTH_TARGET = 3.5
CPU_TARGET = 3.0


def research_tree() -> Any:
    """The ``orchestra demo research`` agent over ``$ORCHESTRA_BENCH_SANDBOX`` (workers
    import this)."""
    from orchestra.testing import demo_agent

    return demo_agent(SCENARIO, Path(os.environ[SANDBOX_ENV]))


def task() -> str:
    from orchestra.testing import demo_task

    return str(demo_task(SCENARIO))


# -- PostgreSQL and workers --------------------------------------------------------------


def _postgres(*args: str) -> subprocess.CompletedProcess[str]:
    tool = [common.PYTHON, str(common.TOOLS / "postgres.py")]
    return subprocess.run([*tool, *args], capture_output=True, text=True, timeout=180)


@contextmanager
def postgres() -> Iterator[tuple[str, int]]:
    """A throwaway PostgreSQL cluster: its URL and its server's pid (removed after)."""
    state = tempfile.mkdtemp(prefix="orchestra-bench-pg.")
    try:
        started = _postgres("start", "--dir", state)
        if started.returncode != 0:
            raise RuntimeError(f"cannot start PostgreSQL: {started.stderr.strip()}")
        pid = int((Path(state) / "data" / "postmaster.pid").read_text().split()[0])
        yield started.stdout.strip(), pid
    finally:
        _postgres("stop", "--dir", state)
        shutil.rmtree(state, ignore_errors=True)


@contextmanager
def database(server_url: str) -> Iterator[str]:
    """A fresh database (and DBOS's beside it), dropped afterwards."""
    import psycopg

    name = f"orchestra_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for db in (name, f"{name}_dbos"):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _worker_env() -> dict[str, str]:
    """The workers' environment: this checkout and ``tools`` first on the path."""
    path = [str(common.ROOT), str(common.TOOLS), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "OPENAI_API_KEY": "bench",
    }


@contextmanager
def workers(
    db: str, count: int, concurrency: int, model_url: str, logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` ready ``orchestra worker`` processes on ``db``, asking ``model_url``."""
    procs: list[subprocess.Popen[bytes]] = []
    env = _worker_env()
    try:
        for i in range(1, count + 1):
            argv = [common.PYTHON, "-m", "orchestra", "worker", "--store", db]
            argv += ["--id", f"w{i}", "--concurrency", str(concurrency), "--base-url", model_url]
            with (logs / f"w{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        argv, cwd=common.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        for i, proc in enumerate(procs, 1):
            _wait_ready(proc, logs / f"w{i}.log")
        yield procs
    finally:
        for proc in procs:
            common.kill_tree(proc)


def _wait_ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while b"ready" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"worker not ready after {READY_S:.0f} s:\n{tail}")
        time.sleep(0.05)


# -- CPU ---------------------------------------------------------------------------------


class Meters:
    """CPU seconds so far of the workers, PostgreSQL, the model server and this process."""

    def __init__(self, workers: Sequence[int], postgres: int, server: int) -> None:
        self.workers, self.postgres, self.server = list(workers), postgres, server

    def read(self) -> dict[str, float]:
        return {
            "workers": sum(common.cpu_seconds(p) for p in self.workers),
            "postgres": common.tree_cpu_seconds(self.postgres),
            "server": common.cpu_seconds(self.server),
            "client": time.process_time(),
            "machine": machine_busy_seconds(),
        }


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (every process, ours or not) since
    boot, from /proc/stat: all but idle and iowait."""
    with open("/proc/stat", encoding="utf-8") as f:
        ticks = [int(t) for t in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


# -- one batch on the workers -------------------------------------------------------------


def _finished(cluster: Any, roots: set[str]) -> set[str]:
    """Those of ``roots`` no longer running (one query)."""
    with cluster.store.transaction() as conn:
        rows = conn.execute(
            "SELECT run_id FROM runs WHERE run_id = ANY(%s) AND status <> 'running'",
            (list(roots),),
        ).fetchall()
    return {r[0] for r in rows}


def submit_window(cluster: Any, agent: Any, trees: int, window: int, limit_s: float) -> list[str]:
    """Submit ``trees`` trees, at most ``window`` in flight; their roots once all finished.

    Raises:
        RuntimeError: they did not all finish within ``limit_s``.
    """
    from orchestra.distributed import AGENTS_KEY, submit

    deadline = time.monotonic() + limit_s
    pending: set[str] = set()
    done: list[str] = []
    text = task()
    while len(done) < trees:
        while len(done) + len(pending) < trees and len(pending) < window:
            pending.add(submit(cluster, agent, text, metadata={AGENTS_KEY: AGENTS}))
        ended = _finished(cluster, pending)
        pending -= ended
        done += ended
        if not ended:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(done)} of {trees} trees finished in {limit_s:.0f} s "
                    f"({len(pending)} still running)"
                )
            time.sleep(POLL_S)
    return done


def count_calls(cluster: Any, roots: Sequence[str]) -> tuple[int, int]:
    """Model calls and runs of the trees; every run must have completed."""
    from orchestra import Status

    calls = runs = 0
    for root in roots:
        tree = cluster.store.tree(root)
        bad = [(s.run_id, s.status.value, s.reason) for s in tree if s.status != Status.COMPLETED]
        assert not bad and len(tree) == RUNS_PER_TREE, bad or len(tree)
        calls += sum(s.turns for s in tree)
        runs += len(tree)
    return calls, runs


def cluster_batch(
    cluster: Any, agent: Any, meters: Meters, trees: int, window: int
) -> dict[str, float]:
    """Wall seconds, CPU seconds (by process kind) and model calls of one batch."""
    gc.collect()
    before, start = meters.read(), time.perf_counter()
    roots = submit_window(cluster, agent, trees, window, BATCH_S)
    wall = time.perf_counter() - start
    spent = _spent(before, meters.read())
    calls, _ = count_calls(cluster, roots)
    return {"wall": wall, "calls": calls, "trees": len(roots), **spent}


# -- one batch embedded ---------------------------------------------------------------------


async def _embedded(url: str, agent: Any, trees: int, window: int, path: Path) -> dict[str, float]:
    import trio

    from orchestra import OpenAIProvider, Runner, SQLiteStore, Status

    provider = OpenAIProvider(base_url=url, api_key="bench")
    results: list[Any] = []
    with SQLiteStore(path) as store:
        runner = Runner(provider=provider, store=store)
        slots = trio.Semaphore(window)
        text = task()

        async def one() -> None:
            async with slots:
                results.append(await runner.run(agent, text))

        gc.collect()
        cpu, start = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(trees):
                nursery.start_soon(one)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    await provider.aclose()
    states = [s for r in results for s in r.walk()]
    assert all(s.status is Status.COMPLETED for s in states)
    assert len(states) == trees * RUNS_PER_TREE, len(states)
    calls = sum(s.state.turns for s in states)
    return {"wall": wall, "cpu": cpu, "calls": calls, "trees": trees}


def embedded_batch(url: str, agent: Any, trees: int, window: int) -> dict[str, float]:
    """Wall, CPU seconds and model calls of the same batch in this process, SQLite store."""
    import trio

    directory = Path(tempfile.mkdtemp(prefix="orchestra-bench-embedded."))
    try:
        return trio.run(_embedded, url, agent, trees, window, directory / "runs.db")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- the measurements -------------------------------------------------------------------------


Samples = dict[str, list[float]]


def _per_call(batch: dict[str, float], key: str) -> float:
    return batch[key] / batch["calls"] * 1e3


def measure_group(
    server: str, db: str, pids: tuple[int, int], n: int, p: dict[str, Any], logs: Path
) -> Samples:
    """The throughput samples of ``n`` workers beside the embedded path (``pids``:
    PostgreSQL's server and the model server, whose CPU is read)."""
    from orchestra.distributed import Cluster

    concurrency = p["concurrency"]
    window = n * concurrency // RUNS_PER_TREE
    trees = window * p["rounds"]
    agent = research_tree()
    kinds = ("rate", "workers", "postgres", "server", "cores", "machine", "calls")
    got: Samples = {k: [] for k in kinds}
    got.update({"embedded_cpu": [], "embedded_rate": []})
    with workers(db, n, concurrency, server, logs) as procs, Cluster(db) as cluster:
        meters = Meters([proc.pid for proc in procs], *pids)
        cluster_batch(cluster, agent, meters, window, window)  # warm up the workers
        embedded_batch(server, agent, window, window)  # and this process
        for i in range(p["repeats"]):
            if i % 2:
                embedded = embedded_batch(server, agent, trees, window)
            batch = cluster_batch(cluster, agent, meters, trees, window)
            if not i % 2:
                embedded = embedded_batch(server, agent, trees, window)
            got["rate"].append(batch["trees"] / batch["wall"])
            got["workers"].append(_per_call(batch, "workers"))
            got["postgres"].append(_per_call(batch, "postgres"))
            got["server"].append(_per_call(batch, "server"))
            busy = batch["workers"] + batch["postgres"] + batch["server"] + batch["client"]
            got["cores"].append(busy / batch["wall"])
            got["machine"].append(batch["machine"] / batch["wall"])
            got["calls"].append(batch["calls"] / batch["trees"])
            got["embedded_rate"].append(embedded["trees"] / embedded["wall"])
            got["embedded_cpu"].append(_per_call(embedded, "cpu"))
    return got


def burst(server: str, db: str, p: dict[str, Any], logs: Path) -> tuple[str, bool, float]:
    """Submit 10× the slots at once; (what happened, whether all completed, seconds)."""
    from orchestra.distributed import AGENTS_KEY, Cluster, submit

    n, concurrency, per_slot = p["burst"]
    trees = n * concurrency * per_slot
    agent = research_tree()
    with workers(db, n, concurrency, server, logs), Cluster(db) as cluster:
        start = time.perf_counter()
        roots = {
            submit(cluster, agent, task(), metadata={AGENTS_KEY: AGENTS}) for _ in range(trees)
        }
        pending, deadline = set(roots), time.monotonic() + p["burst_s"]
        while pending and time.monotonic() < deadline:
            pending -= _finished(cluster, pending)
            time.sleep(0.1)
        took = time.perf_counter() - start
        if not pending:
            _, runs = count_calls(cluster, sorted(roots))
            return f"{trees} of {trees} trees ({runs} runs) in {took:.1f} s", True, took
        stuck = _running(cluster)
    done = trees - len(pending)
    return (
        f"did not complete: {done} of {trees} trees in {p['burst_s']:.0f} s; runs left "
        f"running: {stuck}",
        False,
        took,
    )


def _running(cluster: Any) -> str:
    with cluster.store.transaction() as conn:
        roots, children = conn.execute(
            "SELECT count(*) FILTER (WHERE parent_id IS NULL), "
            "count(*) FILTER (WHERE parent_id IS NOT NULL) FROM runs WHERE status = 'running'"
        ).fetchone()
    return f"{roots} roots, {children} children"


def run(quick: bool) -> common.Section:
    p = QUICK if quick else FULL
    common.warm_tokenizer()
    os.environ[SANDBOX_ENV] = str(common.sandbox())  # for research_tree(), here and in workers
    logs = Path(tempfile.mkdtemp(prefix="orchestra-bench-workers."))
    groups: dict[tuple[float, int], Samples] = {}
    with ExitStack() as stack:
        server_url, pg_pid = stack.enter_context(postgres())
        for latency in p["latencies"]:
            with common.scripted_process(latency) as (model_url, model_pid):
                for n in p["workers"]:
                    with database(server_url) as db:
                        pids = (pg_pid, model_pid)
                        groups[latency, n] = measure_group(model_url, db, pids, n, p, logs)
        with common.scripted_server() as model_url, database(server_url) as db:
            burst_text, burst_ok, _ = burst(model_url, db, p, logs)
    return _section(p, groups, burst_text, burst_ok)


# -- the report ---------------------------------------------------------------------------------


def _workers(n: int) -> str:
    return f"{n} worker{'s' if n > 1 else ''}"


def _group_rows(p: dict[str, Any], groups: dict[tuple[float, int], Samples]) -> list[common.Row]:
    rows = []
    for (latency, n), got in groups.items():
        window = n * p["concurrency"] // RUNS_PER_TREE
        where = (
            f"{latency:.0f} ms latency, {_workers(n)} × "
            f"{p['concurrency']} slots, {window} trees in flight"
        )
        embedded = f"embedded, SQLite, {window} in flight"
        rows.append(
            row(
                f"{where}: trees/s",
                "trees/s",
                got["rate"],
                baseline=embedded,
                baseline_samples=got["embedded_rate"],
                paired=True,
            )
        )
        for key, what in (("workers", "worker"), ("postgres", "PostgreSQL")):
            rows.append(
                row(
                    f"{where}: {what} CPU per model call",
                    "ms",
                    got[key],
                    baseline=f"{embedded}: CPU per call",
                    baseline_samples=got["embedded_cpu"],
                    paired=True,
                )
            )
    return rows


def _growth_rows(p: dict[str, Any], groups: dict[tuple[float, int], Samples]) -> list[common.Row]:
    first, last = p["workers"][0], p["workers"][-1]
    return [
        row(
            f"{latency:.0f} ms latency: trees/s, {last} workers against {first}",
            "trees/s",
            groups[latency, last]["rate"],
            baseline=_workers(first),
            baseline_samples=groups[latency, first]["rate"],
        )
        for latency in p["latencies"]
    ]


def _targets(
    p: dict[str, Any],
    groups: dict[tuple[float, int], Samples],
    rows: list[common.Row],
    burst_text: str,
    burst_ok: bool,
) -> list[dict[str, Any]]:
    fmt = common.fmt
    first, last = p["workers"][0], p["workers"][-1]
    slow = max(p["latencies"])
    cpu = next(r for r in rows if r["name"].startswith("0 ms") and "worker CPU" in r["name"])
    growth = common.find(rows, f"{slow:.0f} ms latency: trees/s, {last} workers against {first}")
    cores = os.cpu_count() or 1
    busy = common.summary(groups[slow, last]["cores"])["median"]
    machine = common.summary(groups[slow, last]["machine"])["median"]
    need = _cores_needed(groups, slow, first, last)
    ratio = growth["ratio"]
    # judged only where the cores are there for it: a core per worker, plus PostgreSQL's
    # and the model server's (on fewer, 4 workers share what 1 worker had)
    judged = None if cores < last + 2 else ratio is not None and ratio >= GROWTH_TARGET
    n, concurrency, per_slot = p["burst"]
    return [
        common.target(
            f"worker CPU per model call ≤ {fmt(CPU_TARGET)}× embedded",
            f"{common.ratio_text(cpu['ratio'])} ({fmt(cpu['median'])} ms vs "
            f"{fmt(cpu['baseline_summary']['median'])} ms; 0 ms latency, {first} worker)",
            cpu["ratio"] is not None and cpu["ratio"] <= CPU_TARGET,
        ),
        common.target(
            f"trees/s {first} → {last} workers ≥ {fmt(GROWTH_TARGET)}× ({slow:.0f} ms latency)",
            f"{common.ratio_text(ratio)}; at {last} workers the workers, PostgreSQL, the "
            f"model server and the client kept {fmt(busy)} of {cores} cores busy, the "
            f"whole machine {fmt(machine)}; {last / first:.0f}× {_workers(first)}'s trees/s "
            f"at {_workers(last)}' CPU per tree needs {fmt(need)} cores",
            judged,
        ),
        common.target(
            f"a burst of {per_slot}× the cluster's slots completes",
            f"{_workers(n)} × {concurrency} slots: {burst_text}",
            burst_ok,
        ),
    ]


def _cores_needed(
    groups: dict[tuple[float, int], Samples], latency: float, first: int, last: int
) -> float:
    """Cores that ``last`` workers would keep busy at ``last / first`` times the trees/s
    of ``first``, at their own CPU per tree (workers, PostgreSQL, model server)."""

    def median(n: int, key: str) -> float:
        value = common.summary(groups[latency, n][key])["median"]
        return float(value or 0.0)

    per_call_ms = sum(median(last, k) for k in ("workers", "postgres", "server"))
    rate = median(first, "rate") * last / first
    return rate * median(last, "calls") * per_call_ms / 1e3


def _section(
    p: dict[str, Any], groups: dict[tuple[float, int], Samples], burst_text: str, burst_ok: bool
) -> common.Section:
    rows = _group_rows(p, groups) + _growth_rows(p, groups)
    n, concurrency, per_slot = p["burst"]
    trees = n * concurrency * per_slot
    rows.append(
        row(
            f"burst: {trees} trees at once on {_workers(n)} × {concurrency} slots",
            "s",
            [],
            text=burst_text,
        )
    )
    result = common.section(
        "scaleout",
        "Scale-out: workers over PostgreSQL",
        f"This run: workers {', '.join(map(str, p['workers']))}, {p['concurrency']} slots "
        f"each; {p['repeats']} repeats of {p['rounds']} windows of trees per group; burst "
        f"{trees} trees on {_workers(n)} × {concurrency} slots, time limit "
        f"{p['burst_s']:.0f} s.",
        rows,
        _targets(p, groups, rows, burst_text, burst_ok),
    )
    server = {k: common.summary(g["server"])["median"] for k, g in groups.items()}
    cores = {k: common.summary(g["cores"])["median"] for k, g in groups.items()}
    machine = {k: common.summary(g["machine"])["median"] for k, g in groups.items()}
    result["notes"].append(
        "Cores kept busy during the batches on workers, as CPU seconds / wall seconds: "
        "by the workers, PostgreSQL, the model server and the submitting client, and "
        "(after the slash) by the whole machine, every process on it included: "
        + "; ".join(
            f"{lat:.0f} ms, {_workers(n)}: {common.fmt(c)} / {common.fmt(machine[lat, n])}"
            for (lat, n), c in cores.items()
        )
        + ". The scripted model server's CPU per model call: "
        + ", ".join(f"{common.fmt(v)} ms" for v in server.values())
        + ". PostgreSQL's CPU includes the client's submissions and its polling for "
        "finished trees (one query every 25 ms)."
    )
    return result
