"""A run id as ``runs`` and ``show`` print it (``run_75d1410d``, a prefix of the
whole id) is accepted by every command that takes a run id; a prefix that names
no run, or several, is one line and exit code 8."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestra._cli.main import main
from orchestra._views.exits import OPERATIONAL

COMPLETED, FAILED, INTERRUPTED = 0, 1, 6


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def cli(*args: str, code: int = COMPLETED) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    return result


def demo(scenario: str, store: str, *args: str, code: int = COMPLETED) -> dict[str, Any]:
    said = cli("demo", scenario, *args, "--store", store, "--json", code=code).stdout
    report: dict[str, Any] = json.loads(said)
    return report


def short(run_id: str) -> str:
    """The id as ``runs`` and ``show`` print it."""
    return run_id[:12]


COMMANDS = {
    "show": ["show", "{}"],
    "trace": ["trace", "{}"],
    "cancel": ["cancel", "{}"],
    "approve": ["approve", "{}"],
    "reject": ["reject", "{}"],
    "grant": ["grant", "{}", "--usd", "1"],
    "resume": ["resume", "{}"],
    "demo --continue": ["demo", "plan", "--continue", "{}"],
    "run --continue": ["run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                       "--continue", "{}"],
}  # fmt: skip


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding two runs (so that ``run_`` names both)."""
    store = str(tmp_path_factory.mktemp("short") / "runs.db")
    demo("plan", store)
    demo("plan", store)
    return store


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_a_prefix_of_no_run_is_one_line_and_exit_code_8(two_runs: str, command: list[str]) -> None:
    args = [arg.format("run_0000") for arg in command]
    result = cli(*args, "--store", two_runs, code=OPERATIONAL)
    assert result.stderr == f"error: no run id starts with 'run_0000' in {two_runs}\n"


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_a_prefix_of_several_runs_is_one_line_and_exit_code_8(
    two_runs: str, command: list[str]
) -> None:
    args = [arg.format("run_") for arg in command]
    result = cli(*args, "--store", two_runs, code=OPERATIONAL)
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: run id prefix 'run_' is ambiguous: run_")
    assert line.endswith("(give more characters)")


def test_demo_and_run_continue_a_run_named_as_runs_prints_it(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", store)
    listed = cli("runs", "--store", store).stdout
    assert short(first["run_id"]) in listed and first["run_id"] not in listed
    second = demo("plan", store, "--continue", short(first["run_id"]))
    assert second["continues"] == first["run_id"] and second["status"] == "completed"
    third = json.loads(
        cli(
            "run", "and then?", "--base-url", closed_url(), "--model", "m", "--store", store,
            "--continue", short(second["run_id"]), "--json", code=FAILED,
        ).stdout
    )  # fmt: skip
    assert third["continues"] == second["run_id"]  # continued; then its endpoint was away
    assert third["conversation_id"] == first["run_id"]


def test_the_commands_that_act_on_a_run_take_its_short_id(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    approved = short(demo("destructive", store, code=INTERRUPTED)["run_id"])
    rejected = short(demo("destructive", store, code=INTERRUPTED)["run_id"])
    cli("approve", approved, "--store", store)
    cli("reject", rejected, "--reason", "keep it", "--store", store)
    for run_id in (approved, rejected):
        resumed = json.loads(cli("resume", run_id, "--store", store, "--json").stdout)
        assert resumed["status"] == "completed" and resumed["run_id"].startswith(run_id)
        events = cli("trace", run_id, "--store", store).stdout.splitlines()
        assert {json.loads(e)["root_id"] for e in events} == {resumed["run_id"]}
        ended = cli("cancel", run_id, "--store", store, code=OPERATIONAL).stderr
        assert ended == f"error: run {resumed['run_id']} is not running: it ended completed\n"
