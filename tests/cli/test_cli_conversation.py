"""`orchestra demo|run --continue RUN_ID`: the next message of a conversation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from orchestra._cli.main import main
from orchestra._scripted.scenarios import FOLLOW_UP_ANSWER, PLAN_ANSWER
from orchestra._views.exits import OPERATIONAL


def demo(*args: str, code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["demo", *args, "--json"])
    assert result.exit_code == code, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_demo_plan_continues_the_earlier_run_and_completes(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", "--store", store)
    assert first["answer"] == PLAN_ANSWER and first["continues"] is None
    assert first["conversation_id"] == first["run_id"]
    second = demo("plan", "--continue", first["run_id"], "--store", store)
    assert second["status"] == "completed" and second["answer"] == FOLLOW_UP_ANSWER
    assert second["continues"] == first["run_id"] != second["run_id"]
    assert second["conversation_id"] == first["run_id"]
    assert second["turns"] == 1  # its own turns: limits count per message
    spent = first["tree_cost_usd"] + second["tree_cost_usd"]
    assert abs(second["conversation_cost_usd"] - spent) < 1e-9
    shown = CliRunner().invoke(main, ["show", second["run_id"], "--store", store])
    text = " ".join(shown.stdout.split())
    assert f"continues: {first['run_id']} (conversation {first['run_id']}" in text


def test_continuing_a_run_that_is_not_there_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    demo("plan", "--store", store)
    result = CliRunner().invoke(main, ["demo", "plan", "--continue", "run_nope", "--store", store])
    assert result.exit_code == OPERATIONAL, result.output
    assert result.stderr.strip() == f"error: no run id starts with 'run_nope' in {store}"


def test_continuing_into_a_missing_store_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    commands = [
        ["demo", "plan", "--dir", str(tmp_path / "sandbox")],
        ["run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dir", "."],
    ]
    for command in commands:
        args = [*command, "--continue", "run_nope", "--store", str(store)]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == OPERATIONAL, result.output
        assert result.stderr.strip().startswith(f"error: no run store at {store}:")
        assert list(tmp_path.iterdir()) == []


# -- a conversation keeps its sandbox -----------------------------------------------------------


def test_a_continuation_keeps_its_conversations_sandbox_and_says_so(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", "--store", store)
    args = ["demo", "plan", "--continue", first["run_id"][:12], "--store", store, "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dir"] == first["dir"]  # not a new temporary one
    said = f"sandbox: {first['dir']} (as in {first['run_id'][:12]})"
    assert said in result.stderr.splitlines()


def test_a_continuation_whose_sandbox_is_gone_says_where_it_works_now(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", "--store", store, "--dir", str(tmp_path / "gone"))
    shutil.rmtree(first["dir"])
    result = CliRunner().invoke(
        main, ["demo", "plan", "--continue", first["run_id"], "--store", store, "--json"]
    )
    second = json.loads(result.stdout)
    assert result.exit_code == 0 and second["dir"] != first["dir"]
    said = f"sandbox: {second['dir']} ({first['run_id'][:12]}'s {first['dir']} is gone)"
    assert said in result.stderr.splitlines()


def test_run_continues_in_the_conversations_sandbox(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", "--store", store)
    url = "http://127.0.0.1:9/v1"  # nothing listens: the run fails, its report says its dir
    args = ["run", "and?", "--base-url", url, "--model", "m", "--continue", first["run_id"]]
    result = CliRunner().invoke(main, [*args, "--store", store, "--json"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["dir"] == first["dir"]
    assert result.stderr.startswith(f"sandbox: {first['dir']} (as in {first['run_id'][:12]}; ")
    given = CliRunner().invoke(main, [*args, "--dir", str(tmp_path), "--store", store])
    assert given.stderr.startswith(
        f"sandbox: {tmp_path} (--dir; {first['run_id'][:12]}'s was {first['dir']}; tools: "
    )


# -- runs shows a conversation together ---------------------------------------------------------


def test_runs_lists_a_conversations_runs_together_marking_what_each_continues(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "runs.db")
    first = demo("plan", "--store", store)
    other = demo("plan", "--store", store)
    second = demo("plan", "--continue", first["run_id"], "--store", store)
    listed = CliRunner().invoke(main, ["runs", "--store", store], env={"COLUMNS": "80"})
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        "run",
        second["run_id"][:12],
        "↳",
        first["run_id"][:12],
        other["run_id"][:12],
    ]
    assert lines[2] == f"  ↳ continues {first['run_id'][:12]}"
    shown = CliRunner().invoke(main, ["runs", "--store", store, "--json"]).stdout
    assert [(r["continues"], r["conversation_id"]) for r in json.loads(shown)] == [
        (first["run_id"], first["run_id"]),  # newest first, as stored
        (None, other["run_id"]),
        (None, first["run_id"]),
    ]
