"""Load test: many concurrent runs against the scripted server, some meeting faults.

Starts the real scripted server on loopback (``orchestra serve-scripted`` in a
child process by default, as a real provider is another machine; ``--server
inprocess`` runs it in this process's trio loop), then starts ``--runs`` root
runs at once in one trio nursery: demo scenarios, ``--fault-rate`` of them
with a fault modifier (429x2, 500x20, 401, reset, garbage, truncated, hang,
hangx20, nousage), each with its own fault counter (an ``@runN`` label). The
runs share one store and a retry policy with short waits (10 ms to 100 ms).

Providers: by default each run has its own :class:`~orchestra.OpenAIProvider`
(its own connection pool; one TLS context shared by all, as building one takes
50 ms), as a service that opens a client per request does. ``--providers
shared`` gives all runs one provider with one pool of ``--pool`` connections,
as one long-lived client would; at this concurrency httpcore's pool spends
most of the CPU scheduling its queue (each request walks the queued requests
and the connections), so a 1,000-run test takes minutes instead of seconds.
Every provider has the one ``--timeout`` (10 s): a ``hang`` costs that much
per attempt, and the event loop of 1,000 runs must read each reply within it
(with the server in this process, it often does not in the first seconds).

Reports the runs by fault and cause (status, interruption kind and the first
words of the reason) and the retries by error, and checks that every run of
every tree ended with a real status (no exception escaped, none ``running``
in its result or in the store), that this process has as many open file
descriptors and trio tasks afterwards as before, and that no HTTP connection
is left open once the providers are closed. Exits 1 if any check fails. The
soft limit on open files is raised for 1,000 connections (and shown).

    python tools/load_test.py --runs 1000 --fault-rate 0.1
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import random
import re
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from orchestra import Agent, Event, Limits, MemoryStore, OpenAIProvider, RetryPolicy, Runner, Status
from orchestra._model.tokens import encoding
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._result import RunResult
from orchestra._stores.memory import Store
from orchestra._stores.sqlite import SQLiteStore
from orchestra.testing import make_sandbox, scripted_server

SCENARIOS = ("plan", "plan", "plan", "recover", "repeat", "research", "destructive", "runaway")
"""Base scenarios, drawn uniformly (plan thrice as often)."""
FAULTS = ("429x2", "500x20", "401", "reset", "garbage", "truncated", "hang", "hangx20", "nousage")
"""The faults of the faulted runs, in turn."""
RETRY = RetryPolicy(wait_initial=0.01, wait_max=0.1, wait_jitter=0.01)
LIMITS = Limits(max_turns=20)
"""The demo's default: whole-tree model calls (research needs 11, runaway stops at 20)."""


@attrs.frozen(kw_only=True)
class Report:
    """What a load test measured."""

    runs: int
    faulted: int
    providers: str
    server: str
    by_cause: dict[str, int]
    retries: dict[str, int]
    events: dict[str, int]
    problems: list[str]
    fd_limit: tuple[int, int]
    fds_before: int
    fds_after: int
    tasks_before: int
    tasks_after: int
    connections_before_close: int
    connections_after_close: int
    wall_s: float

    @property
    def ok(self) -> bool:
        """No run without a status, no leaked descriptor, task or connection."""
        leaked = self.fds_after > self.fds_before or self.tasks_after > self.tasks_before
        return not (self.problems or leaked or self.connections_after_close)


# -- measuring ------------------------------------------------------------------------------


def raise_fd_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft limit on open files to ``wanted`` (at most the hard limit): (old, new)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_fds() -> int:
    """How many file descriptors this process has open (after a garbage collection)."""
    gc.collect()  # sockets and files that are garbage but not yet collected do not count
    return len(os.listdir("/proc/self/fd"))


def live_tasks() -> int:
    """How many trio tasks are alive in this run, the caller's included."""

    def count(task: trio.lowlevel.Task) -> int:
        kids = (t for n in task.child_nurseries for t in n.child_tasks)
        return 1 + sum(count(t) for t in kids)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


_URL = re.compile(r"https?://\S+")
_EXCEPTION = re.compile(r"failed: (\w+)\(")


def cause(name: str, result: RunResult) -> str:
    """A run's fault (or ``-``), status, interruption kind and the first words of its reason."""
    state = result.state
    fault = name.partition("@")[0].partition("+")[2] or "-"
    kind = f"/{state.interruption.kind.value}" if state.interruption else ""
    words = _URL.sub("<url>", state.reason).split()[:14]
    return f"{fault:>9}  {state.status.value}{kind}: {' '.join(words)}"


class Tally:
    """Counts events by type, and retries by the error before them (the runner's sink)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.retries: collections.Counter[str] = collections.Counter()

    def __call__(self, event: Event) -> None:
        self.counts[event.type] += 1
        if event.type == "model_retry":
            self.retries[_retry_kind(event.data)] += 1


def _retry_kind(data: dict[str, Any]) -> str:
    if data.get("status") is not None:
        return f"HTTP {data['status']}"
    match = _EXCEPTION.search(str(data.get("error", "")))
    return match[1] if match else "unreadable reply"


def tree(result: RunResult) -> Iterator[RunResult]:
    """A result and all its descendants."""
    yield result
    for child in result.children:
        yield from tree(child)


def problems_of(names: list[str], out: dict[int, Any], store: Store) -> list[str]:
    """Every run without a real status: an escaped exception, no result, ``running``."""
    found = []
    for i, name in enumerate(names):
        result = out.get(i)
        if not isinstance(result, RunResult):
            found.append(f"run {i} ({name}): {result!r}")
            continue
        running = [
            r.state.run_id
            for r in tree(result)
            if Status.RUNNING in (r.state.status, store.load(r.state.run_id).status)
        ]
        if running:
            found.append(f"run {i} ({name}): still running: {running}")
    return found


# -- running --------------------------------------------------------------------------------


def plan_runs(runs: int, fault_rate: float, seed: int) -> list[str]:
    """The scenario name of each run: ``round(runs * fault_rate)`` of them with a fault.

    Base scenarios and which runs meet faults are drawn at random; the faults
    go round :data:`FAULTS` in order, so nine faulted runs meet every one.
    """
    rng = random.Random(seed)
    names = [rng.choice(SCENARIOS) for _ in range(runs)]
    faulted = sorted(rng.sample(range(runs), round(runs * fault_rate)))
    for k, i in enumerate(faulted):
        names[i] = f"{names[i]}+{FAULTS[k % len(FAULTS)]}@run{i}"
    return names


def agents(names: list[str], sandbox: Path) -> list[Agent]:
    """The root agent of each run: one per base scenario, its model renamed for faults."""
    bases = {n: demo_agent(n, sandbox, limits=LIMITS) for n in set(SCENARIOS)}
    return [attrs.evolve(bases[n.split("+")[0]], model=n) for n in names]


@attrs.define(kw_only=True, eq=False)
class Setup:
    """What the runs share: the server, the provider settings, the store and the sink."""

    url: str
    timeout: float
    shared: OpenAIProvider | None
    store: Store
    sink: Tally
    transports: list[httpx.AsyncHTTPTransport]
    tls: ssl.SSLContext = attrs.Factory(ssl.create_default_context)
    open_at_close: int = 0

    def provider(self, pool: int | None = None) -> OpenAIProvider:
        """A new provider with its own pool (one TLS context for all: building one takes 50 ms).

        ``pool``: its connections at most (default: httpx's, 100 with 20 kept alive).
        """
        limits = httpx.Limits(max_connections=pool or 100, max_keepalive_connections=pool or 20)
        transport = httpx.AsyncHTTPTransport(verify=self.tls, limits=limits)
        self.transports.append(transport)
        return OpenAIProvider(
            base_url=self.url, api_key="load-test", timeout=self.timeout, transport=transport
        )

    @asynccontextmanager
    async def runner(self) -> AsyncIterator[Runner]:
        """A runner on the shared provider, or on a provider of its own (closed after)."""
        provider = self.shared or self.provider()
        try:
            yield Runner(provider=provider, store=self.store, sink=self.sink, retry=RETRY)
        finally:
            if self.shared is None:
                self.open_at_close += len(self.transports[-1]._pool.connections)
                await provider.aclose()

    def connections(self) -> int:
        """HTTP connections open in all the pools now."""
        return sum(len(t._pool.connections) for t in self.transports)


async def one_run(setup: Setup, agent: Agent, out: dict[int, Any], i: int) -> None:
    """Run ``agent``; its result (or the exception that escaped) into ``out[i]``."""
    try:
        async with setup.runner() as runner:
            out[i] = await runner.run(agent, demo_task(agent.model))
    except Exception as exc:  # the load test reports it: no exception should escape a run
        out[i] = exc


async def run_all(setup: Setup, roots: list[Agent]) -> dict[int, Any]:
    """Every run at once; their results by index. Closes every provider."""
    out: dict[int, Any] = {}
    async with trio.open_nursery() as nursery:
        for i, agent in enumerate(roots):
            nursery.start_soon(one_run, setup, agent, out, i)
    if setup.shared is not None:
        setup.open_at_close = setup.connections()
        await setup.shared.aclose()
    return out


@asynccontextmanager
async def scripted_process() -> AsyncIterator[str]:
    """``orchestra serve-scripted`` in a child process on a free port; yields its base URL."""
    command = [sys.executable, "-c", "from orchestra._cli.main import run; run()", "serve-scripted"]
    process = await trio.lowlevel.open_process([*command, "--port", "0"], stderr=subprocess.PIPE)
    assert process.stderr is not None
    try:
        banner = b""
        while not banner.endswith(b"\n"):
            chunk = await process.stderr.receive_some()
            if not chunk:
                raise RuntimeError(f"the scripted server did not start: {banner!r}")
            banner += chunk
        yield banner.decode().split()[-1]  # "scripted provider at http://127.0.0.1:PORT/v1"
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()
            await process.stderr.aclose()


@asynccontextmanager
async def server(kind: str) -> AsyncIterator[str]:
    """The scripted server in this process or in a child process; yields its base URL."""
    if kind == "inprocess":
        async with scripted_server() as url:
            yield url
    else:
        async with scripted_process() as url:
            yield url


def _store(kind: str, directory: Path) -> Store:
    return SQLiteStore(directory / "runs.db") if kind == "sqlite" else MemoryStore()


async def load_test(
    *,
    runs: int = 1000,
    fault_rate: float = 0.1,
    seed: int = 0,
    timeout: float = 10.0,  # noqa: ASYNC109 (the providers' HTTP timeout, not ours)
    providers: str = "per-run",
    pool: int = 100,
    store: str = "memory",
    server_in: str = "subprocess",
) -> Report:
    """Run the load test in the current trio run; its report (see the module docstring)."""
    encoding()  # the tokenizer loads once, before anything is measured
    fd_limit = raise_fd_limit(2 * runs + 1024)  # a client and a server socket per connection
    names = plan_runs(runs, fault_rate, seed)
    with tempfile.TemporaryDirectory(prefix="orchestra-load-") as tmp:
        roots = agents(names, make_sandbox(Path(tmp) / "sandbox"))
        runs_store = _store(store, Path(tmp))
        fds_before, tasks_before = open_fds(), live_tasks()
        started = time.perf_counter()
        async with server(server_in) as url:
            setup = Setup(
                url=url,
                timeout=timeout,
                shared=None,
                store=runs_store,
                sink=Tally(),
                transports=[],
            )
            if providers == "shared":
                setup.shared = setup.provider(pool)
            out = await run_all(setup, roots)
        wall = time.perf_counter() - started
        fds_after, tasks_after = open_fds(), live_tasks()
        problems = problems_of(names, out, runs_store)
        if isinstance(runs_store, SQLiteStore):
            runs_store.close()
    results = {i: r for i, r in out.items() if isinstance(r, RunResult)}
    causes = collections.Counter(cause(names[i], r) for i, r in results.items())
    return Report(
        runs=runs,
        faulted=sum("+" in n for n in names),
        providers=providers,
        server=server_in,
        by_cause=dict(sorted(causes.items(), key=lambda kv: (kv[0].split()[0] != "-", kv[0]))),
        retries=dict(setup.sink.retries.most_common()),
        events=dict(sorted(setup.sink.counts.items())),
        problems=problems,
        fd_limit=fd_limit,
        fds_before=fds_before,
        fds_after=fds_after,
        tasks_before=tasks_before,
        tasks_after=tasks_after,
        connections_before_close=setup.open_at_close,
        connections_after_close=setup.connections(),
        wall_s=round(wall, 2),
    )


# -- the command line -------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--fault-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    parser.add_argument("--providers", choices=("per-run", "shared"), default="per-run")
    parser.add_argument("--pool", type=int, default=100, help="connections (shared provider)")
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument(
        "--server", dest="server_in", choices=("subprocess", "inprocess"), default="subprocess"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def print_report(report: Report) -> None:
    print(
        f"runs: {report.runs} ({report.faulted} with a fault modifier); providers: "
        f"{report.providers}; scripted server: {report.server}"
    )
    print("runs by fault and cause:")
    for key, count in report.by_cause.items():
        print(f"  {count:5d}  {key}")
    print(f"retries by error: {report.retries}")
    print(f"events: {report.events}")
    print(f"runs without a real status: {len(report.problems)}")
    for problem in report.problems[:20]:
        print(f"  {problem}")
    print(
        f"open fds: {report.fds_before} before, {report.fds_after} after "
        f"(soft limit on open files: {report.fd_limit[0]} before, {report.fd_limit[1]} now)"
    )
    print(f"trio tasks: {report.tasks_before} before, {report.tasks_after} after")
    print(
        f"http connections: {report.connections_before_close} open when the providers "
        f"closed, {report.connections_after_close} after"
    )
    print(f"wall time: {report.wall_s} s")
    print("OK" if report.ok else "FAILED")


def main(argv: list[str] | None = None) -> int:
    """Run the load test from the command line; 0 if every check passed."""
    args = _arguments(argv)
    options = {k: v for k, v in vars(args).items() if k != "json"}
    report: Report = trio.run(lambda: load_test(**options))
    if args.json:
        print(json.dumps({**attrs.asdict(report), "ok": report.ok}, indent=2))
    else:
        print_report(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
