"""Chaos: run trees on three workers while workers die, freeze and wake, the
database restarts and trees are cancelled; then check every promise.

Seeded (``ORCHESTRA_CHAOS_SEED``, default 27): the trees (idempotent or plain
writes, 2 or 3 children), which worker each fault hits (one inside a write)
and when the cancels come are drawn from it. The first seven trees come at once,
more than the three workers' six slots; each worker has room for one child
inline, so trees run children both inline and queued. Faults, in a drawn order: two
SIGKILLs of a worker inside a write, two SIGSTOPs past ``--dead-after``
then SIGCONT (the worker, declared dead, must stop before touching anything),
one PostgreSQL restart; three trees are cancelled, one while a worker is
frozen and one just after the restart. A dead worker is replaced, so three
always serve.

Every write tool journals ``start``, ``effect`` and ``end`` lines (key,
pid, time). The test asserts:

- every idempotency key's effect at most once (exactly once in a completed tree);
- no plain write started twice (no human approves anything here);
- no call executed by two processes at once: no process journals a line for
  a key while another process is executing it (its start to its end, or its
  death; a frozen process executes nothing while frozen);
- no run left ``running``;
- per tree, the ledger's charges = the sum of its runs' own spend = the
  root's saved tree cost; one charge per (run, turn);
- no run over its budget; every cancel ends its whole tree within 1 s.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from distributed_support import (
    DEAD_AFTER_S,
    Workers,
    inline_runs,
    postgres_tool,
    wait_until,
    workers,
)

from orchestra import Status, StoreUnreachable
from orchestra.distributed import AGENTS_KEY, Cluster, cancel_tree, ledger_rows, submit
from orchestra.distributed._dbos import workflow_id
from orchestra.distributed._worker import EXIT_DECLARED_DEAD, agent_of_reference

SEED = int(os.environ.get("ORCHESTRA_CHAOS_SEED", "27"))
TREES = 12
CONCURRENCY = 2
"""Slots per worker: 3 workers, 6 slots, fewer than the trees of the first burst."""
BURST = 7
"""Trees submitted at once before the first fault: more roots than the cluster
has slots (a parent waiting for its children holds none, so none deadlocks)."""
INLINE = 1
"""Children a worker executes inline at once: trees of 2 or 3 children run
some inline (dying, freezing and cancelled with their parent's step) and
queue the rest (each on a workflow of its own), so both kinds meet every fault."""
SETTLE_S = 180.0
SLOW_CANCEL_S = (2.0, 10.0)
"""When a cancel still going is looked at (its promise is 1 s)."""
WATCHDOG_S = 240.0
KINDS = {
    "idempotent": "tests.distributed.agents:chaos_idempotent_tree",
    "plain": "tests.distributed.agents:chaos_plain_tree",
}


class Timeline:
    """What the test did to each worker process: when it froze, woke and died."""

    def __init__(self) -> None:
        self.frozen: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.died: dict[int, float] = {}

    def active(self, pid: int, start: float, end: float | None) -> list[tuple[float, float]]:
        """The spans of [start, end] in which ``pid`` executed (not frozen, not dead)."""
        stop = min(end if end is not None else float("inf"), self.died.get(pid, float("inf")))
        spans = [(start, stop)]
        for a, b in self.frozen.get(pid, []):
            spans = [piece for s, e in spans for piece in ((s, min(e, a)), (max(s, b), e))]
        return [(s, e) for s, e in spans if s < e]

    def told(self, pool: Workers) -> str:
        """Each worker's pid, freezes and death, in time.time() seconds."""
        rows = []
        for name, proc in pool.procs.items():
            frozen = ", ".join(f"{a:.3f}-{b:.3f}" for a, b in self.frozen.get(proc.pid, []))
            died = self.died.get(proc.pid)
            rows.append(
                f"  {name} pid {proc.pid}: frozen [{frozen}]"
                + (f", died {died:.3f}" if died is not None else "")
            )
        return "\n".join(rows)


class Chaos:
    """The workers, the cluster and the faults of one seeded run."""

    def __init__(self, pool: Workers, cluster: Cluster, pg_state: str, journal: Path) -> None:
        self.pool, self.cluster, self.pg_state, self.journal = pool, cluster, pg_state, journal
        self.rng = random.Random(SEED)
        self.timeline = Timeline()
        self.roots: dict[str, str] = {}
        self.cancelled: dict[str, float] = {}
        self.slow: list[str] = []
        self.spare = len(pool.procs)

    def submit_tree(self) -> None:
        kind = self.rng.choice(sorted(KINDS))
        reference = KINDS[kind]
        children = self.rng.choice((2, 3))
        task = f"Scan the archives, children={children}."
        root = _retry(
            lambda: submit(
                self.cluster, agent_of_reference(reference), task, metadata={AGENTS_KEY: reference}
            )
        )
        self.roots[root] = kind

    def live(self) -> list[str]:
        return [name for name, proc in self.pool.procs.items() if proc.poll() is None]

    def victim(self) -> str:
        """A live worker inside a write if there is one (per the journal), else any."""
        pids = {self.pool.procs[name].pid: name for name in self.live()}
        open_writes = _open_writes(self.journal)
        inside = sorted({pids[pid] for pid in open_writes.values() if pid in pids})
        return self.rng.choice(inside or sorted(pids.values()))

    def replace(self) -> None:
        self.spare += 1
        name = f"w{self.spare}"
        self.pool.start(name, 6, "--inline-children", str(INLINE))
        self.pool.wait_ready(name)

    def kill(self) -> None:
        name = self.victim()
        proc = self.pool.procs[name]
        self.timeline.died[proc.pid] = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.replace()

    def freeze(self) -> None:
        name = self.victim()
        proc = self.pool.procs[name]
        began = time.time()
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        self.cancel_one()  # a cancel while a worker is frozen
        time.sleep(DEAD_AFTER_S + 2.0)  # its peers declare it dead meanwhile
        woke = time.time()
        self.timeline.frozen[proc.pid].append((began, woke))
        proc.send_signal(signal.SIGCONT)
        try:
            proc.wait(15)
        except Exception:  # not declared dead (peers were not judging yet): it goes on
            return
        # Declared dead, it exits before any of its tasks takes a step (its stall
        # watch asks first): it executed nothing since it woke. Code a freeze caught
        # mid-step goes on until its next checkpoint, and any effect it reaches is
        # journaled: those lines are checked against the other workers' spans.
        declared_dead = proc.returncode == EXIT_DECLARED_DEAD
        self.timeline.died[proc.pid] = woke if declared_dead else time.time()
        self.replace()

    def restart_database(self) -> None:
        for command in ("stop", "start"):
            done = postgres_tool(command, "--dir", self.pg_state)
            assert done.returncode == 0, done.stderr
        self.cancel_one()  # a cancel while the workers reconnect

    def cancel_one(self) -> None:
        running = [r for r in self.roots if r not in self.cancelled]
        if not running:
            return
        root = self.rng.choice(sorted(running))
        asked = time.monotonic()
        # a cancel slower than its promise leaves what held it in the report
        witnesses = [
            threading.Timer(after, self.witness, (threading.current_thread(),))
            for after in SLOW_CANCEL_S
        ]
        for witness in witnesses:
            witness.start()
        try:
            states = cancel_tree(self.cluster, root, "chaos cancel", wait_s=30)
        finally:
            for witness in witnesses:
                witness.cancel()
        took = time.monotonic() - asked
        self.cancelled[root] = took
        assert all(s.status is not Status.RUNNING for s in states), [
            (s.run_id, s.status) for s in states
        ]

    def witness(self, thread: threading.Thread) -> None:
        """Note where a slow cancel is (the client's stack) and what the
        database's sessions are doing."""
        frame = sys._current_frames().get(thread.ident or 0)
        stack = "".join(traceback.format_stack(frame)[-12:]) if frame else "(no frame)"
        try:
            with psycopg.connect(self.pool.url, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(_ACTIVITY).fetchall()
        except psycopg.Error as exc:
            rows = [("cannot read pg_stat_activity", str(exc))]
        sessions = "\n".join(" | ".join(map(str, row)) for row in rows)
        self.slow.append(f"client stack:\n{stack}\nsessions:\n{sessions}")
        print(f"slow cancel, at {time.time():.3f}:\n{self.slow[-1]}", flush=True)  # if it hangs


_ACTIVITY = """
    SELECT pid, application_name, state, wait_event_type, wait_event,
           now() - xact_start AS xact_age, pg_blocking_pids(pid), left(query, 160)
    FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


def _told(fault: Callable[[], None]) -> Callable[[], None]:
    """``fault``, saying in the log when it begins."""
    print(f"{fault.__name__} at {time.time():.3f}", flush=True)
    return fault


def _kill_all(pool: Workers, fired: threading.Event) -> None:
    fired.set()
    for proc in pool.procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()


def _retry(call: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except StoreUnreachable:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def _journal(path: Path) -> list[tuple[str, str, int, float]]:
    if not path.exists():
        return []
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(phase, key, int(pid), float(at)) for phase, key, pid, at in lines]


def _open_writes(path: Path) -> dict[str, int]:
    """Keys started and not ended, with the pid that started them."""
    opened: dict[tuple[str, int], int] = Counter()
    for phase, key, pid, _ in _journal(path):
        if phase == "start":
            opened[key, pid] += 1
        elif phase == "end":
            opened[key, pid] -= 1
    return {key: pid for (key, pid), n in opened.items() if n > 0}


def _settle(cluster: Cluster, roots: list[str]) -> None:
    """Wait until no run of the trees is running; if one still is after
    :data:`SETTLE_S`, fail naming each such run: its executor, its attempt and
    its workflow's status in DBOS (what to look at next)."""
    deadline = time.monotonic() + SETTLE_S
    while not all(_retry(lambda r=r: _tree_done(cluster, r)) for r in roots):
        if time.monotonic() > deadline:
            stuck = [
                (s.run_id, s.parent_id, s.turns, cluster.store.executor(s.run_id), n, wf)
                for root in roots
                for s in cluster.store.tree(root)
                if s.status is Status.RUNNING
                for n in [cluster.store.attempt(s.run_id)]
                for wf in [cluster.queue.unfinished([workflow_id(s.run_id, n)])]
            ]
            pytest.fail(
                f"runs left running (id, parent, turns, executor, attempt, live): {stuck}\n"
                f"{_where(cluster, [run_id for run_id, *_ in stuck])}"
            )
        time.sleep(0.02)


def _where(cluster: Cluster, run_ids: list[str]) -> str:
    """For a stuck run: its row's parking and step, its workflows in DBOS (status,
    executor), and the workers alive (their rows)."""
    from orchestra.distributed._dbos import system_url

    with cluster.store.transaction() as conn:
        rows = conn.execute(
            "SELECT run_id, parked, step_of FROM runs WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchall()
        alive = conn.execute("SELECT executor, beat_at FROM workers").fetchall()
    with psycopg.connect(system_url(cluster.store.url)) as conn:
        flows = conn.execute(
            "SELECT workflow_uuid, status, executor_id, queue_name FROM dbos.workflow_status"
            " WHERE split_part(workflow_uuid, '.', 1) = ANY(%s)",
            (run_ids,),
        ).fetchall()
    return f"runs (id, parked, step_of): {rows}\nworkflows: {flows}\nworkers: {alive}"


def _tree_done(cluster: Cluster, root: str) -> bool:
    return all(s.status is not Status.RUNNING for s in cluster.store.tree(root))


def test_chaos_keeps_exactly_once_budgets_and_cancel(
    pg_server: tuple[str, str | None], pg_url: str, tmp_path: Path, sandbox: Path
) -> None:
    pg_state = pg_server[1]
    if pg_state is None:
        pytest.skip("the server was given by URL alone: set ORCHESTRA_PG_STATE to restart it")
    journal = tmp_path / "journal"
    env = {"ORCHESTRA_TEST_JOURNAL": str(journal), "ORCHESTRA_TEST_SANDBOX": str(sandbox)}
    with (
        workers(pg_url, tmp_path, 3, env, concurrency=CONCURRENCY, inline=INLINE) as pool,
        Cluster(pg_url) as cluster,
    ):
        # a hang (a lock held by a frozen worker, say) fails the test instead of
        # holding CI: every worker is woken and killed, which frees what they held
        fired = threading.Event()
        watchdog = threading.Timer(WATCHDOG_S, _kill_all, (pool, fired))
        watchdog.daemon = True
        watchdog.start()
        chaos = Chaos(pool, cluster, pg_state, journal)
        faults = [chaos.kill, chaos.kill, chaos.freeze, chaos.freeze, chaos.restart_database]
        chaos.rng.shuffle(faults)
        for i in range(TREES):
            chaos.submit_tree()
            if i >= BURST - 1 and faults:
                wait_until(lambda: _open_writes(journal), 60, "a write in flight")
                _told(faults.pop())()
        for fault in faults:
            _told(fault)()
        chaos.cancel_one()
        roots = list(chaos.roots)
        try:
            _settle(cluster, roots)
        finally:  # what the faults did, also when the trees never settle
            print(chaos.timeline.told(pool), flush=True)
        trees = {root: cluster.store.tree(root) for root in roots}
        inline = set().union(*(inline_runs(cluster, root) for root in roots))
        spend = {root: ledger_rows(cluster, root) for root in roots}
        logs = {name: pool.log(name) for name in pool.procs}
        watchdog.cancel()
    assert not fired.is_set(), f"hung: the workers were killed after {WATCHDOG_S:.0f} s"
    lines = _journal(journal)
    print(_summary(chaos, trees, lines, logs))  # what the run did, in the log
    children = {s.run_id for states in trees.values() for s in states if s.parent_id}
    # both kinds met the faults: some children inline, some queued
    assert inline and children - inline, (len(inline), len(children))
    _check(chaos, trees, spend, lines, logs)


def _summary(
    chaos: Chaos,
    trees: dict[str, list[Any]],
    lines: list[tuple[str, str, int, float]],
    logs: dict[str, str],
) -> str:
    statuses = Counter(s.status.value for states in trees.values() for s in states)
    phases = Counter(phase for phase, _, _, _ in lines)
    dead = sum("declared dead" in log for log in logs.values())
    cancels = ", ".join(f"{took * 1000:.0f} ms" for took in chaos.cancelled.values())
    return (
        f"chaos seed {SEED}: {len(trees)} trees, {sum(map(len, trees.values()))} runs "
        f"{dict(statuses)}; journal {dict(phases)}; workers started {chaos.spare}, "
        f"killed {len(chaos.timeline.died)}, frozen {len(chaos.timeline.frozen)}, "
        f"exited declared dead {dead}; cancels {cancels}\n{chaos.timeline.told(chaos.pool)}\n"
        f"runs (the journal's keys):\n{_runs_told(trees)}"
    )


def _runs_told(trees: dict[str, list[Any]]) -> str:
    """Each run's id beside its path of calls from its root (as the journal names
    calls), and how it ended: to read a worker's log beside the journal."""
    rows = []
    for root, states in trees.items():
        by_id = {s.run_id: s for s in states}
        for state in states:
            path, node = [], state
            while node.parent_id is not None and node.parent_id in by_id:
                path.append(node.parent_call_id or "?")
                node = by_id[node.parent_id]
            key = "/".join([root, *reversed(path)])
            rows.append(f"  {state.run_id}: {key} {state.status.value}")
    return "\n".join(rows)


def _check(
    chaos: Chaos,
    trees: dict[str, list[Any]],
    spend: dict[str, list[dict[str, Any]]],
    lines: list[tuple[str, str, int, float]],
    logs: dict[str, str],
) -> None:
    report = {name: log[-2000:] for name, log in logs.items()}
    # exactly once
    effects = Counter(key for phase, key, _, _ in lines if phase == "effect")
    assert max(effects.values(), default=1) == 1, (effects, report)
    starts = Counter(key for phase, key, _, _ in lines if phase == "start")
    for root, kind in chaos.roots.items():
        keys = [k for k in starts if k.startswith(root)]
        if kind == "plain":
            assert all(starts[k] == 1 for k in keys), ({k: starts[k] for k in keys}, report)
        if {s.status for s in trees[root]} == {Status.COMPLETED}:
            assert all(effects[k] == 1 for k in keys), (root, keys, effects)
    # no call executed by two processes at once
    spans: dict[str, list[tuple[int, float, float | None]]] = defaultdict(list)
    for phase, key, pid, at in lines:
        if phase == "start":
            spans[key].append((pid, at, None))
        elif phase == "end":
            opened = [i for i, (p, _, e) in enumerate(spans[key]) if p == pid and e is None]
            p, s, _ = spans[key][opened[-1]]
            spans[key][opened[-1]] = (p, s, at)
    for phase, key, pid, at in lines:
        for other, began, ended in spans[key]:
            if other == pid:
                continue
            for a, b in chaos.timeline.active(other, began, ended):
                assert not a < at < b, (
                    f"{phase} of {key} by {pid} while {other} executed it",
                    report,
                )
    # nothing left running; the ledger exact; budgets kept
    for root, states in trees.items():
        assert all(s.status is not Status.RUNNING for s in states), root
        charged = sum(row["cost_pico"] for row in spend[root])
        top = next(s for s in states if s.run_id == root)
        assert charged == sum(s.own.cost_pico for s in states) == top.tree.cost_pico, (
            root,
            charged,
            [(s.run_id, s.status, s.own.cost_pico, s.tree.cost_pico) for s in states],
        )
        per_turn = Counter((row["run_id"], row["turn"]) for row in spend[root] if not row["lost"])
        assert max(per_turn.values(), default=1) == 1, per_turn
        for s in states:
            assert s.tree.cost_pico <= s.limits.budget_pico, (s.run_id, s.tree, s.limits)
    # every cancel within 1 s, under faults
    assert len(chaos.cancelled) >= 3, chaos.cancelled
    assert max(chaos.cancelled.values()) <= 1.0, (chaos.cancelled, "\n\n".join(chaos.slow))
