"""Claim: a run tree spread over three worker processes keeps its promises.

Starts three ``orchestra worker`` processes on one PostgreSQL database, each
with room for two children inline (``--inline-children 2``: executed inside
their parent's step, as embedded; the default is 64), so a tree of six
children runs two beside its root and queues four for any worker. Then:

1. a research tree of 1 parent + 6 children (``slow_tree``; each child spends
   within a $0.01 budget): on how many workers the children ran, the tree's
   spend against the sum of the budget ledger, the most any run spent of
   its budget;
2. the same tree, cancelled with one call 1.2 s into the children's 3 s
   scans: ms until every run was ``interrupted``;
3. the same tree, and the worker inside most scans killed (SIGKILL) 1 s
   into them: s until the tree completed on the other workers, and
   model calls paid twice (from the ledger).

Exits 1 (``CLAIM FAILED``) if a child ran on one worker only, spend differs
from the ledger, a run spent past its budget, the cancel took over 200 ms
(``--cancel-max-ms``: a machine busy with other work needs more), or a call
was paid twice.

    python examples/distributed_tree.py [--store postgresql://…] [--cancel-max-ms MS]

Without ``--store`` (or ``$ORCHESTRA_PG_URL``) a throwaway PostgreSQL cluster
is started with ``tools/postgres.py`` (Debian's postgresql package) and
removed afterwards. Needs ``pip install 'orchestra-trees[distributed]'``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from orchestra import Agent, Limits, Status
from orchestra.distributed import AGENTS_KEY, Cluster, cancel_tree, ledger_rows, submit
from orchestra.testing import demo_tools, make_sandbox

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 3
CHILDREN = 6
CANCEL_MAX_MS = 200.0
WAIT_S = 120.0
SANDBOX_ENV = "ORCHESTRA_EXAMPLE_SANDBOX"
AGENTS = "examples.distributed_tree:tree_agent"
"""What workers import to rebuild the tree's agents (they run from the repository root)."""


def tree_agent() -> Agent:
    """The scripted ``slow_tree`` parent; each ``researcher`` child within $0.01."""
    tools = demo_tools(os.environ[SANDBOX_ENV])
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher. Answer the question using the tools.",
        tools=tools,
        limits=Limits(max_turns=4, max_budget_usd=0.01),
    )
    return Agent(
        name="assistant",
        model="slow_tree",
        instructions="You are an operations assistant. Delegate research to sub-agents.",
        tools=(researcher.as_tool(name="research", description="Research a question."),),
        # room for six children's $0.01 and its own calls: with $0.05 the six
        # carves, made at once, left the last child too little for a first call
        # (budget_exceeded after 0 turns: the example's claims failed at random)
        limits=Limits(max_turns=30, max_budget_usd=0.08),
        max_tokens=4096,
    )


@contextmanager
def server(given: str | None) -> Iterator[str]:
    """A PostgreSQL server URL: the one given, or a throwaway cluster."""
    if given:
        yield given
        return
    state = tempfile.mkdtemp(prefix="orchestra-example-pg.")
    tool = [sys.executable, str(ROOT / "tools" / "postgres.py")]
    try:
        started = subprocess.run([*tool, "start", "--dir", state], capture_output=True, text=True)
        if started.returncode != 0:
            sys.exit(f"cannot start PostgreSQL: {started.stderr.strip()}")
        yield started.stdout.strip()
    finally:
        subprocess.run([*tool, "stop", "--dir", state], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


@contextmanager
def database(server_url: str) -> Iterator[str]:
    """A fresh database (and DBOS's beside it), dropped afterwards."""
    import psycopg

    name = f"orchestra_example_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for db in (name, f"{name}_dbos"):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@contextmanager
def workers(url: str, logs: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(1, WORKERS + 1):
            name = f"w{i}"
            with (logs / f"{name}.log").open("wb") as log:
                procs[name] = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "orchestra",
                        "worker",
                        "--store",
                        url,
                        "--id",
                        name,
                        "--concurrency",
                        "3",
                        "--dead-after",
                        "5",  # quick to declare the killed worker dead (default 10 s)
                        "--inline-children",
                        "2",  # two beside the root, the rest queued: the tree spreads
                    ],
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        for name in procs:
            wait(lambda n=name: b"ready" in (logs / f"{n}.log").read_bytes(), f"worker {name}")
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def wait(
    check: Callable[[], Any],
    what: str,
    timeout: float = WAIT_S,
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll ``check`` until it holds; at ``timeout``, exit naming ``what`` (and, with
    ``explain``, what the cluster was doing then)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            said = f"timed out after {timeout:.0f} s waiting for {what}"
            sys.exit(f"{said}\n{explain()}" if explain is not None else said)
        time.sleep(0.02)


Explain = Callable[[], str]


def describe(cluster: Cluster, procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> str:
    """Every worker (alive or its exit code, its log's last lines), every run (status,
    turns, executor) and every workflow not ended (which worker holds it): what holds
    the workers' slots when a wait times out."""
    import psycopg

    from orchestra.distributed._dbos import system_url

    lines = []
    for name, proc in procs.items():
        code = proc.poll()
        tail = (logs / f"{name}.log").read_text(errors="replace").splitlines()[-5:]
        lines.append(f"worker {name}: {'running' if code is None else f'exited {code}'}")
        lines += [f"  | {line}" for line in tail]
    lines.append("runs (tree, run, status, turns, executor):")
    with cluster.store.transaction() as conn:
        roots = conn.execute(
            "SELECT run_id FROM runs WHERE parent_id IS NULL ORDER BY created_at"
        ).fetchall()
    for (root,) in roots:
        ran = executors(cluster, root)
        for s in cluster.store.tree(root):
            kind = "root " if s.parent_id is None else "child"
            lines.append(
                f"  {root} {kind} {s.run_id} {s.status.value} turns={s.turns} "
                f"on={ran.get(s.run_id)}"
            )
    with psycopg.connect(system_url(cluster.store.path)) as conn:
        flows = conn.execute(
            "SELECT workflow_uuid, status, executor_id, queue_name FROM dbos.workflow_status "
            "WHERE status IN ('PENDING', 'ENQUEUED') ORDER BY created_at"
        ).fetchall()
    lines.append(f"workflows not ended ({len(flows)}): id, status, executor, queue")
    lines += [f"  {' '.join(str(c) for c in flow)}" for flow in flows]
    return "\n".join(lines)


def executors(cluster: Cluster, root_id: str) -> dict[str, str]:
    """The worker that last executed each run (a child inline: its parent's)."""
    with cluster.store.transaction() as conn:
        rows = conn.execute(
            "SELECT r.run_id, COALESCE(s.executor, r.executor) FROM runs r"
            " LEFT JOIN runs s ON s.run_id = r.step_of WHERE r.root_id = %s",
            (root_id,),
        )
        return dict(rows.fetchall())


def start_tree(cluster: Cluster) -> str:
    task = f"Scan the archives, children={CHILDREN}."
    return submit(cluster, tree_agent(), task, metadata={AGENTS_KEY: AGENTS})


def scanning(cluster: Cluster, root: str) -> bool:
    """Every child started its scan or has ended, and some are inside it (on a
    loaded machine the children start seconds apart: the first may be done
    before the last starts; and a child carved too little to make its first
    call ends at once, without a turn)."""
    kids = [s for s in cluster.store.tree(root) if s.parent_id is not None]
    started = len(kids) == CHILDREN and all(
        k.turns >= 1 or k.status is not Status.RUNNING for k in kids
    )
    return started and any(k.turns == 1 and k.status is Status.RUNNING for k in kids)


def victim(cluster: Cluster, root: str) -> str:
    """The worker inside most of the tree's scans now (else the one that ran most
    of its children): on a loaded machine some scans may be over already."""
    ran = executors(cluster, root)
    kids = [s for s in cluster.store.tree(root) if s.parent_id is not None]
    scanning = [k for k in kids if k.turns == 1 and k.status is Status.RUNNING]
    on = Counter(ran[k.run_id] for k in scanning or kids if ran.get(k.run_id) is not None)
    return on.most_common(1)[0][0]


def done(cluster: Cluster, root: str) -> bool:
    return cluster.store.load(root).status is not Status.RUNNING


def spread_and_spend(cluster: Cluster, explain: Explain) -> dict[str, Any]:
    root = start_tree(cluster)
    wait(lambda: done(cluster, root), "the research tree", explain=explain)
    states = cluster.store.tree(root)
    ran = executors(cluster, root)
    top = next(s for s in states if s.run_id == root)
    return {
        "workers": len({ran[s.run_id] for s in states if s.parent_id}),
        "tree": top.tree.cost_usd,
        "ledger": sum(r["cost_pico"] for r in ledger_rows(cluster, root)) / 1e12,
        "worst": max(s.tree.cost_pico / s.limits.budget_pico for s in states),
        "completed": sum(s.status is Status.COMPLETED for s in states),
        "not completed": [
            f"{s.run_id} {s.status.value}: {s.reason}"
            for s in states
            if s.status is not Status.COMPLETED
        ],
    }


def cancel_ms(cluster: Cluster, explain: Explain) -> tuple[float, int]:
    root = start_tree(cluster)
    wait(
        lambda: scanning(cluster, root),
        "children inside their scans",
        explain=explain,
    )
    time.sleep(1.2)
    asked = time.monotonic()
    states = cancel_tree(cluster, root, "stop", wait_s=10)
    ms = (time.monotonic() - asked) * 1000
    return ms, sum(s.status is Status.INTERRUPTED for s in states)


def kill_worker(
    cluster: Cluster, procs: dict[str, Any], explain: Explain
) -> tuple[float, int, int]:
    root = start_tree(cluster)
    wait(
        lambda: scanning(cluster, root),
        "children inside their scans",
        explain=explain,
    )
    time.sleep(1.0)
    procs[victim(cluster, root)].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait(
        lambda: done(cluster, root),
        "the tree after the kill",
        explain=explain,
    )
    took = time.monotonic() - killed
    completed = sum(s.status is Status.COMPLETED for s in cluster.store.tree(root))
    calls = Counter((r["run_id"], r["turn"]) for r in ledger_rows(cluster, root))
    return took, completed, sum(n - 1 for n in calls.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("ORCHESTRA_PG_URL"))
    parser.add_argument(
        "--cancel-max-ms",
        type=float,
        default=CANCEL_MAX_MS,
        help="the cancel's claim (default %(default).0f ms, on an idle machine)",
    )
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="orchestra-example-workers."))
    box = Path(tempfile.mkdtemp(prefix="orchestra-example-box."))
    sandbox = make_sandbox(box)
    os.environ[SANDBOX_ENV] = str(sandbox)  # for tree_agent(), here and in the workers
    with (
        server(args.store) as url,
        database(url) as db,
        workers(db, logs) as procs,
        Cluster(db) as cluster,
    ):
        explain = partial(describe, cluster, procs, logs)
        tree = spread_and_spend(cluster, explain)
        ms, interrupted = cancel_ms(cluster, explain)
        took, completed, twice = kill_worker(cluster, procs, explain)
    shutil.rmtree(logs, ignore_errors=True)  # kept (their tails printed) if a wait timed out
    shutil.rmtree(box, ignore_errors=True)
    runs = CHILDREN + 1
    print(f"{WORKERS} workers, a tree of 1 + {CHILDREN} runs ({runs} runs)")
    print(f"{'claim':<44} {'measured':>20}")
    print(f"{'children ran on workers':<44} {tree['workers']:>20}")
    print(f"{'tree spend / ledger sum (USD)':<44} {tree['tree']:>9.6f} / {tree['ledger']:.6f}")
    print(f"{'most spent of a run budget':<44} {tree['worst']:>19.0%}")
    print(f"{'  runs completed':<44} {tree['completed']:>17}/{runs}")
    for line in tree["not completed"]:
        print(f"    {line}"[:80])
    print(f"{'one cancel: ms until all interrupted':<44} {ms:>17.0f} ms")
    print(f"{'  runs interrupted':<44} {interrupted:>17}/{runs}")
    print(f"{'SIGKILL a worker: s until the tree completed':<44} {took:>18.1f} s")
    print(f"{'  runs completed / model calls paid twice':<44} {completed:>15}/{runs} {twice}")
    ok = (
        tree["workers"] >= 2
        and abs(tree["tree"] - tree["ledger"]) < 1e-12
        and tree["worst"] <= 1
        and tree["completed"] == runs
        and ms <= args.cancel_max_ms
        and interrupted == runs
        and completed == runs
        and twice == 0
    )
    if not ok:
        print("CLAIM FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
