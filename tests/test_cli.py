"""``orchestra demo`` end to end: real loopback HTTP to the embedded scripted provider."""

from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner

from orchestra._cli import main


def demo(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["demo", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_demo_plan_json():
    code, report = demo("plan")
    assert code == 0
    assert report["status"] == "completed" and report["interruption"] is None
    assert (report["turns"], report["tool_runs"]) == (3, 2)
    prompts = report["per_turn_prompt_tokens"]
    assert len(prompts) == 3 and all(a < b for a, b in itertools.pairwise(prompts))
    assert report["answer"] == "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    for key in (
        "run_id",
        "reason",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "elapsed_ms",
        "dir",
    ):
        assert key in report


@pytest.mark.parametrize(
    ("args", "status", "code"),
    [
        (("runaway", "--max-turns", "5"), "max_turns_exceeded", 3),
        (("runaway", "--max-budget", "0.01"), "budget_exceeded", 4),
        (("permanent",), "failed", 1),
        (("destructive",), "interrupted", 6),
    ],
)
def test_demo_exit_codes(args, status, code):
    exit_code, report = demo(*args)
    assert (report["status"], exit_code) == (status, code)


def test_demo_human_output_names_the_dir(tmp_path):
    result = CliRunner().invoke(main, ["demo", "plan", "--dir", str(tmp_path / "d")])
    assert result.exit_code == 0
    assert "completed" in result.stdout and f"dir: {tmp_path / 'd'}" in result.stdout
    assert (tmp_path / "d" / "errors.log").exists()


def test_demo_writes_a_jsonl_trace(tmp_path):
    trace = tmp_path / "t.jsonl"
    CliRunner().invoke(main, ["demo", "plan", "--trace", str(trace)])
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {"turn", "tool_start", "tool_result", "run_stopped"} <= {e["type"] for e in lines}
    assert len({e["run_id"] for e in lines}) == 1
