"""MCP servers' tools, governed like our own: a real server process over stdio and HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

pytest.importorskip(
    "mcp", reason="the mcp extra is not installed (pip install 'orchestra-trees[mcp]')"
)

from orchestra import (
    Agent,
    ConfigError,
    InterruptionKind,
    Limits,
    Runner,
    Status,
    ToolPolicy,
    tool,
)
from orchestra.mcp import HttpServer, StdioServer, open_tools, parse_server
from orchestra.testing import DONE, FakeProvider, make_sandbox, tool_calls

ROOT = Path(__file__).parents[2]
FILES = ROOT / "examples" / "mcp_files.py"
DYING = Path(__file__).with_name("dying_server.py")


def files_server(directory: Path) -> StdioServer:
    return StdioServer(command=sys.executable, args=(str(FILES), str(directory)))


def agent(tools: Any, **policy: Any) -> Agent:
    return Agent(
        name="mcp-user",
        model="m",
        instructions="Use the tools.",
        tools=tools,
        limits=Limits(max_turns=10),
        policy=ToolPolicy(**policy),
    )


def tool_results(result: Any) -> list[str]:
    return [m["content"] for m in result.state.messages if m.get("role") == "tool"]


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    return make_sandbox(tmp_path / "box")


async def test_tools_are_discovered_with_flags_from_their_hints(sandbox: Path) -> None:
    async with open_tools(files_server(sandbox)) as tools:
        flags = {t.name: (t.read_only, t.needs_approval, t.idempotent) for t in tools}
        schema = next(t for t in tools if t.name == "read_file").parameters
    assert flags == {
        "list_files": (True, False, True),
        "read_file": (True, False, True),
        "scan_archive": (True, False, True),
        "delete_file": (False, True, False),
        "append_note": (False, False, False),
        "note_written": (True, False, True),
        "touch": (False, False, True),
    }
    assert schema["required"] == ["path"]


async def test_a_call_and_an_error_result_reach_the_model_in_words(sandbox: Path) -> None:
    reads = tool_calls(("read_file", {"path": "notes.txt"}), ("read_file", {"path": "nope.txt"}))
    async with open_tools(files_server(sandbox)) as tools:
        result = await Runner(provider=FakeProvider(reads, DONE)).run(agent(tools), "read")
    found, missing = tool_results(result)
    assert found == (sandbox / "notes.txt").read_text()
    assert missing.startswith("Error:") and "no such file: nope.txt" in missing
    assert result.status is Status.COMPLETED


async def test_a_destructive_tool_waits_for_approval(sandbox: Path) -> None:
    delete = tool_calls(("delete_file", {"path": "access.log"}))
    async with open_tools(files_server(sandbox)) as tools:
        runner = Runner(provider=FakeProvider(delete, DONE))
        waiting = await runner.run(agent(tools), "free space")
        assert waiting.state.interruption.kind is InterruptionKind.APPROVAL
        assert (sandbox / "access.log").exists()
        runner.approve(waiting.run_id)
        done = await runner.resume(waiting.run_id, agent(tools))
    assert done.status is Status.COMPLETED
    assert tool_results(done) == ["Deleted access.log."]
    assert not (sandbox / "access.log").exists()


async def test_one_cancel_stops_children_inside_slow_mcp_calls_as_fast_as_our_own(
    sandbox: Path,
) -> None:
    async with open_tools(files_server(sandbox)) as mcp_tools:
        mcp_ms = min([await _stop_ms(mcp_tools) for _ in range(3)])
    own_ms = min([await _stop_ms((_own_scan,)) for _ in range(3)])
    print(f"tree stop: MCP tools {mcp_ms:.1f} ms, our own tool {own_ms:.1f} ms")
    assert mcp_ms < max(3 * own_ms, own_ms + 20), (mcp_ms, own_ms)


@tool(read_only=True)
async def _own_scan(query: str, seconds: float = 3.0) -> str:
    """Scan the archive (our own slow tool, beside the MCP one of the same name).

    Args:
        query: what to look for.
        seconds: how long it takes.
    """
    await trio.sleep(seconds)
    return "done"


async def _stop_ms(tools: Any) -> float:
    """ms from one cancel to the stop of a 6-run tree, each child inside a 600 s scan."""
    scan = tool_calls(("scan_archive", {"query": "timeout", "seconds": 600}))
    ask = tool_calls(*(("research", {"question": f"q{i}"}) for i in range(5)))
    tools = tuple(attrs.evolve(t, name="scan_archive") if t is _own_scan else t for t in tools)
    root = Agent(
        name="root",
        model="root",
        instructions="Delegate.",
        tools=(agent(tools).as_tool(name="research", description="Ask a researcher."),),
        limits=Limits(max_turns=30),
    )
    scans = _Counter(5)
    provider = _ByModel(root=FakeProvider(ask, DONE), m=FakeProvider(scan, DONE))
    runner = Runner(provider=provider, sink=scans)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, root, "research")
        with trio.fail_after(30):
            await scans.all_started.wait()
        await trio.sleep(0.3)  # the scans are in flight (on the server, for MCP)
        t0 = time.perf_counter()
        handle.cancel("Stop")
        result = await handle.wait()
        stop_ms = (time.perf_counter() - t0) * 1000
    runs = result.walk()
    assert len(runs) == 6
    assert {r.status for r in runs} == {Status.INTERRUPTED}
    return stop_ms


class _Counter:
    """Notes when ``n`` scans have started."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.all_started = trio.Event()

    def __call__(self, event: Any) -> None:
        if event.type == "tool_start" and event.data["tool"] == "scan_archive":
            self.n -= 1
            if self.n == 0:
                self.all_started.set()


class _ByModel:
    """Routes each request to the fake of its model."""

    def __init__(self, **fakes: FakeProvider) -> None:
        self.fakes = fakes

    async def complete(self, request: Any) -> Any:
        return await self.fakes[request.model].complete(request)


async def test_a_server_dying_in_a_read_is_an_error_the_model_sees(tmp_path: Path) -> None:
    dying = StdioServer(command=sys.executable, args=(str(DYING),))
    async with open_tools(dying) as tools:
        result = await Runner(provider=FakeProvider(tool_calls(("look", {})), DONE)).run(
            agent(tools), "look"
        )
    assert result.status is Status.COMPLETED
    (text,) = tool_results(result)
    assert text.startswith("Error:") and "stopped answering during look" in text


async def test_a_server_dying_in_a_write_leaves_it_in_doubt(tmp_path: Path) -> None:
    dying = StdioServer(command=sys.executable, args=(str(DYING),))
    charge = tool_calls(("charge_card", {"amount": 10}))
    async with open_tools(dying) as tools:
        result = await Runner(provider=FakeProvider(charge, DONE)).run(agent(tools), "pay")
    assert result.status is Status.INTERRUPTED
    assert result.state.interruption.kind is InterruptionKind.UNKNOWN_OUTCOME
    assert "charge_card failed mid-call" in result.state.reason
    assert "may or may not have taken effect" in result.state.reason


async def test_a_server_that_cannot_start_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot connect"):
        async with open_tools(parse_server("/nonexistent/mcp-server --flag")):
            pass


def test_servers_parse_from_one_command_line_value() -> None:
    assert parse_server("python srv.py 'a dir'") == StdioServer(
        command="python", args=("srv.py", "a dir")
    )
    assert parse_server("http://127.0.0.1:8931/mcp") == HttpServer(url="http://127.0.0.1:8931/mcp")
    with pytest.raises(ConfigError, match="must not be empty"):
        parse_server("  ")
    with pytest.raises(ConfigError, match="No closing quotation"):
        parse_server("python 'srv.py")


@pytest.fixture
def http_server(sandbox: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, str(FILES), str(sandbox), "--http", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        process.kill()
        process.wait()


# mcp's HTTP client (httpx2/httpcore2) leaves async generators for trio to finalize
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_tools_over_streamable_http(http_server: str, sandbox: Path) -> None:
    reads = tool_calls(("list_files", {}))
    async with open_tools(HttpServer(url=http_server)) as tools:
        result = await Runner(provider=FakeProvider(reads, DONE)).run(agent(tools), "list")
    assert tool_results(result) == ["access.log\nerrors.log\nnotes.txt"]
