"""Claim: a run stops for human approval, survives its process, and resumes exactly once.

Runs ``destructive`` (the model asks to delete access.log) with a SQLite
store: the run stops ``interrupted``/``approval`` and nothing is deleted. A
second Python process (a fresh interpreter) approves and resumes it from the
store: the file is deleted once, the model's answer comes back, the turns and
cost carry over from the first process. Run with ``--reject`` to see the
rejection written into the transcript in words instead.

    python examples/approval_resume.py [--reject]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from orchestra import Limits, OpenAIProvider, Runner, ToolPolicy
from orchestra._demo import demo_agent, demo_task
from orchestra._sqlite import SQLiteStore
from orchestra.testing import make_sandbox, scripted_server

SECOND_PROCESS = """
import sys, trio
from pathlib import Path
from orchestra import Limits, OpenAIProvider, Runner, ToolPolicy
from orchestra._demo import demo_agent
from orchestra._sqlite import SQLiteStore
from orchestra.testing import scripted_server

store_path, directory, run_id, decision = sys.argv[1:]

async def main():
    async with scripted_server() as url:
        runner = Runner(provider=OpenAIProvider(base_url=url, api_key="s"),
                        store=SQLiteStore(store_path))
        if decision == "reject":
            runner.reject(run_id, reason="keep it")
        else:
            runner.approve(run_id)
        agent = demo_agent("destructive", Path(directory), limits=Limits(max_turns=20),
                           child_limits=Limits(), policy=ToolPolicy())
        result = await runner.resume(run_id, agent)
        print(f"process 2: {result.status.value}, turns={result.state.turns}, "
              f"cost=${result.cost_usd:.6f}, answer={result.answer!r}")

trio.run(main)
"""


async def first_process(store: Path, directory: Path) -> str:
    async with scripted_server() as url:
        runner = Runner(
            provider=OpenAIProvider(base_url=url, api_key="s"), store=SQLiteStore(store)
        )
        agent = demo_agent(
            "destructive",
            directory,
            limits=Limits(max_turns=20),
            child_limits=Limits(),
            policy=ToolPolicy(),
        )
        result = await runner.run(agent, demo_task("destructive"))
    waiting = result.state.interruption
    assert waiting is not None
    print(
        f"process 1: {result.status.value}/{waiting.kind.value}: {waiting.tool} "
        f"{waiting.arguments}, turns={result.state.turns}, cost=${result.cost_usd:.6f}"
    )
    return result.run_id


def main() -> None:
    decision = "reject" if "--reject" in sys.argv else "approve"
    work = Path(tempfile.mkdtemp(prefix="approval-"))
    directory, store = make_sandbox(work / "box"), work / "runs.db"
    run_id = trio.run(first_process, store, directory)
    print(f"access.log exists: {(directory / 'access.log').exists()}")
    subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS, str(store), str(directory), run_id, decision],
        check=True,
    )
    print(f"access.log exists: {(directory / 'access.log').exists()}")


if __name__ == "__main__":
    main()
