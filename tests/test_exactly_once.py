"""Exactly-once across crashes in trees, approvals, leases and call ids.

A crash is simulated in-process: the store "dies" (drops every later save, as
a killed process saves nothing more) and a :class:`Crash` unwinds the run.
A fresh :class:`Runner` on the same store then plays the next process.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    InterruptionKind,
    LeaseLost,
    Limits,
    MemoryStore,
    Runner,
    SQLiteStore,
    Status,
    ToolContext,
    tool,
)
from orchestra._model.tokens import count_completion, count_prompt


class Crash(BaseException):
    """The process dies here."""


class DyingStore(MemoryStore):
    """A memory store that, once dead, saves nothing more (like a killed process)."""

    dead = False

    def save_many(self, states: Any, events: Any = (), **fence: Any) -> None:
        if not self.dead:
            super().save_many(states, events, **fence)

    def die(self) -> None:
        self.dead = True
        raise Crash


def _reply(request: ChatRequest, message: dict[str, Any]) -> ChatReply:
    return ChatReply(
        message=message,
        finish_reason="stop",
        prompt_tokens=count_prompt(request.messages, request.tools),
        completion_tokens=count_completion(message),
    )


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in calls
        ],
    }


def _say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _turn(request: ChatRequest) -> int:
    return sum(m["role"] == "assistant" for m in request.messages)


def _question(request: ChatRequest) -> str:
    return next(m["content"] for m in request.messages if m["role"] == "user")


# -- 1. a child running at the crash is re-attached, never run twice -------------------


class TreeModel:
    """lead: two ``work`` calls, then an answer. Worker "a": write, then answer (the
    first request of that answer crashes the process). Worker "b": slow, then answers."""

    def __init__(self, store: DyingStore, crash: bool) -> None:
        self.store, self.crash = store, crash
        self.requests: list[tuple[str, int]] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        who, turn = _question(request), _turn(request)
        self.requests.append((who, turn))
        if request.model == "lead":
            return _lead(request, turn)
        return await self._worker(request, who, turn)

    async def _worker(self, request: ChatRequest, who: str, turn: int) -> ChatReply:
        if who == "b":
            await trio.sleep(5)
            return _reply(request, _say("b done"))
        if turn == 0:
            return _reply(request, _calls(("x1", "append", {"entry": "a"})))
        if self.crash:
            self.store.die()
        return _reply(request, _say("a done"))


def _lead(request: ChatRequest, turn: int) -> ChatReply:
    """The lead: two ``work`` calls (questions "a" and "b"), then an answer."""
    if turn == 0:
        return _reply(
            request, _calls(("w1", "work", {"question": "a"}), ("w2", "work", {"question": "b"}))
        )
    return _reply(request, _say("both done"))


def _tree_agent(ledger: list[str]) -> Agent:
    @tool
    def append(entry: str) -> str:
        """Append an entry (a plain write)."""
        ledger.append(entry)
        return f"appended {entry}"

    worker = Agent(name="worker", model="worker", tools=(append,))
    return Agent(
        name="lead",
        model="lead",
        tools=(worker.as_tool(name="work"),),
        limits=Limits(max_turns=20, max_budget_usd=1.0),
    )


def test_a_child_running_at_a_crash_is_reattached_not_run_again() -> None:
    store, ledger = DyingStore(), []
    first = TreeModel(store, crash=True)
    with pytest.raises(Crash):  # the crash itself, not a group (see orchestra/_cancelled.py)
        trio.run(
            _run_root,
            Runner(provider=first, store=store),
            _tree_agent(ledger),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    assert ledger == ["a"] and ("a", 1) in first.requests

    store.dead = False
    second = TreeModel(store, crash=False)
    result = trio.run(
        _resume_root,
        Runner(provider=second, store=store),
        _tree_agent(ledger),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert result.status is Status.COMPLETED
    assert ledger == ["a"]  # the write of the child is not run again
    assert ("a", 0) not in second.requests  # its saved reply is not paid again
    runs = store.tree("root")
    assert len(runs) == 3 and all(s.status is Status.COMPLETED for s in runs)
    assert result.state.children == {
        s.parent_call_id: s.run_id for s in runs if s.parent_id == "root"
    }
    assert result.state.tree.cost_pico == sum(s.own.cost_pico for s in runs)


class AnswerThenCrash(TreeModel):
    """lead: two ``work`` calls, then an answer. Worker "a" answers after 1 s; worker
    "b" after 5 s, and its request crashes the process (first try)."""

    async def _worker(self, request: ChatRequest, who: str, turn: int) -> ChatReply:
        await trio.sleep(1 if who == "a" else 5)  # both bound before "a" answers
        if who == "b" and self.crash:
            self.store.die()
        return _reply(request, _say(f"{who} done"))


def test_a_child_answer_not_yet_saved_with_its_parent_is_not_paid_again() -> None:
    """The parent is not saved when a child's answer arrives (the child's own save
    holds it): after a crash, the finished child's call gets that answer back."""
    store = DyingStore()
    first = AnswerThenCrash(store, crash=True)
    with pytest.raises(Crash):
        trio.run(
            _run_root,
            Runner(provider=first, store=store),
            _tree_agent([]),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    assert ("a", 0) in first.requests
    assert "w1" not in store.load("root").results  # the parent was not saved with a's answer

    store.dead = False
    second = AnswerThenCrash(store, crash=False)
    result = trio.run(
        _resume_root,
        Runner(provider=second, store=store),
        _tree_agent([]),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert result.status is Status.COMPLETED
    assert ("a", 0) not in second.requests  # a's answer came from its saved state
    answers = [m["content"] for m in result.state.messages if m["role"] == "tool"]
    assert answers == ["a done", "b done"]
    runs = store.tree("root")
    assert sum(s.own.model_calls for s in runs) == 4  # lead 2, a 1, b 1 (its first try died)
    assert result.state.tree.cost_pico == sum(s.own.cost_pico for s in runs)


async def _run_root(runner: Runner, agent: Agent) -> Any:
    return await runner.run(agent, "go", run_id="root")


async def _resume_root(runner: Runner, agent: Agent) -> Any:
    return await runner.resume("root", agent)


# -- 2. an approval binds to one attempt ------------------------------------------------


class WriteOnce:
    """One ``write`` call, then an answer."""

    def __init__(self, tool_name: str = "write") -> None:
        self.tool_name = tool_name

    async def complete(self, request: ChatRequest) -> ChatReply:
        if _turn(request) == 0:
            return _reply(request, _calls(("c1", self.tool_name, {"entry": "x"})))
        return _reply(request, _say(f"tool said: {request.messages[-1]['content']}"))


def _write_agent(ledger: list[str], store: DyingStore, crashes: list[bool], gated: bool) -> Agent:
    @tool(name="write", needs_approval=gated)
    def write(entry: str) -> str:
        """Write an entry."""
        ledger.append(entry)
        if crashes and crashes.pop(0):
            store.die()
        return f"wrote {entry}"

    return Agent(name="w", model="w", tools=(write,))


def _process(store: DyingStore, agent: Agent, *, first: bool = False) -> Any:
    """One process's go at the run (a fresh runner on the store, which lives again)."""
    runner = Runner(provider=WriteOnce(), store=store)
    store.dead = False

    async def go() -> Any:
        if first:
            return await runner.run(agent, "write x", run_id="r")
        return await runner.resume("r", agent)

    return lambda: trio.run(go)


def _step(store: DyingStore, agent: Agent, *, first: bool = False) -> Any:
    return _process(store, agent, first=first)()


def _crashing_step(store: DyingStore, agent: Agent, *, first: bool = False) -> None:
    with pytest.raises(Crash):
        _process(store, agent, first=first)()


@pytest.mark.parametrize("gated", [True, False], ids=["approval-gated", "plain"])
def test_an_approved_write_is_in_doubt_again_after_a_second_crash(gated: bool) -> None:
    store, ledger = DyingStore(), []
    agent = _write_agent(ledger, store, [True, True], gated)  # every attempt crashes after it
    if gated:
        first = _step(store, agent, first=True)
        assert first.status is Status.INTERRUPTED
        assert first.state.interruption.kind is InterruptionKind.APPROVAL
        Runner(provider=WriteOnce(), store=store).approve("r")
        _crashing_step(store, agent)  # approved, written, crashed before its result
    else:
        _crashing_step(store, agent, first=True)  # written, crashed before its result
        waiting = _step(store, agent)
        assert waiting.state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME
        Runner(provider=WriteOnce(), store=store).approve("r")
        _crashing_step(store, agent)  # approved again, written again, crashed again
    assert ledger == ["x"] * (1 if gated else 2)
    again = _step(store, agent)
    assert again.status is Status.INTERRUPTED  # whatever was approved before, it asks again
    assert again.state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert ledger == ["x"] * (1 if gated else 2)
    Runner(provider=WriteOnce(), store=store).reject("r", reason="checked: x is written")
    done = _step(store, agent)
    assert done.status is Status.COMPLETED and "checked: x is written" in done.answer


# -- 3. the lease fences writes and saves ------------------------------------------------


class StallingModel:
    """Asks for one write. In process A, the first request stalls (the whole
    thread blocks, as under SIGSTOP) until process B has taken the tree over."""

    def __init__(self, takeover: Any = None) -> None:
        self.takeover = takeover

    async def complete(self, request: ChatRequest) -> ChatReply:
        if _turn(request) == 0 and self.takeover is not None:
            takeover, self.takeover = self.takeover, None
            takeover()
        return await WriteOnce().complete(request)


def _ledger_agent(ledger: Path) -> Agent:
    @tool
    def write(entry: str, ctx: ToolContext) -> str:
        """Write an entry."""
        with ledger.open("a") as f:
            f.write(f"{entry} by {ctx.run_id}\n")
        return f"wrote {entry}"

    return Agent(name="w", model="w", tools=(write,))


def test_a_process_that_lost_its_lease_neither_writes_nor_saves(tmp_path: Path) -> None:
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.txt"
    b_result: list[Any] = []

    def b_takes_over() -> None:
        time.sleep(0.3)  # A's lease (0.2 s) expires while it is stopped
        store_b = SQLiteStore(db)
        runner_b = Runner(provider=StallingModel(), store=store_b, owner="process B")
        worker = threading.Thread(
            target=lambda: b_result.append(trio.run(runner_b.resume, "r", _ledger_agent(ledger)))
        )
        worker.start()
        worker.join()
        store_b.close()

    store_a = SQLiteStore(db)
    runner_a = Runner(
        provider=StallingModel(b_takes_over), store=store_a, owner="process A", lease_ttl=0.2
    )
    with pytest.raises(LeaseLost, match="lost the lease"):
        trio.run(lambda: runner_a.run(_ledger_agent(ledger), "write x", run_id="r"))
    assert ledger.read_text().splitlines() == ["x by r"]  # B wrote once; A never did
    saved = store_a.load("r")
    assert saved.status is Status.COMPLETED and saved.answer == b_result[0].answer
    assert saved.turns == 2  # A's reply was never saved over B's state
    store_a.close()


# -- 4. tool-call ids are unique within a run -------------------------------------------


class NoIds:
    """Three turns of one ``stamp`` call with no id, then an answer."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        turn = _turn(request)
        if turn >= 3:
            return _reply(request, _say("done"))
        return _reply(request, _calls(("", "stamp", {"text": "same"})))


async def test_calls_without_ids_get_ids_unique_in_the_run() -> None:
    keys: list[str] = []

    @tool(idempotent=True)
    def stamp(text: str, ctx: ToolContext) -> str:
        """Stamp a text (an idempotent write)."""
        if ctx.idempotency_key in keys:
            return "already stamped"
        keys.append(ctx.idempotency_key)
        return "stamped"

    agent = Agent(name="s", model="s", tools=(stamp,))
    result = await Runner(provider=NoIds()).run(agent, "stamp thrice", run_id="r")
    ids = [c["id"] for m in result.state.messages for c in m.get("tool_calls") or ()]
    assert len(ids) == 3 and len(set(ids)) == 3 and all(ids)
    assert len(keys) == 3  # three calls, three writes


async def test_a_rejection_answers_only_its_own_call() -> None:
    @tool(needs_approval=True)
    def stamp(text: str) -> str:
        """Stamp a text (needs approval)."""
        return "stamped"

    agent = Agent(name="s", model="s", tools=(stamp,))
    runner = Runner(provider=NoIds())
    first = await runner.run(agent, "stamp", run_id="r")
    runner.reject("r", reason="not this one")
    second = await runner.resume("r", agent)
    assert second.status is Status.INTERRUPTED  # turn 2's call is asked about, not auto-rejected
    assert second.state.interruption.kind is InterruptionKind.APPROVAL
    assert second.state.interruption.call_id != first.state.interruption.call_id


# -- 5. cancel requests and cancellation at the API's edge ------------------------------


async def test_a_handle_cancelled_right_after_start_stops_the_run(
    runner, scenario_agent, autojump_clock
):
    from orchestra._recipes.demo import demo_task

    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, scenario_agent("slow"), demo_task("slow"))
        handle.cancel("changed my mind")
        result = await handle.wait()
    assert result.status is Status.INTERRUPTED and result.state.reason == "changed my mind"
    assert result.state.turns == 0


async def test_run_cancelled_from_outside_raises_cancelled_not_a_group(
    runner, scenario_agent, autojump_clock
):
    from orchestra._recipes.demo import demo_task

    seen: list[type[BaseException]] = []

    async def run_tree() -> None:
        try:
            await runner.run(scenario_agent("slow_tree"), demo_task("slow_tree"))
        except BaseException as exc:
            seen.append(type(exc))
            raise

    with trio.move_on_after(1.0):
        await run_tree()
    assert seen == [trio.Cancelled]


async def test_a_cancel_request_racing_completion_is_not_left_armed(
    tmp_path: Path, provider, scenario_agent
):
    from orchestra._recipes.demo import demo_task

    store = SQLiteStore(tmp_path / "runs.db")

    def late_request(event: Any) -> None:
        if event.type == "run_stopped" and event.parent_id is None:
            store.request_cancel(event.run_id, "too late")

    runner = Runner(provider=provider, store=store, sink=late_request)
    result = await runner.run(scenario_agent("plan"), demo_task("plan"))
    assert result.status is Status.COMPLETED
    assert store.pending_cancels(result.run_id) == {}
    store.close()
