"""``--on-limit ask`` and ``orchestra grant`` at the command line: the paused child,
its request printed with the commands that answer it, one grant applied once,
a refusal ending it with its answer so far, each decision under ``show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from orchestra._cli.main import main
from orchestra._stores.sqlite import SQLiteStore

INTERRUPTED = 6


def run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    return result


def paused(store: str) -> dict[str, Any]:
    asked = run(
        "demo", "research_runaway", "--child-budget", "0.004", "--on-limit", "ask",
        "--store", store, "--json", code=INTERRUPTED,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(asked.stdout)
    return report


def test_a_child_asks_and_one_grant_applies_once(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    report = paused(store)
    request = report["interruption"]
    assert request["kind"] == "budget_request" and request["estimate_usd"] > 0
    root = report["run_id"]
    said = run("grant", root, "--usd", "0.003", "--store", store).stdout
    assert f"(call {request['call_id']} in run {request['run_id']})" in said
    assert f"next: orchestra resume {root}" in said
    run("grant", root, "--usd", "0.003", "--store", store)  # again: nothing written
    with SQLiteStore(store) as saved:
        child = saved.load(request["run_id"])
    assert [r.note for r in child.limit_raises] == ["granted $0.003"]
    refused = run("grant", root, "--usd", "0.01", "--store", store, code=8)
    assert "already granted otherwise" in refused.stderr
    shown = run("show", root, "--store", store).stdout
    assert "approved  more budget" in " ".join(shown.split("\n"))


def test_the_request_is_printed_with_what_answers_it(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    asked = run(
        "demo", "research_runaway", "--child-budget", "0.004", "--on-limit", "ask",
        "--store", store, code=INTERRUPTED,
    ).stdout  # fmt: skip
    flat = " ".join(asked.split())
    assert "asks for more: run" in flat and "answer so far:" in flat
    assert "grant: orchestra grant run_" in flat and "reject: orchestra reject run_" in flat


def test_a_refusal_ends_the_child_with_its_answer_so_far(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    report = paused(store)
    root, request = report["run_id"], report["interruption"]
    run("reject", root, "--reason", "enough", "--store", store)
    done = json.loads(run("resume", root, "--store", store, "--json").stdout)
    assert done["status"] == "completed"
    child = next(c for c in done["children"] if c["run_id"] == request["run_id"])
    assert child["status"] == "budget_exceeded" and child["answer_partial"]
    assert "more was refused (enough)" in child["reason"]
