"""Claim: a run killed with ``kill -9`` resumes in a new process and costs exactly the same.

Runs the ``survey`` scenario (the scripted model lists the files, reads each
of the three in turn, then answers: 5 turns, 4 tool runs) in a child process
with a SQLite store, the scripted provider taking 0.2 s per reply. This
process watches the store and sends SIGKILL as soon as turn 2 and its tool
result are saved (so the child dies inside its third model call, which is
never paid). A second child process resumes the run from the store. Every
tool run appends the pid of the process that ran it to a log, so the tool
runs of each process are counted outside Orchestra.

Prints per process the turns, tool runs and cost, their sum, and the same
task run once without a crash. Exits 1 unless the resumed run completed with
the same turns, tool runs (no tool ran twice) and cost, to the pico-dollar,
as the uncrashed one.

    python examples/crash_resume.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from orchestra import (
    Agent,
    Limits,
    OpenAIProvider,
    Runner,
    RunNotFound,
    RunState,
    SQLiteStore,
    Status,
    Tool,
    catalog,
    tool,
)
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
TASK = "Look through every file and tell me what went wrong."
RUN_ID = "crash-resume-demo"
LATENCY = 0.2
"""Seconds per model reply in the child processes: room to kill one mid-call."""
KILL_AFTER_TURN = 2
WAIT_S = 30.0


def logged_tools(directory: Path, log: Path) -> tuple[Tool, ...]:
    """``list_files`` and ``read_file`` of the catalog, each run logged with our pid."""
    tools = {t.name: t for t in catalog(directory)}

    def note(name: str) -> None:
        with log.open("a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {name}\n")

    @tool(read_only=True)
    def list_files() -> str:
        """List the files in the working directory, one name per line."""
        note("list_files")
        return str(tools["list_files"].function())

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file from the working directory.

        Args:
            path: the file's name, as list_files gives it.
        """
        note("read_file")
        return str(tools["read_file"].function(path=path))

    return (list_files, read_file)


def survey_agent(directory: Path, log: Path) -> Agent:
    return Agent(
        name="assistant",
        model="survey",
        instructions=INSTRUCTIONS,
        tools=logged_tools(directory, log),
        limits=Limits(max_turns=10),
    )


def facts(state: RunState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "turns": state.turns,
        "tool_runs": state.own.tool_runs,
        "cost_pico": state.tree.cost_pico,
        "answer": state.answer,
    }


# -- the child processes --------------------------------------------------------------


async def child(mode: str, store_path: str, directory: Path, log: Path) -> None:
    """Run (``run``) or resume (``resume``) the survey; print its facts as JSON."""
    async with scripted_server(latency=LATENCY) as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        with SQLiteStore(store_path) as store:
            runner = Runner(provider=provider, store=store)
            agent = survey_agent(directory, log)
            if mode == "run":
                result = await runner.run(agent, TASK, run_id=RUN_ID)
            else:
                result = await runner.resume(RUN_ID, agent)
        await provider.aclose()
    print(json.dumps(facts(result.state)), flush=True)


def spawn(mode: str, store: Path, directory: Path, log: Path, stdout: int) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, "--child", mode, str(store), str(directory), str(log)]
    return subprocess.Popen(argv, stdout=stdout, text=True)


# -- this process ---------------------------------------------------------------------


def saved(store: SQLiteStore) -> RunState | None:
    try:
        return store.load(RUN_ID)
    except RunNotFound:
        return None


def crash(store_path: Path, directory: Path, log: Path) -> tuple[RunState, int]:
    """Start the run in a child; kill -9 it once turn 2's tool result is saved."""
    proc = spawn("run", store_path, directory, log, subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT_S
    with SQLiteStore(store_path) as store:
        while True:
            state = saved(store)
            if state and state.turns >= KILL_AFTER_TURN and state.own.tool_runs >= KILL_AFTER_TURN:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("CLAIM FAILED: the run ended before it could be killed")
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()  # reaped: the store sees its lease holder is dead
        return store.load(RUN_ID), proc.pid


def resume(store_path: Path, directory: Path, log: Path) -> tuple[dict[str, Any], int]:
    proc = spawn("resume", store_path, directory, log, subprocess.PIPE)
    out, _ = proc.communicate(timeout=WAIT_S)
    if proc.returncode != 0:
        raise SystemExit(f"CLAIM FAILED: the resume exited {proc.returncode}")
    return json.loads(out.splitlines()[-1]), proc.pid


async def uncrashed(directory: Path, log: Path) -> dict[str, Any]:
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        result = await Runner(provider=provider).run(survey_agent(directory, log), TASK)
        await provider.aclose()
    return facts(result.state)


def usd(pico: int) -> str:
    return f"{pico / 1e12:.6f}"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="crash-resume-") as tmp:
        return crash_and_resume(Path(tmp))


def crash_and_resume(work: Path) -> int:
    directory, store, log = make_sandbox(work / "box"), work / "runs.db", work / "tool_runs.log"
    at_kill, pid1 = crash(store, directory, log)
    final, pid2 = resume(store, directory, log)
    ran = Counter(line.split()[0] for line in log.read_text().splitlines())
    reference = trio.run(uncrashed, make_sandbox(work / "box2"), work / "uncrashed.log")
    print("survey (5 turns, 4 tool runs), kill -9 after turn 2, resumed in a new process")
    print(f"{'':<21} {'pid':>7} {'turns':>5} {'tool runs':>9} {'cost USD':>10}  status")
    p1_cost, p2_cost = at_kill.tree.cost_pico, final["cost_pico"] - at_kill.tree.cost_pico
    print(
        f"{'process 1 (killed)':<21} {pid1:>7} {at_kill.turns:>5} {ran[str(pid1)]:>9} "
        f"{usd(p1_cost):>10}  {at_kill.status.value} (saved)"
    )
    p2_turns = final["turns"] - at_kill.turns
    print(
        f"{'process 2 (resumed)':<21} {pid2:>7} {p2_turns:>5} {ran[str(pid2)]:>9} "
        f"{usd(p2_cost):>10}  {final['status']}"
    )
    both = ran[str(pid1)] + ran[str(pid2)]
    print(
        f"{'both':<21} {'':>7} {final['turns']:>5} {both:>9} {usd(final['cost_pico']):>10}  "
        f"(run says {final['tool_runs']} tool runs)"
    )
    print(
        f"{'uncrashed run':<21} {'':>7} {reference['turns']:>5} {reference['tool_runs']:>9} "
        f"{usd(reference['cost_pico']):>10}  {reference['status']}"
    )
    same_cost = final["cost_pico"] == reference["cost_pico"]
    print(f"final cost identical to the uncrashed run: {'yes' if same_cost else 'NO'}")
    held = (
        same_cost
        and at_kill.status is Status.RUNNING
        and final["status"] == reference["status"] == Status.COMPLETED.value
        and final["turns"] == reference["turns"]
        and both == final["tool_runs"] == reference["tool_runs"]
        and final["answer"] == reference["answer"]
    )
    if not held:
        print("CLAIM FAILED: the resumed run differs from the uncrashed one")
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        mode, store_path, directory, log = sys.argv[2:6]
        trio.run(child, mode, store_path, Path(directory), Path(log))
    else:
        sys.exit(main())
