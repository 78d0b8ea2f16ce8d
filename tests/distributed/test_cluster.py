"""Run trees on three worker processes over PostgreSQL: the issue's promises.

- a research tree of 1 parent + 6 children, wider than its worker's inline
  room: some children inline, the rest on other workers, tree spend equal to
  the sum of the ledger, no node over its budget;
- one cancel stops every run of a running 3-worker tree within 1 s (200 ms idle);
- SIGKILL of a worker mid-write: its runs complete on another worker, each
  write's effect exactly once, no model call paid twice;
- a run paused for approval on one worker continues on any after approve.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import psycopg
import pytest
from distributed_support import (
    DEAD_AFTER_S,
    executors,
    finished,
    inline_runs,
    postgres_tool,
    told,
    wait_until,
    workers,
)

from orchestra import InterruptionKind, Limits, RunState, Status, StoreUnreachable, TopUp
from orchestra._approval import approve, grant
from orchestra._core.execute import new_state
from orchestra._money import from_usd
from orchestra._recipes.recipe import Recipe
from orchestra.distributed import AGENTS_KEY, Cluster, cancel_tree, ledger_rows, resume_tree, submit
from orchestra.distributed._dbos import system_url, workflow_id
from orchestra.distributed._worker import agent_of_reference

TREE_S = 90.0


@pytest.fixture
def env(tmp_path: Path, sandbox: Path) -> dict[str, str]:
    return {
        "ORCHESTRA_TEST_GATE": str(tmp_path / "gate"),
        "ORCHESTRA_TEST_JOURNAL": str(tmp_path / "journal"),
        "ORCHESTRA_TEST_SANDBOX": str(sandbox),
    }


def _children(cluster: Cluster, root_id: str) -> list:
    return [s for s in cluster.store.tree(root_id) if s.parent_id is not None]


JOURNAL_TREE = "tests.distributed.agents:journal_tree"


@contextmanager
def _six_children_writing(
    cluster: Cluster, gate: Path, reference: str = JOURNAL_TREE
) -> Iterator[str]:
    """Submit the journal tree with six children; its root id once each child is
    inside its write (its first model call made), held there (``gate``) until
    the block ends: on a loaded machine the first child could otherwise end
    its 3 s write before the last one starts."""
    gate.touch()
    agent = agent_of_reference(reference)
    task = "Scan the archives, children=6."
    root = submit(cluster, agent, task, metadata={AGENTS_KEY: reference})

    def writing() -> bool:
        kids = _children(cluster, root)
        return len(kids) == 6 and all(k.turns == 1 for k in kids)

    try:
        wait_until(writing, TREE_S, "six children inside their writes")
        yield root
    finally:
        gate.unlink()


def _assert_each_write_once(journal: Path) -> None:
    """Six writes journaled, each under its own idempotency key."""
    lines = journal.read_text().split()
    assert len(lines) == 6 and len(set(lines)) == 6, lines


def test_research_tree_spreads_over_workers_within_its_budgets(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    recipe = Recipe(directory=str(sandbox), scenario="slow_tree", child_budget=0.01, child_turns=4)
    agent = recipe.agent(Limits(max_turns=20, max_budget_usd=0.05))
    # room for two children inline: the other four are queued for any worker
    with workers(pg_url, tmp_path, 3, env, inline=2), Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "Scan the archives, children=6.", metadata=recipe.metadata())
        wait_until(lambda: finished(cluster, root), TREE_S, "the tree")
        states = cluster.store.tree(root)
        spent = sum(row["cost_pico"] for row in ledger_rows(cluster, root))
        ran_on = executors(cluster, root)
        inline = inline_runs(cluster, root)
    assert len(states) == 7
    assert {s.status for s in states} == {Status.COMPLETED}
    children = [s for s in states if s.parent_id == root]
    assert 1 <= len(inline) <= 2 and all(ran_on[r] == ran_on[root] for r in inline), ran_on
    assert len({ran_on[s.run_id] for s in children}) >= 2, ran_on
    top = next(s for s in states if s.run_id == root)
    assert top.tree.cost_pico == spent > 0
    assert top.tree.cost_pico == sum(s.own.cost_pico for s in states)
    for s in states:
        assert s.tree.cost_pico <= s.limits.budget_pico, s.run_id


def test_a_tight_budget_holds_for_a_tree_spread_over_workers(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    recipe = Recipe(directory=str(sandbox), scenario="slow_tree", child_budget=0.01, child_turns=4)
    # tight: the six children share what is left after the root keeps its answer, so
    # some start with about one call each and the budget binds (none that cannot call)
    agent = recipe.agent(Limits(max_turns=30, max_budget_usd=0.012))
    # one slot each: the six children, queued at once, are taken by each worker's
    # first poll (a root holds no slot while it waits); with three slots each, a
    # worker that polls first can take and end them all before the others look
    with workers(pg_url, tmp_path, 3, env, concurrency=1, inline=0), Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "Scan the archives, children=6.", metadata=recipe.metadata())
        wait_until(lambda: finished(cluster, root), TREE_S, "the tree")
        states = cluster.store.tree(root)
        spent = sum(row["cost_pico"] for row in ledger_rows(cluster, root))
        ran_on = executors(cluster, root)
    top = next(s for s in states if s.run_id == root)
    assert top.tree.cost_pico == spent <= top.limits.budget_pico
    assert len({ran_on[s.run_id] for s in states if s.parent_id}) >= 2, ran_on
    stopped = [s for s in states if s.status is Status.BUDGET_EXCEEDED]
    told = [m["content"] for m in top.messages if m["role"] == "tool"]
    refused = [t for t in told if "not enough budget left for this child" in t]
    # the budget did bind: a child stopped at it, or was not started for it
    assert stopped or refused, [(s.run_id, s.status, s.reason) for s in states]
    for s in states:
        assert s.tree.cost_pico <= s.limits.budget_pico, s.run_id


def test_children_over_max_concurrent_children_wait_for_a_slot_on_workers(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    recipe = Recipe(directory=str(sandbox), scenario="slow_tree", child_budget=0.01, child_turns=4)
    agent = recipe.agent(Limits(max_turns=20, max_budget_usd=0.2, max_concurrent_children=2))
    with workers(pg_url, tmp_path, 2, env), Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "Scan the archives, children=5.", metadata=recipe.metadata())
        wait_until(lambda: finished(cluster, root), TREE_S, "the tree")
        states = cluster.store.tree(root)
        events = cluster.store.events(root_id=root)
    assert len(states) == 6 and {s.status for s in states} == {Status.COMPLETED}
    spans: dict[str, list[float]] = {}
    for event in events:
        if event["run_id"] != root and event["type"] in ("run_started", "run_stopped"):
            spans.setdefault(event["run_id"], []).append(event["at"])
    edges = sorted((at, +1 if i == 0 else -1) for ats in spans.values() for i, at in enumerate(ats))
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert len(spans) == 5 and most <= 2, spans


def test_one_cancel_stops_a_three_worker_tree_within_a_second(
    pg_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    reference = "tests.distributed.agents:scan_tree"
    agent = agent_of_reference(reference)
    # two children inline (stopped with their parent's step), four on other workers
    with workers(pg_url, tmp_path, 3, env, inline=2), Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "[tree 6] [slow]", metadata={AGENTS_KEY: reference})

        def scanning() -> bool:
            kids = _children(cluster, root)
            return len(kids) == 6 and all(k.turns == 1 for k in kids)

        wait_until(scanning, TREE_S, "six children inside their 600 s scans")
        time.sleep(0.5)
        ran_on = executors(cluster, root)
        asked = time.monotonic()
        states = cancel_tree(cluster, root, "stop the tree", wait_s=10)
        took_ms = (time.monotonic() - asked) * 1000
    assert len({ran_on[s.run_id] for s in states}) >= 2, ran_on
    assert len(states) == 7
    for s in states:
        assert s.status is Status.INTERRUPTED, (s.run_id, s.status, s.reason)
        assert s.interruption is not None
        assert s.interruption.kind is InterruptionKind.CANCELLED
    # 200 ms on an idle machine (tens of ms measured); under load the workers' 50 ms
    # watchers get the CPU late (the example's cancel took 821 ms with two busy
    # processes on 2 cores): 1 s, the bound the chaos test holds a cancel to
    assert took_ms <= 1000, f"the tree stopped {took_ms:.0f} ms after the cancel"


@pytest.mark.parametrize(
    ("how", "inline"),
    [(signal.SIGKILL, 0), (signal.SIGTERM, 0), (signal.SIGKILL, None)],
    ids=["SIGKILL-queued", "SIGTERM-queued", "SIGKILL-inline"],
)
def test_a_stopped_workers_runs_complete_elsewhere_with_each_write_once(
    pg_url: str, tmp_path: Path, env: dict[str, str], how: signal.Signals, inline: int | None
) -> None:
    """Children queued (spread over workers), or all inline in their parent's
    step: the worker holding most of them stops; whoever takes them (or their
    parent) up completes them, each write once, no call paid twice."""
    with workers(pg_url, tmp_path, 3, env, inline=inline) as pool, Cluster(pg_url) as cluster:
        with _six_children_writing(cluster, tmp_path / "gate") as root:
            ran_on = executors(cluster, root)
            kids = _children(cluster, root)
            victim = Counter(ran_on[k.run_id] for k in kids).most_common(1)[0][0]
            assert victim is not None
            killed = {k.run_id for k in kids if ran_on[k.run_id] == victim}
            pool.kill(victim, how)
        wait_until(lambda: finished(cluster, root), TREE_S, "the tree after the kill")
        states = cluster.store.tree(root)
        after = executors(cluster, root)
        spend = ledger_rows(cluster, root)
    assert {s.status for s in states} == {Status.COMPLETED}, [(s.run_id, s.reason) for s in states]
    assert killed and all(after[r] != victim for r in killed), (victim, after)
    _assert_each_write_once(tmp_path / "journal")
    calls = Counter((row["run_id"], row["turn"]) for row in spend)
    assert max(calls.values()) == 1, calls
    assert not any(row["lost"] for row in spend)


def test_a_killed_workers_plain_writes_are_reconciled_elsewhere_not_asked(
    pg_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    reference = "tests.distributed.agents:reconciled_tree"
    with workers(pg_url, tmp_path, 3, env) as pool, Cluster(pg_url) as cluster:
        with _six_children_writing(cluster, tmp_path / "gate", reference) as root:
            ran_on = executors(cluster, root)
            kids = _children(cluster, root)
            victim = Counter(ran_on[k.run_id] for k in kids).most_common(1)[0][0]
            assert victim is not None
            pool.kill(victim, signal.SIGKILL)  # its writes are in doubt
        wait_until(lambda: finished(cluster, root), TREE_S, "the tree after the kill")
        states = cluster.store.tree(root)
        reconciled = [
            e for e in cluster.store.events(root_id=root) if e["type"] == "tool_reconciled"
        ]
    # no human asked: the journal told each write in doubt whether it had happened
    assert {s.status for s in states} == {Status.COMPLETED}, [(s.run_id, s.reason) for s in states]
    assert reconciled and {e["outcome"] for e in reconciled} <= {"done", "not_done"}
    _assert_each_write_once(tmp_path / "journal")


def test_an_approval_on_one_worker_is_continued_by_any(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    recipe = Recipe(directory=str(sandbox), scenario="destructive")
    agent = recipe.agent(Limits(max_turns=10))
    with workers(pg_url, tmp_path, 3, env), Cluster(pg_url) as cluster:
        root = submit(
            cluster, agent, "The disk is full; free some space.", metadata=recipe.metadata()
        )
        wait_until(lambda: finished(cluster, root), TREE_S, "the approval request")
        waiting = cluster.store.load(root)
        assert waiting.interruption is not None
        assert waiting.interruption.kind is InterruptionKind.APPROVAL
        assert (sandbox / "access.log").exists()
        approve(cluster.store, root)
        resume_tree(cluster, root)
        wait_until(lambda: finished(cluster, root), TREE_S, "the approved run")
        done = cluster.store.load(root)
    assert done.status is Status.COMPLETED, done.reason
    assert not (sandbox / "access.log").exists()


def test_a_worker_that_stalled_past_its_heartbeat_stops_itself(
    pg_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    with workers(pg_url, tmp_path, 2, env) as pool:
        stalled = pool.procs["w2"]
        stalled.send_signal(signal.SIGSTOP)  # a stall: a long GC pause, a frozen VM
        # w1 declares it dead (its row goes) once its beat is DEAD_AFTER_S old; a
        # loaded machine may take w1 longer to judge: poll for it, do not guess
        wait_until(
            lambda: not _registered(pg_url, "w2"), DEAD_AFTER_S + 60, "w1 to declare w2 dead"
        )
        stalled.send_signal(signal.SIGCONT)
        assert stalled.wait(15) == 75
        assert "declared dead" in pool.log("w2")
        assert pool.procs["w1"].poll() is None


def test_a_childs_approval_is_continued_by_any_worker(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    reference = "tests.distributed.agents:approval_tree"
    agent = agent_of_reference(reference)
    with workers(pg_url, tmp_path, 3, env), Cluster(pg_url) as cluster:
        root = submit(
            cluster, agent, "Scan the archives, children=1.", metadata={AGENTS_KEY: reference}
        )
        wait_until(lambda: finished(cluster, root), TREE_S, "the child's approval request")
        (child,) = _children(cluster, root)
        assert child.interruption is not None
        assert child.interruption.kind is InterruptionKind.APPROVAL
        top = cluster.store.load(root)
        assert top.interruption is not None and child.run_id in top.interruption.reason
        assert (sandbox / "access.log").exists()
        approve(cluster.store, child.run_id)
        resume_tree(cluster, root)
        wait_until(lambda: finished(cluster, root), TREE_S, "the approved tree")
        states = cluster.store.tree(root)
    assert {s.status for s in states} == {Status.COMPLETED}, [(s.run_id, s.reason) for s in states]
    assert not (sandbox / "access.log").exists()


@pytest.mark.parametrize("inline", [None, 0], ids=["inline", "queued"])
def test_a_childs_request_for_more_is_granted_once_and_continued_on_workers(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str], inline: int | None
) -> None:
    """``on_limit="ask"`` on workers: the runaway child pauses at its budget with
    its request, its tree with it; two equal grants apply once; the tree queued
    again goes on (the runaway spends what it was granted and asks again)."""
    recipe = Recipe(directory=str(sandbox), scenario="research_runaway", child_budget=0.004)
    agent = recipe.agent(Limits(max_turns=20, max_budget_usd=0.05, on_limit="ask"))
    with workers(pg_url, tmp_path, 2, env, inline=inline) as pool, Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "Summarise.", metadata=recipe.metadata())
        said = partial(told, cluster, root, pool)
        wait_until(lambda: finished(cluster, root), TREE_S, "the child's request", said)
        request = cluster.store.load(root).interruption
        assert request is not None and request.kind is InterruptionKind.BUDGET_REQUEST
        asked = cluster.store.load(request.run_id)
        grant(cluster.store, root, TopUp(usd=0.003))
        grant(cluster.store, root, TopUp(usd=0.003))  # a second click: nothing written
        resume_tree(cluster, root)
        more = lambda: cluster.store.load(request.run_id).turns > asked.turns  # noqa: E731
        wait_until(more, TREE_S, "the child's turns after the grant", said)
        wait_until(lambda: finished(cluster, root), TREE_S, "the request after the grant", said)
        child = cluster.store.load(request.run_id)
        spent = sum(row["cost_pico"] for row in ledger_rows(cluster, root))
    assert child.limits.max_budget_usd == pytest.approx(asked.limits.max_budget_usd + 0.003)
    assert child.tree.cost_pico <= child.limits.budget_pico
    assert cluster_request(child) != request.call_id  # it asked again, for more than granted
    assert spent <= from_usd(0.05)


def cluster_request(state: RunState) -> str | None:
    return None if state.interruption is None else state.interruption.call_id


def test_a_database_restart_mid_tree_loses_nothing(
    pg_server: tuple[str, str | None], pg_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    state = pg_server[1]
    if state is None:
        pytest.skip("the server was given by URL alone: set ORCHESTRA_PG_STATE to restart it")
    with workers(pg_url, tmp_path, 3, env) as pool, Cluster(pg_url) as cluster:
        with _six_children_writing(cluster, tmp_path / "gate") as root:
            for command in ("stop", "start"):  # every connection drops; the port stays
                done = postgres_tool(command, "--dir", state)
                assert done.returncode == 0, done.stderr
        wait_until(lambda: _quietly(finished, cluster, root), TREE_S, "the tree after the restart")
        states = cluster.store.tree(root)
        spent = sum(row["cost_pico"] for row in ledger_rows(cluster, root))
        alive = {name: proc.poll() for name, proc in pool.procs.items()}
    assert {s.status for s in states} == {Status.COMPLETED}, [(s.run_id, s.reason) for s in states]
    assert alive == {"w1": None, "w2": None, "w3": None}, alive
    _assert_each_write_once(tmp_path / "journal")
    top = next(s for s in states if s.run_id == root)
    assert top.tree.cost_pico == spent


def _quietly(check: Callable[..., bool], *args: object) -> bool:
    """``check(*args)``, False while the database is still coming back."""
    try:
        return check(*args)
    except StoreUnreachable:
        return False


def _registered(url: str, executor: str) -> bool:
    """Whether ``executor`` has a row in the workers table (peers delete a dead one's)."""
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT 1 FROM workers WHERE executor = %s", (executor,))
        return found.fetchone() is not None


def test_a_run_left_running_with_no_workflow_is_taken_up(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    """A run saved ``running`` whose workflow ended, or never began (here: saved and
    never queued, last saved long ago), is queued again by a live worker's sweep
    within ``--dead-after`` plus a few seconds, and completes."""
    recipe = Recipe(directory=str(sandbox), scenario="plan")
    agent = recipe.agent(Limits(max_turns=6))
    with workers(pg_url, tmp_path, 2, env), Cluster(pg_url) as cluster:
        state = new_state(agent, "Why did the job fail?", agent.limits.anchored(time.time()))
        state.metadata = recipe.metadata()
        state.updated_at = time.time() - 60  # as if its worker had stopped saving long ago
        cluster.store.save(state)
        cluster.ledger.open_node(state, 0)
        left = time.monotonic()
        wait_until(lambda: finished(cluster, state.run_id), DEAD_AFTER_S + 15, "the sweep")
        took = time.monotonic() - left
        done = cluster.store.load(state.run_id)
    assert done.status is Status.COMPLETED, done.reason
    # the sweep queues it within --dead-after plus a few seconds; the 10 s also hold
    # the run's own 3 model calls on a loaded machine (about 1 s idle)
    assert took <= DEAD_AFTER_S + 10, took


def test_a_workflow_held_by_a_worker_no_longer_alive_is_queued_again(
    pg_url: str, tmp_path: Path, sandbox: Path, env: dict[str, str]
) -> None:
    """A workflow DBOS marks as executing on a worker with no row in ``workers``
    (declared dead, it woke from a freeze and took it from the queue before it
    exited; or its recovery met an outage) is recovered by a live worker's sweep,
    and its run completes (the chaos test met this: a child never taken up, its
    parent parked for good)."""
    recipe = Recipe(directory=str(sandbox), scenario="plan")
    agent = recipe.agent(Limits(max_turns=6))
    with workers(pg_url, tmp_path, 1, env) as pool, Cluster(pg_url) as cluster:
        pool.stop()  # DBOS's tables exist; nobody takes from the queue meanwhile
        run_id = submit(cluster, agent, "Why did the job fail?", metadata=recipe.metadata())
        with psycopg.connect(system_url(pg_url)) as conn:
            conn.execute(
                "UPDATE dbos.workflow_status SET status = 'PENDING', executor_id = 'ghost'"
                " WHERE workflow_uuid = %s",
                (workflow_id(run_id, 0),),
            )
        with psycopg.connect(pg_url) as conn:  # and last saved long ago
            conn.execute("UPDATE runs SET updated_at = updated_at - 60 WHERE run_id = %s", [run_id])
        pool.start("w2")
        pool.wait_ready("w2")
        wait_until(lambda: finished(cluster, run_id), DEAD_AFTER_S + 20, "the sweep")
        done = cluster.store.load(run_id)
    assert done.status is Status.COMPLETED, done.reason
    assert "held by ghost" in pool.log("w2")
