"""Writes in doubt settled by asking the world: a tool's reconcile hook.

A crash is simulated in-process (as in tests/test_exactly_once.py): the store
"dies" right after the write's effect, before its result is saved, and a
fresh runner on the same store plays the next process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from orchestra import (
    Agent,
    Event,
    InterruptionKind,
    Limits,
    MemoryStore,
    Reconciled,
    Runner,
    Status,
    ToolContext,
    tool,
)
from orchestra.testing import DONE, FakeProvider, tool_calls


class Crash(BaseException):
    """The process dies here."""


class DyingStore(MemoryStore):
    """A memory store that, once dead, saves nothing more (like a killed process)."""

    dead = False

    def save_many(self, states: Any, events: Any = (), **fence: Any) -> None:
        if not self.dead:
            super().save_many(states, events, **fence)


class Bank:
    """A payment service: each payment once per key, and a way to ask about a key."""

    def __init__(self, store: DyingStore, *, crash_after_effect: bool) -> None:
        self.store, self.crash = store, crash_after_effect
        self.paid: dict[str, int] = {}
        self.asked: list[str] = []

    def agent(self, hook: Any) -> Agent:
        @tool(reconcile=hook)
        def pay(amount: int, ctx: ToolContext) -> str:
            """Pay an amount (a plain write: not idempotent)."""
            self.paid[ctx.idempotency_key] = self.paid.get(ctx.idempotency_key, 0) + amount
            if self.crash:
                self.crash = False
                self.store.dead = True
                raise Crash  # the process dies after the effect, before its result is saved
            return f"paid {amount}, receipt r-{len(self.paid)}"

        return Agent(name="payer", model="m", tools=(pay,), limits=Limits(max_turns=10))

    def lookup(self, arguments: Mapping[str, Any], key: str) -> Reconciled:
        self.asked.append(key)
        if key in self.paid:
            return Reconciled.done(f"paid {arguments['amount']} (found by key)")
        return Reconciled.not_done()


async def crashed_then_resumed(bank: Bank, hook: Any) -> tuple[Any, list[Event]]:
    script = (tool_calls(("pay", '{"amount": 5}')), DONE)
    agent = bank.agent(hook)
    with pytest.raises(Crash):
        await Runner(provider=FakeProvider(*script), store=bank.store).run(
            agent, "pay the invoice", run_id="run_pay"
        )
    bank.store.dead = False  # the next process
    events: list[Event] = []
    runner = Runner(provider=FakeProvider(DONE), store=bank.store, sink=events.append)
    return await runner.resume("run_pay", agent), events


async def test_a_write_that_took_effect_is_settled_done_and_not_run_again() -> None:
    bank = Bank(DyingStore(), crash_after_effect=True)
    result, events = await crashed_then_resumed(bank, bank.lookup)
    assert result.status is Status.COMPLETED, result.state.reason
    assert sum(bank.paid.values()) == 5 and len(bank.asked) == 1  # paid once, asked once
    (said,) = [e.data for e in events if e.type == "tool_reconciled"]
    assert said["outcome"] == "done" and said["tool"] == "pay"
    (text,) = [m["content"] for m in result.state.messages if m["role"] == "tool"]
    assert text.startswith("paid 5 (found by key)") and "reconcile check" in text
    assert result.state.own.tool_runs == 0  # nothing ran in the second process


async def test_a_write_that_did_not_happen_runs_again_once() -> None:
    bank = Bank(DyingStore(), crash_after_effect=True)

    def forgetful(arguments: Mapping[str, Any], key: str) -> Reconciled:
        bank.paid.pop(key)  # the service lost it (rolled back): it did not happen
        return Reconciled.not_done()

    result, events = await crashed_then_resumed(bank, forgetful)
    assert result.status is Status.COMPLETED, result.state.reason
    assert sum(bank.paid.values()) == 5  # run again, once
    assert [e.data["outcome"] for e in events if e.type == "tool_reconciled"] == ["not_done"]
    assert [e.data["tool"] for e in events if e.type == "tool_start"] == ["pay"]


@pytest.mark.parametrize(
    ("hook", "says"),
    [
        (lambda args, key: Reconciled.unknown("the ledger is down"), "the ledger is down"),
        (lambda args, key: 1 / 0, "the reconcile hook failed: ZeroDivisionError"),
        (lambda args, key: "yes", "the reconcile hook returned str"),
    ],
    ids=["unknown", "raises", "wrong-kind"],
)
async def test_when_the_world_cannot_tell_a_human_is_asked_as_before(hook: Any, says: str) -> None:
    bank = Bank(DyingStore(), crash_after_effect=True)
    result, _ = await crashed_then_resumed(bank, hook)
    assert result.status is Status.INTERRUPTED
    waiting = result.state.interruption
    assert waiting is not None and waiting.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert says in waiting.reason and sum(bank.paid.values()) == 5  # not run again


async def test_an_async_hook_is_awaited() -> None:
    bank = Bank(DyingStore(), crash_after_effect=True)

    async def lookup(arguments: Mapping[str, Any], key: str) -> Reconciled:
        return bank.lookup(arguments, key)

    result, _ = await crashed_then_resumed(bank, lookup)
    assert result.status is Status.COMPLETED and sum(bank.paid.values()) == 5


async def test_without_a_hook_behaviour_is_unchanged() -> None:
    bank = Bank(DyingStore(), crash_after_effect=True)
    result, events = await crashed_then_resumed(bank, None)
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption is not None
    assert result.state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert not [e for e in events if e.type == "tool_reconciled"]
