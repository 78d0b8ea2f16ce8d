"""Exactly-once tools across crashes: SIGKILL at every step boundary, then resume.

A forked child process runs a scripted run whose write tool appends entries to
a ledger on disk. It SIGKILLs itself at kill point k (before or after the k-th
save, or right after a write's effect, before its result is saved). A new
process then resumes the run to its end, resolving any write left in doubt by
looking at the ledger, as an operator would. Checked: no ledger entry twice,
every entry present, no model reply that was saved is requested again, and
the run ends ``completed``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    InterruptionKind,
    Limits,
    Reconciled,
    Runner,
    Status,
    ToolContext,
    tool,
)
from orchestra._model.tokens import count_completion, count_prompt
from orchestra._stores.sqlite import SQLiteStore

TURNS = 6  # each turn: one read and two writes, then a final answer
RUN_ID = "run_crash"


class Points:
    """Counts kill points in this process and dies at the chosen one."""

    def __init__(self, kill_at: int | None, mode: str) -> None:
        self.n, self.kill_at, self.mode = 0, kill_at, mode

    def tick(self, mode: str) -> None:
        if mode != self.mode and not (mode == "effect" and self.mode == "after"):
            return
        self.n += 1
        if self.n == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


class KillingStore(SQLiteStore):
    def __init__(self, path: Path, points: Points) -> None:
        super().__init__(path)
        self.points = points

    def save(self, state: Any, events: Any = (), **fence: Any) -> None:
        self.points.tick("before")
        super().save(state, events, **fence)
        self.points.tick("after")


class LedgerModel:
    """Turn t < TURNS: read, then write 't.a' and 't.b'; then answer. Logs each request."""

    def __init__(self, log: Path, phase: str) -> None:
        self.log, self.phase = log, phase

    async def complete(self, request: ChatRequest) -> ChatReply:
        turn = sum(m["role"] == "assistant" for m in request.messages)
        with self.log.open("a") as f:
            f.write(json.dumps({"phase": self.phase, "turn": turn}) + "\n")
        if turn >= TURNS:
            msg: dict[str, Any] = {"role": "assistant", "content": "ledger written"}
        else:
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _call(turn, 0, "peek", {}),
                    _call(turn, 1, "append", {"entry": f"{turn}.a"}),
                    _call(turn, 2, "append", {"entry": f"{turn}.b"}),
                ],
            }
        return ChatReply(
            message=msg,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=count_completion(msg),
        )


def _call(turn: int, i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{turn}_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def ledger_agent(directory: Path, points: Points, kind: str) -> Agent:
    """``kind``: how a write in doubt is settled: ``in-doubt`` (a human, looking at
    the ledger), ``idempotent`` (run again, deduplicated by key) or ``reconciled``
    (the tool's reconcile hook looks at the ledger)."""
    ledger, keys = directory / "ledger.txt", directory / "keys.txt"
    idempotent = kind == "idempotent"

    def written(arguments: Any, key: str) -> Reconciled:
        entries = ledger.read_text().split() if ledger.exists() else []
        entry = arguments["entry"]
        return Reconciled.done(f"appended {entry}") if entry in entries else Reconciled.not_done()

    @tool(read_only=True)
    def peek() -> str:
        """Count ledger lines."""
        return str(len(ledger.read_text().splitlines()) if ledger.exists() else 0)

    @tool(idempotent=idempotent, reconcile=written if kind == "reconciled" else None)
    def append(entry: str, ctx: ToolContext) -> str:
        """Append an entry to the ledger."""
        if idempotent and keys.exists() and ctx.idempotency_key in keys.read_text().split():
            return f"{entry} was already appended"
        with ledger.open("a") as f:
            f.write(entry + "\n")
            f.flush()
            os.fsync(f.fileno())
        if idempotent:
            with keys.open("a") as f:
                f.write(ctx.idempotency_key + "\n")
        points.tick("effect")
        return f"appended {entry}"

    return Agent(name="ledger", model="ledger", tools=(peek, append), limits=Limits(max_turns=20))


def _child(directory: str, kill_at: int | None, mode: str, kind: str, resume: bool) -> None:
    path = Path(directory)
    points = Points(kill_at, mode)
    store = KillingStore(path / "runs.db", points)
    phase = "resume" if resume else "first"
    runner = Runner(provider=LedgerModel(path / "requests.log", phase), store=store)
    agent = ledger_agent(path, points, kind)

    async def main() -> None:
        if not resume:
            await runner.run(agent, "write the ledger", run_id=RUN_ID)
            return
        result = await runner.resume(RUN_ID, agent)
        if kind == "reconciled":  # the world answered: no human is ever asked
            assert result.status is Status.COMPLETED, result.state.reason
        while result.status is Status.INTERRUPTED:
            waiting = result.state.interruption
            assert waiting.kind is InterruptionKind.UNKNOWN_OUTCOME, waiting
            entry = waiting.arguments["entry"]
            ledger = (
                (path / "ledger.txt").read_text().split() if (path / "ledger.txt").exists() else []
            )
            if entry in ledger:
                runner.reject(RUN_ID, reason=f"checked: {entry} is in the ledger already")
            else:
                runner.approve(RUN_ID)
            result = await runner.resume(RUN_ID, agent)
        assert result.status is Status.COMPLETED, result.state.reason

    trio.run(main)
    store.close()
    os._exit(0)


def _fork(*args: Any) -> int:
    process = multiprocessing.get_context("fork").Process(target=_child, args=args)
    process.start()
    process.join(60)
    assert process.exitcode is not None
    return process.exitcode


def _count_points(tmp: Path, mode: str) -> int:
    clean = tmp / f"count-{mode}"
    clean.mkdir(parents=True)
    points = Points(None, mode)
    store = KillingStore(clean / "runs.db", points)
    runner = Runner(provider=LedgerModel(clean / "requests.log", "first"), store=store)
    trio.run(runner.run, ledger_agent(clean, points, "in-doubt"), "write the ledger")
    store.close()
    return points.n


def _trial(directory: Path, kill_at: int, mode: str, kind: str) -> None:
    directory.mkdir()
    first = _fork(str(directory), kill_at, mode, kind, False)
    assert first == -signal.SIGKILL
    saved = SQLiteStore(directory / "runs.db")
    try:
        state = saved.load(RUN_ID)
        saved_turns = sum(m["role"] == "assistant" for m in state.messages)
    except Exception:  # killed before the first save: nothing to resume
        saved.close()
        return
    saved.close()
    if state.status is not Status.COMPLETED:  # killed after the last save: nothing to resume
        assert _fork(str(directory), None, mode, kind, True) == 0
    entries = (directory / "ledger.txt").read_text().split()
    expected = [f"{t}.{x}" for t in range(TURNS) for x in "ab"]
    assert sorted(entries) == sorted(expected), f"duplicated or lost effects at {mode} {kill_at}"
    requests = [json.loads(line) for line in (directory / "requests.log").read_text().splitlines()]
    resumed = [r["turn"] for r in requests if r["phase"] == "resume"]
    assert min(resumed, default=saved_turns) >= saved_turns, "a saved reply was requested again"


@pytest.mark.parametrize("kind", ["in-doubt", "idempotent", "reconciled"])
def test_sigkill_at_every_step_then_resume(tmp_path: Path, kind: str) -> None:
    trials = 0
    for mode in ("before", "after"):
        for kill_at in range(1, _count_points(tmp_path / kind, mode) + 1):
            _trial(tmp_path / f"{mode}-{kill_at}-{kind}", kill_at, mode, kind)
            trials += 1
    assert trials >= 80  # every save and effect of a 6-turn ledger run is a kill point


class KillAfterTurnTwo(SQLiteStore):
    """Dies right after saving the state that holds turn 2's tool result."""

    def save(self, state: Any, events: Any = (), **fence: Any) -> None:
        super().save(state, events, **fence)
        if len(state.messages) == 6 and state.messages[-1]["role"] == "tool":
            os.kill(os.getpid(), signal.SIGKILL)


WIRES = ("chat", "responses", "anthropic")


def _plan(directory: str, store_cls: type[SQLiteStore], resume: bool, wire: str) -> None:
    from orchestra import AnthropicProvider, OpenAIProvider, ResponsesProvider, ToolPolicy
    from orchestra._recipes.demo import demo_agent, demo_task
    from orchestra.testing import ScriptedTransport

    path = Path(directory)
    store = store_cls(path / "runs.db")
    make = {"chat": OpenAIProvider, "responses": ResponsesProvider, "anthropic": AnthropicProvider}
    provider = make[wire](base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    runner = Runner(provider=provider, store=store)
    agent = demo_agent(
        "plan", path, limits=Limits(max_turns=20), child_limits=Limits(), policy=ToolPolicy()
    )

    async def main() -> None:
        if resume:
            await runner.resume(RUN_ID, agent)
        else:
            await runner.run(agent, demo_task("plan"), run_id=RUN_ID)

    trio.run(main)
    store.close()
    os._exit(0)


@pytest.mark.parametrize("wire", WIRES)
def test_plan_killed_after_turn_two_resumes_to_the_same_cost(tmp_path: Path, wire: str) -> None:
    from orchestra.testing import make_sandbox

    fork = multiprocessing.get_context("fork")
    outcomes = {}
    for name, store_cls in (("clean", SQLiteStore), ("crashed", KillAfterTurnTwo)):
        directory = make_sandbox(tmp_path / name)
        first = fork.Process(target=_plan, args=(str(directory), store_cls, False, wire))
        first.start()
        first.join(60)
        if name == "crashed":
            assert first.exitcode == -signal.SIGKILL
            with SQLiteStore(directory / "runs.db") as store:
                restored = store.load(RUN_ID)
            assert (restored.turns, len(restored.messages)) == (2, 6)
            second = fork.Process(target=_plan, args=(str(directory), SQLiteStore, True, wire))
            second.start()
            second.join(60)
            assert second.exitcode == 0
        with SQLiteStore(directory / "runs.db") as store:
            outcomes[name] = store.load(RUN_ID)
    clean, crashed = outcomes["clean"], outcomes["crashed"]
    assert crashed.status is Status.COMPLETED and crashed.answer == clean.answer
    assert crashed.own == clean.own  # same turns, tokens, cost and tool runs (exactly 2)
    assert crashed.own.tool_runs == 2 and crashed.turns == 3
