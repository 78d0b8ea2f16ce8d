"""kill -9 during an MCP write, then resume in a new process: the write is in doubt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "mcp", reason="the mcp extra is not installed (pip install 'orchestra-trees[mcp]')"
)

from orchestra import InterruptionKind, SQLiteStore, Status

FILES = Path(__file__).parents[2] / "examples" / "mcp_files.py"

CHILD = """
import sys, trio
from orchestra import Agent, Limits, Runner, SQLiteStore
from orchestra.mcp import StdioServer, open_tools
from orchestra.testing import DONE, FakeProvider, tool_calls

files, directory, db, resume = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "resume"
checked = sys.argv[5] == "checked"
note = tool_calls(("append_note", {"text": "paid invoice 42", "seconds": 30}))

async def main():
    reconcile = {"append_note": "note_written"} if checked else {}
    server = StdioServer(command=sys.executable, args=(files, directory), reconcile=reconcile)
    async with open_tools(server) as tools:
        limits = Limits(max_turns=5)
        agent = Agent(name="clerk", model="m", instructions="", tools=tools, limits=limits)
        runner = Runner(provider=FakeProvider(note, DONE), store=SQLiteStore(db))
        if resume:
            result = await runner.resume("run_mcp", agent)
        else:
            result = await runner.run(agent, "note it", run_id="run_mcp")
        print(result.status.value, result.state.reason)

trio.run(main)
"""


def child(tmp_path: Path, phase: str, check: str = "unchecked") -> subprocess.Popen[str]:
    args = [sys.executable, "-c", CHILD, str(FILES), str(tmp_path), str(tmp_path / "runs.db")]
    return subprocess.Popen(
        [*args, phase, check], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def started(db: Path) -> bool:
    if not db.exists():
        return False
    with SQLiteStore(db) as store:
        try:
            return bool(store.load("run_mcp").started)
        except Exception:
            return False


def test_kill_9_during_an_mcp_write_then_resume_asks_a_human(tmp_path: Path) -> None:
    killed_during_the_write(tmp_path, "unchecked")
    second = child(tmp_path, "resume")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.startswith("interrupted"), out
    with SQLiteStore(tmp_path / "runs.db") as store:
        state = store.load("run_mcp")
    assert state.status is Status.INTERRUPTED
    assert state.interruption is not None
    assert state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert state.interruption.tool == "append_note"
    assert not (tmp_path / "notes.txt").exists()  # it never ran twice, nor once by itself


def killed_during_the_write(tmp_path: Path, check: str) -> None:
    first = child(tmp_path, "run", check)
    deadline = time.monotonic() + 60
    while not started(tmp_path / "runs.db"):  # the write's started marker is saved
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the process and the server it started
    first.communicate()


@pytest.mark.parametrize("happened", [False, True], ids=["not-done", "done"])
def test_with_a_companion_check_the_resume_asks_the_server_not_a_human(
    tmp_path: Path, happened: bool
) -> None:
    killed_during_the_write(tmp_path, "checked")
    if happened:  # the server wrote the line before it died with the process
        (tmp_path / "notes.txt").write_text("paid invoice 42\n")
    second = child(tmp_path, "resume", "checked")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert out.startswith("completed"), out  # no human asked
    assert (tmp_path / "notes.txt").read_text().splitlines() == ["paid invoice 42"]  # once
