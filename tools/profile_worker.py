"""Where a worker's model-call step goes: its CPU per model call beside the embedded path's.

One command::

    python tools/profile_worker.py [--trees 60] [--concurrency 4] [--repeats 3]
                                   [--url URL] [--no-py-spy] [--keep DIR]
                                   [--scenario plan|research]

It starts a throwaway PostgreSQL (``tools/postgres.py``, in a temporary
directory; or uses ``--url``, a server whose superuser may create databases),
a fresh database, and one ``orchestra worker`` process on it (its embedded
scripted server, no model latency; the worker runs the checkout this process
imports, so ``PYTHONPATH=OTHER_CHECKOUT`` measures another version), and warms
it up with a few trees. Then each of ``--repeats`` rounds runs the same trees
embedded (in a child process: ``Runner``, SQLite store, the in-process
scripted server, the same concurrency), then submits ``--trees`` ``plan``
trees at once (3 model calls each) with :func:`orchestra.distributed.submit`
and waits for them. Per round, per model call:

- the worker's CPU (user + system, from ``/proc``) over the round's window,
  and the embedded run's, and their ratio;
- PostgreSQL's CPU (every process of the cluster started here, backends
  that exited included): not with ``--url``;
- the transactions committed in our database and in DBOS's.

The medians over the rounds follow. With py-spy installed (``pip install
py-spy``), the worker is sampled while it holds the GIL (``--nonblocking``:
it is not paused), and its CPU per call is shared out by phase (the
innermost frame of each sample that is one of :data:`PHASES`), by the
library of each sample's innermost frame, and over the functions met in
most samples; the raw stacks stay in ``--keep DIR``. The samples cover the
embedded rounds too, when the worker only polls its queue.

The machine is shared: compare ratios (worker / embedded CPU) from one round
or one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
WARM_UP_TREES = 4
READY_S = 120.0
DONE_S = 600.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

PHASES: tuple[tuple[str, str], ...] = (
    ("PostgresStore.claim", "claim"),
    ("SQLStore.load", "loads (ancestors, outcomes)"),
    ("PostgresStore.status", "status reads"),
    ("SQLStore.save_many", "saves (run, messages, events)"),
    ("PostgresLedger._settle_lost", "ledger: settle_lost"),
    ("PostgresLedger._guarded", "ledger: decisions"),
    ("PostgresLedger.reconcile", "ledger: reconcile"),
    ("PostgresLedger.open_node", "ledger: open_node"),
    ("PostgresStore.cancels_of", "cancels_of"),
    ("Worker._heartbeat", "heartbeat and sweep"),
    ("Worker._sweep", "heartbeat and sweep"),
    ("Worker._rebuild", "rebuild (agent, runner)"),
    ("Worker._node", "rebuild (live runs)"),
    ("invoke_step.<locals>.check_existing_result", "DBOS: step checked"),
    ("invoke_step.<locals>.record_step_result", "DBOS: step recorded"),
    ("invoke_step", "DBOS: step, rest"),
    ("queue_worker_thread", "DBOS: queue polling"),
    ("_execute_workflow_wthread", "DBOS: workflow, rest"),
    ("start_workflow", "DBOS: workflow start"),
    ("@orchestra/_scripted", "scripted server"),
    ("OpenAIProvider.complete", "model call (client)"),
    ("to_thread_run_sync", "thread hops"),
    ("from_thread_run", "thread hops"),
    ("WorkerThread._work", "thread hops"),
    ("drive", "run loop (rest)"),
    ("execute", "run loop (rest)"),
    ("Worker._step", "step (rest)"),
    ("Worker._watch", "watcher"),
    ("Worker._beat", "heartbeat and sweep"),
    ("unrolled_run", "trio scheduler"),
)
"""Where a sample goes: the innermost frame of its stack that is one of these
qualified names (``@path``: a frame in that file or folder), as (name, label)."""

LIBRARIES = (
    ("(psycopg", "psycopg"),
    ("(sqlalchemy", "sqlalchemy"),
    ("(dbos", "dbos"),
    ("(trio", "trio"),
    ("(outcome", "trio"),
    ("(httpx", "httpx"),
    ("(httpcore", "httpcore"),
    ("(h11", "h11"),
    ("(orchestra/_scripted", "orchestra (scripted server)"),
    ("(orchestra/distributed", "orchestra.distributed"),
    ("(orchestra/", "orchestra"),
    ("(attr", "attrs"),
    ("(threading.py", "threads"),
    ("(concurrent/", "threads"),
    ("(json/", "json"),
)


# -- processes and /proc ---------------------------------------------------------------


def cpu_of(pid: int, children: bool = False) -> float:
    """CPU seconds of ``pid`` (user + system; with ``children``, also its reaped children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def cluster_cpu(postmaster: int | None) -> float | None:
    """CPU seconds of a PostgreSQL cluster: its postmaster, the backends that
    exited (reaped into it) and those alive."""
    if postmaster is None:
        return None
    total = cpu_of(postmaster, children=True)
    for pid in children_of(postmaster):
        try:
            total += cpu_of(pid, children=True)
        except OSError:  # ended meanwhile: counted in the postmaster's next reap
            continue
    return total


# -- PostgreSQL --------------------------------------------------------------------------


@contextmanager
def server(url: str | None) -> Iterator[tuple[str, int | None]]:
    """A server URL and its postmaster's pid (None: not started here)."""
    if url is not None:
        yield url, None
        return
    state = Path(tempfile.mkdtemp(prefix="orchestra-profile-pg."))
    tool = [sys.executable, str(TOOLS / "postgres.py")]
    try:
        started = subprocess.run(
            [*tool, "start", "--dir", str(state)], capture_output=True, text=True, check=False
        )
        if started.returncode != 0:
            raise SystemExit(f"cannot start PostgreSQL: {started.stderr.strip()}")
        pid = int((state / "data" / "postmaster.pid").read_text().split()[0])
        yield started.stdout.strip(), pid
    finally:
        subprocess.run([*tool, "stop", "--dir", str(state)], capture_output=True, check=False)
        shutil.rmtree(state, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    import psycopg

    name = f"orchestra_profile_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def prepared(url: str) -> str:
    """``url``, its tables (ours, the ledger's, DBOS's) made first: a worker whose
    start meets a slow migration on a loaded machine exits (see issue 41, point 6)."""
    from orchestra import StoreError
    from orchestra.distributed import Cluster

    for _ in range(5):
        try:
            Cluster(url).close()
            return url
        except StoreError as exc:
            print(f"preparing the database: {exc}; trying again", file=sys.stderr)
    raise SystemExit("cannot prepare the database")


def commits(url: str) -> dict[str, int]:
    """Transactions committed so far in our database and in DBOS's (``<db>_dbos``)."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        rows = conn.execute(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE datname = ANY(%s)",
            ([name, f"{name}_dbos"],),
        ).fetchall()
    return {("dbos" if d.endswith("_dbos") else "orchestra"): int(n) for d, n in rows}


# -- the trees ---------------------------------------------------------------------------


SCENARIO = {"name": "plan"}
"""The scenario of the trees (``--scenario``): ``plan`` (one run, 3 model calls)
or ``research`` (a root and 3 children, 11 model calls)."""


def recipe(directory: str) -> Any:
    from orchestra._recipes.recipe import Recipe

    return Recipe(directory=directory, scenario=SCENARIO["name"])


def task_of() -> str:
    from orchestra._recipes.demo import demo_task

    return demo_task(SCENARIO["name"])


def prices_of(made: Any) -> Any:
    """A recipe's price table (``model_calls().prices`` since the one provider
    builder; ``prices()`` in checkouts before it, which this tool measures too)."""
    if hasattr(made, "model_calls"):
        return made.model_calls().prices
    return made.prices()


def submit_trees(url: str, count: int, directory: str) -> list[str]:
    from orchestra import Limits
    from orchestra.distributed import Cluster, submit

    made = recipe(directory)
    limits = Limits(max_turns=20)
    with Cluster(url) as cluster:
        return [
            submit(
                cluster,
                made.agent(limits),
                task_of(),
                limits=limits,
                metadata=made.metadata(),
            )
            for _ in range(count)
        ]


def wait_done(url: str, roots: Sequence[str]) -> None:
    import psycopg

    deadline = time.monotonic() + DONE_S
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            (running,) = conn.execute(
                "SELECT count(*) FROM runs WHERE run_id = ANY(%s) AND status = 'running'",
                (list(roots),),
            ).fetchone() or (0,)
            if running == 0:
                return
            time.sleep(0.1)
    raise SystemExit(f"{running} tree(s) still running after {DONE_S:g} s")


def model_calls(url: str, roots: Sequence[str]) -> int:
    """Model calls charged in the trees ``roots`` (one ledger row per call)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        (calls, statuses) = conn.execute(
            "SELECT (SELECT count(*) FROM ledger_spend WHERE root_id = ANY(%s)),"
            " (SELECT array_agg(DISTINCT status) FROM runs WHERE root_id = ANY(%s))",
            (list(roots), list(roots)),
        ).fetchone() or (0, [])
    if statuses != ["completed"]:
        raise SystemExit(f"trees ended {statuses}, not all completed")
    return int(calls)


# -- the worker --------------------------------------------------------------------------


@contextmanager
def worker(url: str, concurrency: int, logs: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = logs / "worker.log"
    import orchestra  # the worker runs the checkout this process imports (PYTHONPATH)

    checkout = Path(orchestra.__file__).resolve().parents[1]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestra",
                "worker",
                "--store",
                url,
                "--id",
                "profiled",
                "--concurrency",
                str(concurrency),
            ],
            cwd=checkout,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + READY_S
        while b"ready" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def sampled(pid: int, raw: Path, enabled: bool) -> Iterator[bool]:
    """py-spy sampling ``pid`` into ``raw`` (collapsed stacks) for the block; whether it does."""
    spy = shutil.which("py-spy")
    if not enabled or spy is None:
        yield False
        return
    proc = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--output",
            str(raw),
            "--rate",
            "200",
            "--nonblocking",
            "--gil",
            "--threads",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached before the trees start
    try:
        yield True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def measure(url: str, args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    """``--repeats`` rounds, each the embedded trees (in a child process) then the
    same trees on the worker; the worker's figures with the embedded run's beside."""
    rounds = []
    with worker(url, args.concurrency, logs) as proc:
        wait_done(url, submit_trees(url, WARM_UP_TREES, args.sandbox))
        with sampled(proc.pid, logs / "worker.stacks", args.py_spy) as profiled:
            for _ in range(args.repeats):
                embedded_run = measure_embedded(args)
                rounds.append({**window(url, args, proc.pid), "embedded": embedded_run})
    for one in rounds:
        one["profiled"] = profiled
    return rounds


def window(url: str, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    """Submit the trees and wait for them: CPU and commits over that window."""
    before = commits(url)
    cpu, pg = cpu_of(pid), cluster_cpu(args.postmaster)
    times = cpu_times(pid)
    started = time.perf_counter()
    roots = submit_trees(url, args.trees, args.sandbox)
    wait_done(url, roots)
    wall = time.perf_counter() - started
    user, system = (t - was for t, was in zip(cpu_times(pid), times, strict=True))
    cpu, pg = cpu_of(pid) - cpu, None if pg is None else (cluster_cpu(args.postmaster) or 0) - pg
    after = commits(url)
    calls = model_calls(url, roots)
    return {
        "calls": calls,
        "wall_s": wall,
        "worker_cpu_s": cpu,
        "worker_user_s": user,
        "worker_system_s": system,
        "postgres_cpu_s": pg,
        "commits": {k: after.get(k, 0) - before.get(k, 0) for k in after},
    }


# -- the embedded path -------------------------------------------------------------------


def embedded(trees: int, concurrency: int, directory: str) -> dict[str, float]:
    """The same trees in this process (SQLite store): CPU seconds and model calls."""
    import trio

    return trio.run(_embedded, trees, concurrency, directory)


async def _embedded(trees: int, concurrency: int, directory: str) -> dict[str, float]:
    import trio

    from orchestra import Limits, Runner, SQLiteStore

    made, limits = recipe(directory), Limits(max_turns=20)
    task = task_of()
    store = SQLiteStore(Path(directory) / f"runs-{uuid.uuid4().hex[:8]}.db")
    results: list[Any] = []
    async with made.provider() as provider:
        runner = Runner(provider=provider, store=store, prices=prices_of(made))
        slots = trio.CapacityLimiter(concurrency)

        async def one() -> None:
            async with slots:
                results.append(await runner.run(made.agent(limits), task))

        await one()  # warm-up
        results.clear()
        cpu, started = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(trees):
                nursery.start_soon(one)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - started
    assert all(r.status.value == "completed" for r in results), [r.status for r in results]
    calls = sum(s.state.turns for r in results for s in r.walk())
    return {"cpu_s": cpu, "wall_s": wall, "calls": calls}


def measure_embedded(args: argparse.Namespace) -> dict[str, float]:
    """:func:`embedded` in a child process of its own (its CPU alone)."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--embedded-only",
            "--trees",
            str(args.trees),
            "--concurrency",
            str(args.concurrency),
            "--sandbox",
            args.sandbox,
            "--scenario",
            args.scenario,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


# -- the profile -------------------------------------------------------------------------


def stacks(raw: Path) -> Iterator[tuple[list[str], int]]:
    """(frames outermost first, samples) of py-spy's raw output."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def phase_of(frames: Sequence[str]) -> str:
    for frame in reversed(frames[1:]):  # the first is the thread
        name, _, where = frame.partition(" (")
        for marker, label in PHASES:
            if name == marker or (marker[0] == "@" and where.startswith(marker[1:])):
                return label
    return "other"


def library_of(frame: str) -> str:
    for needle, label in LIBRARIES:
        if needle in frame:
            return label
    return "other"


def summarise(raw: Path, cpu_ms: float, top: int) -> dict[str, dict[str, float]]:
    """Samples by phase, by the innermost frame's library, and the functions met
    in most samples: as ms of the worker's CPU per model call (``cpu_ms``),
    shared out in proportion to the samples (taken only while the GIL is held)."""
    phases: collections.Counter[str] = collections.Counter()
    libraries: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in stacks(raw):
        total += count
        phases[phase_of(frames)] += count
        libraries[library_of(frames[-1])] += count
        for name in {f.split(" (", 1)[0] for f in frames[1:]}:
            functions[name] += count
    share = cpu_ms / max(total, 1)
    return {
        "phases": {k: round(v * share, 2) for k, v in phases.most_common()},
        "libraries": {k: round(v * share, 2) for k, v in libraries.most_common()},
        "functions": {k: round(v * share, 2) for k, v in functions.most_common(top)},
    }


# -- the report --------------------------------------------------------------------------


def per_call(one: dict[str, Any]) -> dict[str, Any]:
    """One round's figures, in ms of CPU per model call."""
    calls, pg = one["calls"], one["postgres_cpu_s"]
    base = one["embedded"]
    worker_ms = 1000 * one["worker_cpu_s"] / calls
    embedded_ms = 1000 * base["cpu_s"] / base["calls"]
    return {
        "worker": round(worker_ms, 2),
        "worker_user_system": [
            round(1000 * one["worker_user_s"] / calls, 2),
            round(1000 * one["worker_system_s"] / calls, 2),
        ],
        "postgres": None if pg is None else round(1000 * pg / calls, 2),
        "embedded": round(embedded_ms, 2),
        "ratio": round(worker_ms / embedded_ms, 2),
        "wall_s": [round(one["wall_s"], 2), round(base["wall_s"], 2)],
        "commits": {k: round(v / calls, 2) for k, v in one["commits"].items()},
    }


def report(rounds: list[dict[str, Any]], profile: Any) -> dict[str, Any]:
    figures = [per_call(one) for one in rounds]
    pg = [f["postgres"] for f in figures if f["postgres"] is not None]
    return {
        "model_calls_per_round": rounds[0]["calls"],
        "rounds_ms_per_call": figures,
        "median_worker_ms_per_call": statistics.median(f["worker"] for f in figures),
        "median_embedded_ms_per_call": statistics.median(f["embedded"] for f in figures),
        "median_postgres_ms_per_call": statistics.median(pg) if pg else None,
        "median_ratio_worker_to_embedded": statistics.median(f["ratio"] for f in figures),
        "profile_ms_per_call": profile,
    }


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (embedded, then worker)")
    parser.add_argument("--url", help="a PostgreSQL server to use (else one is started here)")
    parser.add_argument("--no-py-spy", dest="py_spy", action="store_false")
    parser.add_argument("--top", type=int, default=40, help="functions listed in the profile")
    parser.add_argument("--keep", type=Path, help="keep the worker's log and stacks here")
    parser.add_argument("--scenario", choices=("plan", "research"), default="plan")
    parser.add_argument("--embedded-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sandbox", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    SCENARIO["name"] = args.scenario
    if args.embedded_only:
        print(json.dumps(embedded(args.trees, args.concurrency, args.sandbox)))
        return 0
    from orchestra.testing import make_sandbox

    logs = args.keep or Path(tempfile.mkdtemp(prefix="orchestra-profile."))
    logs.mkdir(parents=True, exist_ok=True)
    args.sandbox = str(make_sandbox(logs / "sandbox"))
    with server(args.url) as (server_url, postmaster):
        args.postmaster = postmaster
        rounds = measure(prepared(fresh_database(server_url)), args, logs)
    raw = logs / "worker.stacks"
    cpu_s = sum(r["worker_cpu_s"] for r in rounds)
    cpu_ms = 1000 * cpu_s / sum(r["calls"] for r in rounds)
    profile = summarise(raw, cpu_ms, args.top) if rounds[0]["profiled"] and raw.exists() else None
    print(json.dumps(report(rounds, profile), indent=2))
    if args.keep is None:
        shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
