"""A worker's steps when the database goes away: what one step abandons, and what it does not.

Each test drives :meth:`Worker.advance` (the step DBOS calls) in this process,
on a real database, with the worker's tree primed (its runner, with a
provider of fixed replies, and its root agent) instead of rebuilt from a
recipe; an outage is one store or ledger call that raises
:class:`StoreUnreachable`, as the first use of each connection does after a
PostgreSQL restart.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from orchestra import Agent, Limits, Runner, Status, StoreUnreachable, tool
from orchestra._core.execute import new_state
from orchestra._core.run import LiveRun
from orchestra._model.provider import ChatReply, ChatRequest
from orchestra._prices import PriceTable
from orchestra._state import RunState, Usage
from orchestra._stores.serde import state_from_dict, state_to_dict
from orchestra.distributed import PostgresLedger, PostgresStore
from orchestra.distributed._host import WorkerRunner
from orchestra.distributed._threads import StepAbandoned
from orchestra.distributed._worker import Worker
from orchestra.testing import DONE, FakeProvider, tool_calls

AGENT = Agent(name="researcher", model="fake", instructions="You research.", max_tokens=400)
LIMITS = Limits(max_turns=4, max_budget_usd=0.01)


class _NoQueue:
    async def enqueue(self, run_id: str) -> None:  # pragma: no cover - no child is spawned
        raise AssertionError(f"nothing is queued here ({run_id})")


class _Gated:
    """:class:`FakeProvider`'s answer (``done``). A task containing ``[gate]`` sets
    :attr:`waiting` and waits for :attr:`open` first; :attr:`on_reply` (if set)
    runs as each reply is returned."""

    def __init__(self) -> None:
        self.fake = FakeProvider(DONE)
        self.waiting = trio.Event()
        self.open = trio.Event()
        self.on_reply: Any = None

    async def complete(self, request: ChatRequest) -> ChatReply:
        task = str(request.messages[-1]["content"])
        if "[gate]" in task:
            self.waiting.set()
            await self.open.wait()
        reply = await self.fake.complete(request)
        if self.on_reply is not None:
            self.on_reply()
        return reply


def _worker(
    store: PostgresStore,
    ledger: PostgresLedger,
    root: RunState,
    provider: _Gated | FakeProvider,
    executor: str = "w1",
    agent: Agent = AGENT,
) -> Worker:
    """A worker (not serving) whose tree ``root`` is primed: no DBOS, no recipe."""
    runner = WorkerRunner(
        provider=provider,
        prices=PriceTable(warn_unknown=False),
        store=store,
        queue=_NoQueue(),
        ledger=ledger,
        owner=executor,
    )
    worker = Worker(database=store.path, executor_id=executor)
    worker._store, worker._ledger = store, ledger
    worker._roots[root.run_id] = (runner, agent)
    return worker


def _tree(
    store: PostgresStore, ledger: PostgresLedger, *tasks: str
) -> tuple[RunState, list[RunState]]:
    """A root and one child per task, saved and in the ledger (all running, no turn yet)."""
    root = new_state(AGENT, "the tree", LIMITS.anchored(time.time()))
    store.save(root)
    ledger.open_node(root, 0)
    kids = []
    for i, task in enumerate(tasks):
        parent = LiveRun(state=root, agent=AGENT, runner=Runner(provider=FakeProvider(DONE)))
        kid = new_state(AGENT, task, LIMITS.anchored(time.time()), parent, f"call_{i}")
        store.save(kid)
        ledger.open_node(kid, 1)
        kids.append(kid)
    return root, kids


async def test_a_release_that_met_the_database_away_once_still_saves_the_runs_exit(
    store: PostgresStore, ledger: PostgresLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database restarted while the model answered: the release of the
    call's reservation meets it away once, then gets through, and the step
    goes on to save the answer. (Its exit was dropped: the step said
    ``completed``, so DBOS ended the workflow, while the store kept the run
    ``running`` and its parent waited for it for ever.)"""
    provider = _Gated()
    root, _ = _tree(store, ledger)
    worker = _worker(store, ledger, root, provider)
    real = store.transaction
    away = False

    def transaction(**options: bool) -> Any:  # the ledger's transactions
        nonlocal away
        if away:
            away = False
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        return real(**options)

    def restart() -> None:
        nonlocal away
        away = True

    monkeypatch.setattr(store, "transaction", transaction)
    provider.on_reply = restart

    assert await worker.advance(root.run_id) == "completed"

    saved = store.load(root.run_id)
    assert saved.status is Status.COMPLETED, (saved.status, saved.reason)
    assert saved.own.model_calls == 1
    assert ledger.spent(root.run_id).cost_pico == saved.own.cost_pico > 0  # paid once
    again = LiveRun(state=saved, agent=AGENT, runner=Runner(provider=FakeProvider(DONE)))
    assert await ledger.settle_lost(again) is None  # no hold was left


async def test_an_abandoned_step_does_not_swallow_another_runs_exit(
    store: PostgresStore, ledger: PostgresLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children of one tree step on one worker at once: the database fails
    one child's step; the other's step, already under way, still saves its exit."""
    provider = _Gated()
    root, (failing, steady) = _tree(store, ledger, "part a", "part b [gate]")
    worker = _worker(store, ledger, root, provider)
    real = store.save_many

    def save_many(states: list[RunState], *args: Any, **kwargs: Any) -> None:
        if any(s.run_id == failing.run_id for s in states):
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        real(states, *args, **kwargs)

    outcome: dict[str, str] = {}

    async def step_of_steady() -> None:
        outcome["steady"] = await worker.advance(steady.run_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(step_of_steady)
        with trio.fail_after(30):
            await provider.waiting.wait()  # its model call is in flight
        monkeypatch.setattr(store, "save_many", save_many)
        with pytest.raises(StepAbandoned):
            await worker.advance(failing.run_id)
        monkeypatch.setattr(store, "save_many", real)
        provider.open.set()

    assert outcome["steady"] == "completed"
    assert store.load(steady.run_id).status is Status.COMPLETED
    assert store.load(failing.run_id).status is Status.RUNNING  # nothing of its step saved
    assert store.load(failing.run_id).turns == 0
    assert await worker.advance(failing.run_id) == "completed"  # its step, tried again
    assert store.load(failing.run_id).status is Status.COMPLETED


async def test_a_step_whose_claim_was_taken_over_saves_and_charges_nothing(
    store: PostgresStore, ledger: PostgresLedger
) -> None:
    """A worker stalls mid-call; a peer declares it dead and claims the run. When
    the call returns, the stale step is fenced out: no save, no charge (its
    hold stays, charged at its reservation by the run's next taker), and it
    ends its workflow (``superseded``) instead of claiming the run back."""
    provider = _Gated()
    root, (kid,) = _tree(store, ledger, "part a [gate]")
    stale = _worker(store, ledger, root, provider)
    outcome: dict[str, str] = {}

    async def stale_step() -> None:
        outcome["stale"] = await stale.advance(kid.run_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stale_step)
        with trio.fail_after(30):
            await provider.waiting.wait()  # its model call is in flight
        taken = store.claim(kid.run_id, "w2")  # the successor's claim
        assert taken is not None and taken[1].epoch == 2
        provider.open.set()

    assert outcome["stale"] == "superseded"
    saved = store.load(kid.run_id)
    assert (saved.status, saved.turns) == (Status.RUNNING, 0)  # nothing of the stale step
    assert ledger.spent(root.run_id).model_calls == 0  # its release was fenced out too
    assert executor_of(store, kid.run_id) == "w2"
    successor = _worker(store, ledger, root, provider, executor="w2")
    assert await successor.advance(kid.run_id) == "completed"
    done = store.load(kid.run_id)
    spent = ledger.spent(root.run_id)
    assert spent.model_calls == 2 == done.own.model_calls  # the stale call charged as lost
    assert spent.cost_pico == done.own.cost_pico > 0


def executor_of(store: PostgresStore, run_id: str) -> str | None:
    return store.executor(run_id)


def _tree_cost(store: PostgresStore, root_id: str) -> int:
    return store.load(root_id).tree.cost_pico


async def test_a_childs_charge_after_its_root_stopped_reaches_the_roots_tree_cost(
    store: PostgresStore, ledger: PostgresLedger
) -> None:
    """The root stops first (as a cancelled tree's, or one out of time, may)
    and reconciles; its child, on another worker, is charged after that and
    then stops: the root's saved tree cost is still the ledger's."""
    root, (kid,) = _tree(store, ledger, "part a")
    assert await _worker(store, ledger, root, _Gated()).advance(root.run_id) == "completed"
    assert _tree_cost(store, root.run_id) == ledger.spent(root.run_id).cost_pico > 0
    other = _worker(store, ledger, root, _Gated(), executor="w2")
    assert await other.advance(kid.run_id) == "completed"
    assert _tree_cost(store, root.run_id) == ledger.spent(root.run_id).cost_pico
    assert ledger.spent(root.run_id).model_calls == 2


async def test_a_reconcile_the_database_failed_is_made_when_the_step_is_tried_again(
    store: PostgresStore, ledger: PostgresLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root saves its stop, then the database goes away before the tree's
    costs are set to the ledger's (which a child charged meanwhile): the step
    is abandoned, and its next try (the run no longer claimable) sets them."""
    root, (kid,) = _tree(store, ledger, "part a")
    worker = _worker(store, ledger, root, _Gated())
    real = PostgresLedger.reconcile
    away = iter([True])

    def reconcile(self: PostgresLedger, root_id: str) -> list[str]:
        if next(away, False):
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        return real(self, root_id)

    monkeypatch.setattr(PostgresLedger, "reconcile", reconcile)
    # the run step completed and was saved: the outage after it ends this DBOS
    # step as "running", and the workflow's next step, with tries of its own, ends it
    assert await worker.advance(root.run_id) == "running"
    assert store.load(root.run_id).status is Status.COMPLETED  # saved before the outage
    await _charge_elsewhere(ledger, root, kid)
    assert _tree_cost(store, root.run_id) < ledger.spent(root.run_id).cost_pico
    assert await worker.advance(root.run_id) == "completed"  # the workflow's next step
    assert _tree_cost(store, root.run_id) == ledger.spent(root.run_id).cost_pico


async def _charge_elsewhere(ledger: PostgresLedger, root: RunState, kid: RunState) -> None:
    """A charge of ``kid``'s, as its worker's ledger decision makes it (no save)."""
    runner = Runner(provider=FakeProvider(DONE))
    parent = LiveRun(state=_copy(root), agent=AGENT, runner=runner)
    run = LiveRun(state=_copy(kid), agent=AGENT, runner=runner, parent=parent)
    spent = Usage(model_calls=1, prompt_tokens=100, completion_tokens=10, cost_pico=710_000_000)
    await ledger.guarded(run, lambda: run.charge(spent))


def _copy(state: RunState) -> RunState:
    return state_from_dict(state_to_dict(state))


def _epoch(store: PostgresStore, run_id: str) -> int:
    with store.transaction() as conn:
        row = conn.execute("SELECT epoch FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return int(row[0])


def _looking(on_look: Any = None) -> tuple[Agent, FakeProvider, list[int]]:
    """An agent (named as :data:`AGENT`) whose model calls ``look`` then answers; the
    provider, and the list ``look`` appends to each time it runs (after ``on_look()``)."""
    looks: list[int] = []

    @tool(read_only=True)
    def look() -> str:
        """Look around."""
        if on_look is not None:
            on_look()
        looks.append(1)
        return "seen"

    agent = Agent(name=AGENT.name, model="fake", instructions="You look.", tools=(look,))
    return agent, FakeProvider(tool_calls(("look", {})), DONE), looks


async def test_one_claim_covers_the_steps_a_worker_executes_in_a_row(
    store: PostgresStore, ledger: PostgresLedger
) -> None:
    """A model call, its tool, the answer: three steps under one claim (the run's
    epoch moved once), each saved before the next, nothing paid twice."""
    agent, provider, looks = _looking()
    root, _ = _tree(store, ledger)
    worker = _worker(store, ledger, root, provider, agent=agent)

    assert await worker.advance(root.run_id) == "completed"

    saved = store.load(root.run_id)
    assert (saved.turns, len(looks), len(provider.requests)) == (2, 1, 2)
    assert _epoch(store, root.run_id) == 1
    assert ledger.spent(root.run_id).model_calls == 2 == saved.own.model_calls


async def test_a_takeover_between_steps_stops_the_run_at_its_next_save(
    store: PostgresStore, ledger: PostgresLedger
) -> None:
    """The steps after the first run on the claim taken for it: a peer that takes the
    run over meanwhile (here, while its tool runs) fences out the rest. The tool's
    result is not saved, no further model call is made or charged, and the step
    ends its workflow (``superseded``); the successor continues from the saved
    reply (the read runs again there) and finishes with one call more."""
    root, _ = _tree(store, ledger)
    taken: list[object] = []

    def take_over() -> None:
        if not taken:
            taken.append(store.claim(root.run_id, "w2"))

    agent, provider, looks = _looking(take_over)
    stale = _worker(store, ledger, root, provider, agent=agent)

    assert await stale.advance(root.run_id) == "superseded"

    saved = store.load(root.run_id)
    assert (saved.status, saved.turns, saved.results) == (Status.RUNNING, 1, {})
    assert (len(looks), len(provider.requests)) == (1, 1)
    assert ledger.spent(root.run_id).model_calls == 1
    successor = _worker(store, ledger, root, provider, executor="w2", agent=agent)
    assert await successor.advance(root.run_id) == "completed"
    done = store.load(root.run_id)
    assert (done.turns, len(looks), len(provider.requests)) == (2, 2, 2)
    assert ledger.spent(root.run_id).model_calls == 2 == done.own.model_calls


async def test_an_outage_after_a_completed_step_leaves_the_rest_to_the_next_dbos_step(
    store: PostgresStore, ledger: PostgresLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's reply is saved, then the database goes away as the tool's result
    is saved: the step says ``running`` (the workflow's next DBOS step takes the
    run up, with tries of its own) instead of raising for DBOS to retry it, and
    the run continues from the saved reply."""
    agent, provider, looks = _looking()
    root, _ = _tree(store, ledger)
    worker = _worker(store, ledger, root, provider, agent=agent)
    real = store.save_many

    def save_many(states: list[RunState], *args: Any, **kwargs: Any) -> None:
        if any(m["role"] == "tool" for s in states for m in s.messages):
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        real(states, *args, **kwargs)

    monkeypatch.setattr(store, "save_many", save_many)
    assert await worker.advance(root.run_id) == "running"
    saved = store.load(root.run_id)
    assert (saved.status, saved.turns, len(saved.messages)) == (Status.RUNNING, 1, 3)

    monkeypatch.setattr(store, "save_many", real)
    assert await worker.advance(root.run_id) == "completed"
    done = store.load(root.run_id)
    assert (done.turns, len(looks), len(provider.requests)) == (2, 2, 2)
    assert ledger.spent(root.run_id).model_calls == 2 == done.own.model_calls


async def test_a_workflow_queued_for_an_earlier_attempt_never_claims_the_run(
    store: PostgresStore, ledger: PostgresLedger
) -> None:
    """A run queued again (a sweep found it stopped moving, a wake, a resume) has a
    new workflow; one of its earlier attempt that begins late (it was claimed
    from the queue just before) ends without claiming the run: it never takes
    the run from the worker executing it for the new one."""
    root, _ = _tree(store, ledger)
    store.requeue(root.run_id)  # now at attempt 1
    worker = _worker(store, ledger, root, FakeProvider(DONE))
    with store.transaction() as conn:
        before = conn.execute(
            "SELECT executor, epoch FROM runs WHERE run_id = %s", (root.run_id,)
        ).fetchone()
    assert await worker.advance(root.run_id, 0) == "superseded"
    with store.transaction() as conn:
        after = conn.execute(
            "SELECT executor, epoch FROM runs WHERE run_id = %s", (root.run_id,)
        ).fetchone()
    assert after == before  # not claimed
    assert store.load(root.run_id).turns == 0
    assert await worker.advance(root.run_id, 1) == "completed"  # its current workflow
