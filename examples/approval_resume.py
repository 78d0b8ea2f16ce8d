"""Claim: a run stops for human approval, survives its process, and resumes exactly once.

Runs ``destructive`` (the model asks to delete access.log) with a SQLite
store: the run stops ``interrupted``/``approval`` and nothing is deleted. A
second Python process (a fresh interpreter) approves and resumes it from the
store: the file is deleted once, the model's answer comes back, the turns and
cost carry over from the first process. Run with ``--reject`` to see the
rejection written into the transcript in words instead.

Exits 1 unless the file is deleted exactly when approved.

    python examples/approval_resume.py [--reject]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, SQLiteStore, catalog
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."


def destructive_agent(directory: Path) -> Agent:
    return Agent(
        name="assistant",
        model="destructive",
        instructions=INSTRUCTIONS,
        tools=catalog(directory),
        limits=Limits(max_turns=20),
    )


async def first_process(store: Path, directory: Path) -> str:
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        with SQLiteStore(store) as saved:
            runner = Runner(provider=provider, store=saved)
            result = await runner.run(destructive_agent(directory), "The disk is full.")
        await provider.aclose()
    waiting = result.state.interruption
    if waiting is None:
        raise SystemExit(f"CLAIM FAILED: the run ended {result.status.value}, waiting for nobody")
    print(
        f"process 1: {result.status.value}/{waiting.kind.value}, turns={result.state.turns}, "
        f"cost=${result.cost_usd:.6f}\n  waits on: {waiting.tool} {waiting.arguments}"
    )
    return result.run_id


async def second_process(store: Path, directory: Path, run_id: str, decision: str) -> None:
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        with SQLiteStore(store) as saved:
            runner = Runner(provider=provider, store=saved)
            if decision == "reject":
                runner.reject(run_id, reason="keep it")
            else:
                runner.approve(run_id)
            result = await runner.resume(run_id, destructive_agent(directory))
        await provider.aclose()
    print(
        f"process 2: {result.status.value}, turns={result.state.turns}, cost=${result.cost_usd:.6f}"
    )
    print(
        textwrap.fill(f"answer: {result.answer}", 80, initial_indent="  ", subsequent_indent="    ")
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="approval-resume-") as tmp:
        return approve_or_reject(Path(tmp), "reject" if "--reject" in sys.argv else "approve")


def approve_or_reject(work: Path, decision: str) -> int:
    directory, store = make_sandbox(work / "box"), work / "runs.db"
    run_id = trio.run(first_process, store, directory)
    before = (directory / "access.log").exists()
    print(f"access.log exists: {before}")
    second = [sys.executable, __file__, "--second", str(store), str(directory), run_id, decision]
    subprocess.run(second, check=True)
    after = (directory / "access.log").exists()
    print(f"access.log exists: {after}")
    if not before or after is (decision == "approve"):
        print("CLAIM FAILED: access.log was not kept until, and deleted only on, approval")
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--second"]:
        store, directory, run_id, decision = sys.argv[2:6]
        trio.run(second_process, Path(store), Path(directory), run_id, decision)
    else:
        sys.exit(main())
