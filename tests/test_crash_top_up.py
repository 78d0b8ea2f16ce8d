"""A request for more survives ``kill -9`` at its worst moment.

A process runs the ``research_runaway`` tree with ``on_limit="ask"`` and is
SIGKILLed right after the runaway child saved its budget request, before any
ancestor saved its pause (the root is still saved ``running``). Another
process resumes the tree: the child asks again, for the same request (its id
unchanged: nothing was granted), and the tree pauses whole. A grant, from a
third process, lets it go on; nothing paid twice.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import trio

from orchestra import InterruptionKind, Limits, OpenAIProvider, Runner, SQLiteStore, Status
from orchestra.testing import ScriptedTransport, demo_agent, make_sandbox

RUN_ID = "top-up-crash"
ROOT = Limits(max_turns=20, max_budget_usd=0.05, on_limit="ask")
CHILD = Limits(max_turns=8, max_budget_usd=0.004)


class DiesAtTheRequest(SQLiteStore):
    """Dies (SIGKILL) right after saving a run's budget request."""

    def save(self, state: Any, events: Any = (), **fence: Any) -> None:
        super().save(state, events, **fence)
        waiting = state.interruption
        if waiting is not None and waiting.kind is InterruptionKind.BUDGET_REQUEST:
            os.kill(os.getpid(), signal.SIGKILL)


def _child(directory: str, step: str) -> None:
    path = Path(directory)
    store_cls = DiesAtTheRequest if step == "run" else SQLiteStore
    store = store_cls(path / "runs.db")
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=ScriptedTransport())
    runner = Runner(provider=provider, store=store)
    agent = demo_agent("research_runaway", path / "box", limits=ROOT, child_limits=CHILD)

    async def main() -> None:
        if step == "run":
            await runner.run(agent, "Summarise.", run_id=RUN_ID)
        elif step == "grant":
            runner.grant(RUN_ID, usd=0.003)
        else:
            await runner.resume(RUN_ID, agent)

    trio.run(main)
    store.close()
    os._exit(0)


def _fork(directory: Path, step: str) -> int:
    process = multiprocessing.get_context("fork").Process(
        target=_child, args=(str(directory), step)
    )
    process.start()
    process.join(60)
    assert process.exitcode is not None
    return process.exitcode


def test_a_request_killed_before_its_tree_paused_is_asked_again_then_granted(
    tmp_path: Path,
) -> None:
    make_sandbox(tmp_path / "box")
    assert _fork(tmp_path, "run") == -signal.SIGKILL
    with SQLiteStore(tmp_path / "runs.db") as store:
        root = store.load(RUN_ID)
        [asked] = [s for s in store.tree(RUN_ID) if s.interruption is not None]
    assert root.status is Status.RUNNING  # killed before the pause reached it
    request = asked.interruption
    assert request is not None and request.kind is InterruptionKind.BUDGET_REQUEST

    assert _fork(tmp_path, "resume") == 0  # the whole tree pauses, the child on its request
    with SQLiteStore(tmp_path / "runs.db") as store:
        paused = store.load(RUN_ID)
        again = store.load(asked.run_id)
    assert paused.status is Status.INTERRUPTED and paused.interruption is not None
    assert paused.interruption.kind is InterruptionKind.BUDGET_REQUEST
    assert again.interruption is not None and again.interruption.call_id == request.call_id
    assert again.turns == asked.turns  # asked again at once: no call made twice

    for _ in range(4):  # each grant answers what the tree waits on (its other child may ask too)
        assert _fork(tmp_path, "grant") == 0
        assert _fork(tmp_path, "resume") == 0
        with SQLiteStore(tmp_path / "runs.db") as store:
            child, after = store.load(asked.run_id), store.load(RUN_ID)
        if child.turns > asked.turns:
            break
    assert child.turns > asked.turns  # it went on with what was granted
    assert child.limit_raises and child.limit_raises[0].note == "granted $0.003"
    assert child.tree.cost_pico <= child.limits.budget_pico
    assert after.tree.cost_pico <= after.limits.budget_pico
