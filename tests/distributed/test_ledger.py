"""The budget ledger: decisions of runs on different "workers" over one tree.

Each worker is modelled by its own live copy of the lineage (as a worker
rebuilds it from the store), sharing only the database: what one reserves
or spends the others see only through the ledger.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest
import trio

from orchestra import Agent, Limits, MemoryStore, Runner, Status
from orchestra._core.budget import Grant, carve, reserve, settle
from orchestra._core.execute import new_state
from orchestra._core.run import Exit, LiveRun
from orchestra._model.margin import Margin
from orchestra._model.provider import ChatReply
from orchestra._state import RunState
from orchestra._stores.serde import state_from_dict, state_to_dict
from orchestra.distributed import PostgresLedger, PostgresStore
from orchestra.testing import ScriptedTransport

AGENT = Agent(name="researcher", model="plan", instructions="You research.", max_tokens=400)
PROMPT = 300


def _runner() -> Runner:
    from orchestra import OpenAIProvider

    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    return Runner(provider=provider, store=MemoryStore())


def _tree(
    ledger: PostgresLedger, budget: float, children: int, child_budget: float | None = None
) -> tuple[RunState, list[RunState]]:
    """A root with ``budget`` and ``children`` children (``child_budget`` each,
    default ``budget``) carved from it, in the ledger."""
    root = new_state(AGENT, "find out", Limits(max_budget_usd=budget).anchored(time.time()))
    ledger.open_node(root, 0)
    kids = []
    for i in range(children):
        parent = LiveRun(state=root, agent=AGENT, runner=_runner())
        kid_limits = Limits(max_budget_usd=child_budget or budget)
        kid = new_state(AGENT, f"part {i}", kid_limits, parent, f"call_{i}")
        ledger.open_node(kid, 1)
        kids.append(kid)
    return root, kids


def _copy(state: RunState) -> RunState:
    return state_from_dict(state_to_dict(state))


def _worker_view(root: RunState, kid: RunState) -> LiveRun:
    """A kid as a worker sees it: its own copies of the kid and of its parent."""
    runner = _runner()
    parent = LiveRun(state=_copy(root), agent=AGENT, runner=runner)
    return LiveRun(state=_copy(kid), agent=AGENT, runner=runner, parent=parent)


def _reply(grant: Grant) -> ChatReply:
    """The worst case: the prompt as reserved and every output token used."""
    return _answer(grant.prompt, grant.max_tokens, finish="length")


def _answer(prompt: int, completion: int, *, finish: str = "stop") -> ChatReply:
    return ChatReply(
        message={"role": "assistant", "content": "x"},
        finish_reason=finish,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


async def _spend_until_stopped(ledger: PostgresLedger, run: LiveRun) -> int:
    """Reserve and pay the worst case until the gate refuses; the calls made."""
    calls = 0
    while True:
        gate = await ledger.guarded(run, lambda: reserve(run, PROMPT, 2, Margin()))
        if isinstance(gate, Exit):
            assert gate.status is Status.BUDGET_EXCEEDED
            return calls
        await trio.lowlevel.checkpoint()  # others decide while this call is "in flight"
        await ledger.guarded(run, partial(settle, run, gate, _reply(gate), Margin()))
        calls += 1


async def test_children_on_several_workers_never_spend_past_the_parents_budget(
    ledger: PostgresLedger, store: PostgresStore
) -> None:
    # No child can spend the parent's budget alone (8 × $0.004 > $0.01), whatever
    # order the threads run in: the budget is contended by construction.
    root, kids = _tree(ledger, budget=0.01, children=8, child_budget=0.004)
    views = [_worker_view(root, kid) for kid in kids]
    async with trio.open_nursery() as nursery:
        for view in views:
            nursery.start_soon(_spend_until_stopped, ledger, view)
    check = LiveRun(state=root, agent=AGENT, runner=_runner())
    await ledger.refresh(check)
    spent = ledger.spent(root.run_id)
    assert 0 < check.state.tree.cost_pico <= root.limits.budget_pico
    assert spent.cost_pico == check.state.tree.cost_pico
    assert check.reserved_pico == check.reserved_turns == 0
    assert sum(view.state.own.cost_pico for view in views) == spent.cost_pico
    # the budget was really contended: no one child could have spent it alone
    assert max(view.state.own.cost_pico for view in views) < spent.cost_pico


async def test_a_hold_left_by_a_dead_worker_is_charged_at_its_reservation(
    ledger: PostgresLedger,
) -> None:
    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    dead = _worker_view(root, kid)
    grant = await ledger.guarded(dead, lambda: reserve(dead, PROMPT, 2, Margin()))
    assert isinstance(grant, Grant)
    # the worker dies mid-call; another takes the run up from the store's state
    alive = _worker_view(root, kid)
    lost = await ledger.settle_lost(alive)
    assert lost is not None and lost.cost_pico == grant.pico and lost.model_calls == 1
    assert alive.state.own.cost_pico == grant.pico
    assert await ledger.settle_lost(alive) is None  # charged once
    check = LiveRun(state=root, agent=AGENT, runner=_runner())
    await ledger.refresh(check)
    assert check.state.tree.cost_pico == grant.pico == ledger.spent(root.run_id).cost_pico
    assert check.reserved_pico == 0


async def test_carving_sees_what_other_workers_spent(ledger: PostgresLedger) -> None:
    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    spender = _worker_view(root, kid)
    await _spend_until_stopped(ledger, spender)
    stale_parent = LiveRun(state=_copy(root), agent=AGENT, runner=_runner())
    assert stale_parent.state.tree.cost_pico == 0  # this worker has not seen the spend
    carved = await ledger.guarded(
        stale_parent, lambda: carve(stale_parent, Limits(max_budget_usd=0.01), time.time())
    )
    left = root.limits.budget_pico - ledger.spent(root.run_id).cost_pico
    if isinstance(carved, str):
        assert "no budget left" in carved
    else:
        assert carved.budget_pico is not None and carved.budget_pico <= left


def test_a_lineage_without_ledger_rows_is_refused(ledger: PostgresLedger) -> None:
    from orchestra import StateError

    orphan = new_state(AGENT, "lost", Limits(max_budget_usd=0.01))
    run = LiveRun(state=orphan, agent=AGENT, runner=_runner())
    with pytest.raises(StateError, match="no row for run"):
        ledger._guarded(run, lambda: None, None)


async def test_a_release_waits_for_the_database_and_records_the_real_cost(
    ledger: PostgresLedger, store: PostgresStore, monkeypatch: pytest.MonkeyPatch, autojump_clock
) -> None:
    from orchestra import StoreUnreachable

    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    run = _worker_view(root, kid)
    grant = await ledger.guarded(run, lambda: reserve(run, PROMPT, 2, Margin()))
    assert isinstance(grant, Grant)
    real = store.transaction
    outages = iter([True, True, True])  # the next three transactions find it away

    def flaky(**options: bool) -> object:
        if next(outages, False):
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        return real(**options)

    monkeypatch.setattr(store, "transaction", flaky)
    reply = _answer(PROMPT, 5)
    usage = await ledger.released(run, partial(settle, run, grant, reply, Margin()))
    monkeypatch.setattr(store, "transaction", real)
    assert usage.completion_tokens == 5 and usage.cost_pico < grant.pico
    assert ledger.spent(root.run_id).cost_pico == usage.cost_pico  # the real cost, once
    assert await ledger.settle_lost(_worker_view(root, kid)) is None  # no hold was left


async def test_a_release_whose_transaction_broke_mid_way_is_charged_once(
    ledger: PostgresLedger, monkeypatch: pytest.MonkeyPatch, autojump_clock: object
) -> None:
    """The connection drops after the release was decided, before it committed:
    the try changed nothing, in the ledger or in the run, so the next one
    charges the call once."""
    from orchestra import StoreUnreachable

    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    run = _worker_view(root, kid)
    grant = await ledger.guarded(run, lambda: reserve(run, PROMPT, 2, Margin()))
    assert isinstance(grant, Grant)
    real = PostgresLedger._record
    breaks = iter([True])

    def record(self: PostgresLedger, *args: Any, **kwargs: Any) -> None:
        if next(breaks, False):
            raise StoreUnreachable("cannot reach PostgreSQL (test)")
        real(self, *args, **kwargs)

    monkeypatch.setattr(PostgresLedger, "_record", record)
    reply = _answer(PROMPT, 5)
    usage = await ledger.released(run, partial(settle, run, grant, reply, Margin()))
    assert run.state.own == usage  # not twice
    assert all(node.reserved_pico == 0 for node in run.lineage())
    assert ledger.spent(root.run_id) == usage
    fresh = _worker_view(root, kid)
    await ledger.refresh(fresh)
    assert fresh.state.tree == usage and fresh.reserved_pico == 0


async def test_a_turn_charged_again_makes_the_earlier_charge_a_lost_calls(
    ledger: PostgresLedger, store: PostgresStore
) -> None:
    """A worker charged a call and died before saving its reply; the run's next
    taker, counting its turns from the saved state (the ledger keeps no own
    spend for the run, as one made before it did), makes the same turn's call
    again: it is charged, and the earlier charge stays as a lost call's (one
    charge per turn that is not lost)."""
    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    charges = []
    for _ in range(2):  # the same saved state, taken up twice
        with store.transaction() as conn:
            conn.execute("UPDATE ledger SET own = NULL WHERE run_id = %s", (kid.run_id,))
        run = _worker_view(root, kid)
        grant = await ledger.guarded(run, lambda run=run: reserve(run, PROMPT, 2, Margin()))
        assert isinstance(grant, Grant)
        reply = _answer(PROMPT, 5 + len(charges))
        charges.append(await ledger.released(run, partial(settle, run, grant, reply, Margin())))
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT turn, cost_pico, lost FROM ledger_spend WHERE run_id = %s ORDER BY seq",
            (kid.run_id,),
        ).fetchall()
    assert rows == [(2, charges[0].cost_pico, True), (2, charges[1].cost_pico, False)]
    assert ledger.spent(root.run_id).cost_pico == charges[0].cost_pico + charges[1].cost_pico


async def test_a_decision_waits_for_another_workers_lock_off_the_loop(
    ledger: PostgresLedger, pg_url: str, autojump_clock: object
) -> None:
    """A decision is made on the trio thread when the lineage's rows are free;
    when another worker's decision holds one, it waits in a thread: the loop
    (every other run of this worker) goes on meanwhile, and the decision is
    made once the lock is gone."""
    import psycopg

    root, (kid,) = _tree(ledger, budget=0.01, children=1)
    run = _worker_view(root, kid)
    decided = trio.Event()
    ticks = 0

    async def decide() -> None:
        grant = await ledger.guarded(run, lambda: reserve(run, PROMPT, 2, Margin()))
        assert isinstance(grant, Grant)
        decided.set()

    with psycopg.connect(pg_url) as other:  # another worker, inside a decision on the root
        other.execute("SELECT 1 FROM ledger WHERE run_id = %s FOR UPDATE", (root.run_id,))
        # if the decision blocked the loop, this frees it (then the assert below fails)
        rescue = threading.Timer(10.0, other.commit)
        rescue.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(decide)
            while ticks < 10:  # the loop runs while the decision waits
                await trio.sleep(0.01)
                ticks += 1
            assert not decided.is_set()
            rescue.cancel()
            other.commit()
            await decided.wait()
    assert run.reserved_turns == 1
    fresh = _worker_view(root, kid)
    await ledger.refresh(fresh)
    assert fresh.reserved_pico == run.reserved_pico > 0
