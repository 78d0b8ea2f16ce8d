"""Fill a workers' database with finished runs, and show how its hot queries are planned.

    python tools/fill_runs.py fill --store postgresql://…/db [--runs 100000]
    python tools/fill_runs.py explain --store postgresql://…/db
    python tools/fill_runs.py measure --store postgresql://…/db [--trees 40]

``fill`` adds ``--runs`` finished runs in trees of a root and three children,
as a busy cluster leaves them: each with its state (a real state's JSON, ids
replaced), 4 transcript messages, 6 events, its ledger row and 2 charges;
one tree in 20 was cancelled (its cancel request kept) and one in 20 failed.
DBOS's system database gets each run's finished workflow and its 2 steps. All
by ``INSERT … SELECT`` over ``generate_series`` (100,000 runs: well under a
minute), then ``ANALYZE``. Run it on a database the workers have used, or a
new one (its tables are made first).

``explain`` prints ``EXPLAIN`` of the queries the workers make all the time:
the sweep's running runs, the watcher's cancel requests, the ledger's lock of
a lineage, a root's reconcile and a tree's charges, and a run's claim.

``measure`` starts one worker (``--concurrency 8``, ``--dead-after 4``: its
sweep every 2 s) and times ``--trees`` ``orchestra demo research`` trees (a
root and 3 children, the worker's embedded scripted server), two at a time
(8 slots: a burst of more would hold every slot with waiting roots); prints
trees/s. Compare a new database with a filled one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg

from orchestra import Agent, Limits, Status, Usage
from orchestra._core.execute import new_state
from orchestra._recipes.recipe import Recipe
from orchestra._stores.transcripts import head_json
from orchestra.distributed import Cluster, PostgresLedger, PostgresStore, submit
from orchestra.distributed._dbos import APP_NAME, APP_VERSION, QUEUE, STEP, WORKFLOW, system_url
from orchestra.distributed._dbos import migrate as migrate_dbos

CHILDREN = 3
AGENT = Agent(name="researcher", model="research", instructions="You research.")
USAGE = Usage(model_calls=2, prompt_tokens=900, completion_tokens=120, cost_pico=3_240_000_000)
ID = "'run_' || md5('fill.' || {t} || '.' || {k})"
"""A run id (as ``run_<32 hex>``) from tree number ``t`` and rank ``k`` (0: the root)."""


def _template(child: bool) -> str:
    """A finished run's state as the store saves it, with ``@@RUN@@``, ``@@ROOT@@``
    and ``@@STATUS@@`` for its ids and status."""
    state = new_state(AGENT, "Scan the archives.", Limits(max_turns=8, max_budget_usd=0.05))
    state.run_id, state.root_id = "@@RUN@@", "@@ROOT@@"
    state.parent_id = "@@ROOT@@" if child else None
    state.status, state.own, state.tree = Status.COMPLETED, USAGE, USAGE
    state.messages = []
    return head_json(state).replace('"completed"', '"@@STATUS@@"', 1)


_STATUS = "CASE mod(t, 20) WHEN 0 THEN 'interrupted' WHEN 1 THEN 'failed' ELSE 'completed' END"
_TREES = f"""
    SELECT t, k, {ID.format(t="t", k="k")} AS run_id, {ID.format(t="t", k="0")} AS root_id,
        {_STATUS} AS status, %(t0)s + t * 0.01 AS at
    FROM generate_series(%(first)s, %(last)s) t, generate_series(0, {CHILDREN}) k
"""
_FILL = (
    f"""INSERT INTO runs (run_id, root_id, parent_id, agent, status, created_at, updated_at,
        state, messages, executor, attempt, epoch)
    SELECT run_id, root_id, CASE WHEN k = 0 THEN NULL ELSE root_id END, 'researcher', status,
        at, at + 1, replace(replace(replace(CASE WHEN k = 0 THEN %(root)s ELSE %(child)s END,
        '@@RUN@@', run_id), '@@ROOT@@', root_id), '@@STATUS@@', status), 4, 'w1', 0, 1
    FROM ({_TREES}) f""",
    f"""INSERT INTO messages (run_id, idx, data)
    SELECT run_id, i, CASE i WHEN 0 THEN %(system)s WHEN 1 THEN %(user)s
        WHEN 2 THEN %(call)s ELSE %(answer)s END
    FROM ({_TREES}) f, generate_series(0, 3) i""",
    f"""INSERT INTO events (run_id, root_id, type, at, data)
    SELECT run_id, root_id, e, at, json_build_object('type', e, 'run_id', run_id,
        'root_id', root_id, 'at', at)::text
    FROM ({_TREES}) f,
        unnest(ARRAY['run_start', 'turn', 'tool_start', 'tool_end', 'turn', 'run_end']) e""",
    f"""INSERT INTO ledger (run_id, root_id, depth, tree, own)
    SELECT run_id, root_id, least(k, 1), %(usage)s, %(usage)s FROM ({_TREES}) f""",
    f"""INSERT INTO ledger_spend (run_id, root_id, turn, model_calls, prompt_tokens,
        completion_tokens, cost_pico, lost, executor, recorded_at)
    SELECT run_id, root_id, turn, 1, 450, 60, 1620000000, FALSE, 'w1', at
    FROM ({_TREES}) f, generate_series(1, 2) turn""",
    f"""INSERT INTO cancels (run_id, root_id, reason, requested_at)
    SELECT run_id, root_id, 'cancelled', at FROM ({_TREES}) f WHERE k = 0 AND mod(t, 20) = 0""",
)
_FILL_DBOS = (
    f"""INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, executor_id,
        application_version, created_at, updated_at, started_at_epoch_ms, completed_at,
        serialization, recovery_attempts)
    SELECT run_id || '.0', 'SUCCESS',
        %(workflow)s, %(queue)s, 'w1', %(version)s, (at * 1000)::bigint,
        (at * 1000)::bigint + 900, (at * 1000)::bigint, (at * 1000)::bigint + 900,
        'py_pickle', 1
    FROM ({_TREES}) f""",
    f"""INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output,
        started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name)
    SELECT run_id || '.0', i, %(step)s, 'gASVDQAAAAAAAACMCWNvbXBsZXRlZJQu', (at * 1000)::bigint,
        (at * 1000)::bigint + 400, 'py_pickle', %(app)s
    FROM ({_TREES}) f, generate_series(1, 2) i""",
)
BATCH_TREES = 5000


def _parameters() -> dict[str, Any]:
    def message(**fields: Any) -> str:
        return orjson.dumps(fields).decode()

    return {
        "t0": time.time() - 86400,
        "root": _template(child=False),
        "child": _template(child=True),
        "system": message(role="system", content="You research."),
        "user": message(role="user", content="Scan the archives."),
        "call": message(role="assistant", content="", tool_calls=[]),
        "answer": message(role="assistant", content="The archives hold 3 reports."),
        "usage": orjson.dumps(USAGE.to_dict()).decode(),
        "workflow": WORKFLOW,
        "queue": QUEUE,
        "version": APP_VERSION,
        "step": STEP,
        "app": APP_NAME,
    }


def fill(url: str, runs: int) -> None:
    """Add ``runs`` finished runs (rounded to whole trees) after those there."""
    with PostgresStore(url) as store:
        PostgresLedger(store=store, executor="fill").create()
        migrate_dbos(url, store)
    trees = max(1, runs // (CHILDREN + 1))
    params = _parameters()
    started = time.monotonic()
    with psycopg.connect(url) as ours, psycopg.connect(system_url(url)) as dbos:
        (there,) = _one(ours, "SELECT count(*) FROM runs")
        offset = int(there) + 1_000_000  # tree numbers no earlier fill used
        for start in range(offset, offset + trees, BATCH_TREES):
            batch = {**params, "first": start, "last": min(start + BATCH_TREES, offset + trees) - 1}
            for conn, statements in ((ours, _FILL), (dbos, _FILL_DBOS)):
                with conn.transaction():
                    for sql in statements:
                        conn.execute(sql, batch)
        for conn in (ours, dbos):
            conn.commit()
            conn.autocommit = True
            conn.execute("ANALYZE")
    took = time.monotonic() - started
    print(f"added {trees * (CHILDREN + 1)} finished runs in {took:.1f} s", file=sys.stderr)


def _one(conn: psycopg.Connection[Any], sql: str) -> tuple[Any, ...]:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def _queries(root_id: str, run_id: str) -> dict[str, tuple[str, tuple[object, ...]]]:
    """The workers' frequent queries, as they make them, with parameters."""
    from orchestra.distributed._ledger import _LOCK_LINEAGE

    running = Status.RUNNING.value
    return {
        "sweep (stale_running)": (
            f"SELECT run_id, attempt FROM runs WHERE status = '{running}'"
            " AND updated_at < %s ORDER BY run_id",
            (time.time() - 10,),
        ),
        "watcher (cancels_of)": (
            "SELECT run_id, reason FROM cancels WHERE root_id = ANY(%s)"
            " ORDER BY requested_at, run_id",
            ([root_id],),
        ),
        "ledger: lock a lineage": (_LOCK_LINEAGE, ([root_id, run_id],)),
        "ledger: reconcile a tree": (
            "SELECT run_id, tree, own FROM ledger WHERE root_id = %s ORDER BY depth, run_id"
            " FOR UPDATE",
            (root_id,),
        ),
        "ledger: a tree's charges": (
            "SELECT coalesce(sum(cost_pico), 0) FROM ledger_spend WHERE root_id = %s",
            (root_id,),
        ),
        "ledger: lose an earlier charge": (
            "UPDATE ledger_spend SET lost = TRUE WHERE run_id = %s AND turn = %s AND NOT lost",
            (run_id, 3),
        ),
        "claim a run": (
            "UPDATE runs SET executor = %s, epoch = epoch + 1"
            " WHERE run_id = %s AND status = %s RETURNING epoch",
            ("w1", run_id, running),
        ),
        "stop a tree's running runs": (
            "SELECT run_id FROM runs WHERE root_id = %s AND status = %s ORDER BY run_id",
            (root_id, running),
        ),
    }


def explain(url: str) -> None:
    """Print each frequent query's plan (rolled back: the updates change nothing)."""
    with psycopg.connect(url) as conn:
        root_id, run_id = _one(
            conn, "SELECT root_id, run_id FROM runs WHERE parent_id IS NOT NULL LIMIT 1"
        )
        for name, (sql, params) in _queries(root_id, run_id).items():
            rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()
            print(f"-- {name}")
            for (line,) in rows:
                print(f"   {line}")
        conn.rollback()


IN_FLIGHT = 2
"""Trees at once in ``measure``: 8 slots, 4 runs a tree."""


def _worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    """A worker process, once it said it is ready."""
    command = [sys.executable, "-m", "orchestra", "worker", "--store", url, "--id", "bench"]
    command += ["--concurrency", "8", "--dead-after", "4"]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=os.environ)
    deadline = time.monotonic() + 120
    while b"ready" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return proc


def _trees(cluster: Cluster, recipe: Recipe, count: int) -> float:
    """Seconds for ``count`` research trees, :data:`IN_FLIGHT` at a time."""
    agent, limits = recipe.agent(Limits(max_turns=20)), Limits(max_turns=20)
    waiting: list[str] = []
    started, submitted = time.monotonic(), 0
    while submitted < count or waiting:
        while submitted < count and len(waiting) < IN_FLIGHT:
            root = submit(cluster, agent, "Research it.", limits=limits, metadata=recipe.metadata())
            waiting.append(root)
            submitted += 1
        waiting = [r for r in waiting if cluster.store.status(r) is Status.RUNNING]
        time.sleep(0.01)
    return time.monotonic() - started


def measure(url: str, trees: int) -> None:
    """Print trees/s of one worker on ``url`` (after 4 trees to warm it up)."""
    with tempfile.TemporaryDirectory() as tmp:
        from orchestra.testing import make_sandbox

        recipe = Recipe(directory=str(make_sandbox(Path(tmp) / "box")), scenario="research")
        proc = _worker(url, Path(tmp) / "worker.log")
        try:
            with Cluster(url) as cluster:
                _trees(cluster, recipe, 4)
                took = _trees(cluster, recipe, trees)
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{trees} trees in {took:.2f} s: {trees / took:.2f} trees/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("fill", "explain", "measure"):
        command = commands.add_parser(name)
        command.add_argument("--store", required=True, metavar="URL")
        if name == "fill":
            command.add_argument("--runs", type=int, default=100_000)
        if name == "measure":
            command.add_argument("--trees", type=int, default=40)
    args = parser.parse_args(argv)
    if args.command == "fill":
        fill(args.store, args.runs)
    elif args.command == "explain":
        explain(args.store)
    else:
        measure(args.store, args.trees)


if __name__ == "__main__":
    main()
