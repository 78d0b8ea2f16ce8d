"""The command line with MCP servers: `orchestra mcp list`, `run --mcp`, `demo --mcp`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "mcp", reason="the mcp extra is not installed (pip install 'orchestra-trees[mcp]')"
)

from orchestra import SQLiteStore
from orchestra.testing import make_sandbox

FILES = Path(__file__).parents[2] / "examples" / "mcp_files.py"
OTHER_ERROR = "2026-12-03 02:00:01 ERROR worker 9 timed out after 12345 ms on the mcp side"


def orchestra(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "orchestra", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture
def mcp_dir(tmp_path: Path) -> Path:
    """A directory served over MCP whose errors.log differs from the sandbox's."""
    directory = make_sandbox(tmp_path / "served")
    (directory / "errors.log").write_text(OTHER_ERROR + "\n")
    return directory


def read_results(store: Path, stdout: str) -> str:
    """The tool results of the run the command printed, as one text."""
    with SQLiteStore(store) as runs:
        state = runs.load(json.loads(stdout)["run_id"])
    return "\n".join(m["content"] for m in state.messages if m["role"] == "tool")


def server(directory: Path) -> str:
    return f"{sys.executable} {FILES} {directory}"


def test_mcp_list_shows_each_tool_with_the_flags_derived_from_its_hints(mcp_dir: Path) -> None:
    listed = orchestra("mcp", "list", server(mcp_dir))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("list_files  (read-only)")
    assert any(line.startswith("delete_file  (write, needs approval)") for line in lines)
    assert any(line.startswith("touch  (write, idempotent)") for line in lines)
    as_json = json.loads(orchestra("mcp", "list", server(mcp_dir), "--json").stdout)
    assert {t["name"]: t["read_only"] for t in as_json}["read_file"] is True


def test_a_server_that_dies_at_start_has_its_own_error_said(tmp_path: Path) -> None:
    dying = tmp_path / "dying.py"
    dying.write_text(
        "import sys\n"
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('FileNotFoundError: /srv/data: no such directory', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    failed = orchestra(
        "demo", "plan", "--store", str(tmp_path / "r.db"), "--mcp", f"{sys.executable} {dying}"
    )
    assert failed.returncode == 2
    (line,) = failed.stderr.strip().splitlines()  # no "run ... started": no run was made
    assert line.endswith(
        "(it said: Traceback (most recent call last): | "
        "FileNotFoundError: /srv/data: no such directory)"
    )
    with SQLiteStore(tmp_path / "r.db") as store:
        assert store.list_runs() == []


def test_a_server_that_cannot_start_is_one_line_and_exit_2() -> None:
    failed = orchestra("mcp", "list", "/nonexistent/mcp-server")
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines() == [
        "error: MCP server /nonexistent/mcp-server: cannot connect: "
        "[Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    ]


def test_a_demo_scenario_uses_the_servers_tools(mcp_dir: Path, tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path / "sandbox")
    ran = orchestra(
        "demo", "plan", "--mcp", server(mcp_dir), "--dir", str(sandbox), "--json",
        "--store", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "mcp: list_files, read_file" in ran.stderr
    assert OTHER_ERROR in read_results(tmp_path / "runs.db", ran.stdout)  # over MCP, not --dir


def test_run_uses_the_servers_tools_against_an_endpoint(
    mcp_dir: Path, tmp_path: Path, server_url: str
) -> None:
    ran = orchestra(
        "run", "Why did the nightly job fail?", "--base-url", server_url, "--model", "plan",
        "--mcp", server(mcp_dir), "--dir", str(tmp_path), "--json",
        "--store", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert OTHER_ERROR in read_results(tmp_path / "runs.db", ran.stdout)


def test_an_unreachable_mcp_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/mcp"
    failed = orchestra("mcp", "list", url)
    assert failed.returncode == 2
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith(f"error: MCP server {url}: cannot connect: ")
    assert "Traceback" not in failed.stderr


def test_mcp_reconcile_pairs_are_saved_and_checked(mcp_dir: Path, tmp_path: Path) -> None:
    from orchestra._recipes.recipe import Recipe

    sandbox = make_sandbox(tmp_path / "sandbox")
    ran = orchestra(
        "demo", "plan", "--mcp", server(mcp_dir), "--mcp-reconcile", "append_note=note_written",
        "--dir", str(sandbox), "--json", "--store", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    with SQLiteStore(tmp_path / "runs.db") as store:
        recipe = Recipe.of(store.load(json.loads(ran.stdout)["run_id"]))
    assert recipe.mcp_reconcile == ("append_note=note_written",)  # a resume asks the same
    for pair, says in (
        ("append_note", "--mcp-reconcile takes WRITE=CHECK"),
        ("append_note=nope", "reconcile names nope, which it does not offer"),
    ):
        failed = orchestra("demo", "plan", "--mcp", server(mcp_dir), "--mcp-reconcile", pair)
        assert failed.returncode == 2 and "Traceback" not in failed.stderr
        assert says in failed.stderr, failed.stderr
