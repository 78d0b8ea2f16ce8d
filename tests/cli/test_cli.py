"""``orchestra demo`` end to end: real loopback HTTP to the embedded scripted provider."""

from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner

from orchestra._cli.main import main


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
        "command_elapsed_ms",
        "run_elapsed_ms",
        "deduplicated_calls",
        "dir",
    ):
        assert key in report
    assert 0 < report["run_elapsed_ms"] <= report["command_elapsed_ms"]


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


def test_runs_show_and_trace_read_the_store():
    _, report = demo("research")
    listed = json.loads(CliRunner().invoke(main, ["runs", "--json"]).stdout)
    assert listed[0]["run_id"] == report["run_id"]
    shown = json.loads(CliRunner().invoke(main, ["show", report["run_id"][:10], "--json"]).stdout)
    assert shown["tree_cost_usd"] == report["tree_cost_usd"]
    assert len(shown["children"]) == 3
    events = json.loads(CliRunner().invoke(main, ["trace", report["run_id"], "--json"]).stdout)
    assert {e["run_id"] for e in events} == {
        report["run_id"],
        *(c["run_id"] for c in shown["children"]),
    }
    assert events[-1]["type"] == "run_stopped"


def test_research_tree_cost_adds_up_to_the_micro_dollar():
    code, report = demo("research")
    assert code == 0
    children = sum(c["tree_cost_usd"] for c in report["children"])
    assert abs(report["tree_cost_usd"] - (report["cost_usd"] + children)) < 1e-6


def test_research_runaway_child_budget():
    budgets = ("--max-budget", "0.02", "--child-budget", "0.005")
    code, report = demo("research_runaway", *budgets, "--wind-down", "0")
    assert code == 0 and report["status"] == "completed"
    runaway = [c for c in report["children"] if c["status"] == "budget_exceeded"]
    assert len(runaway) == 1 and runaway[0]["tree_cost_usd"] <= 0.005
    assert runaway[0]["answer"] is None and not runaway[0]["answer_partial"]
    for node in [report, *report["children"]]:
        assert node["budget_usd"] is None or node["tree_cost_usd"] <= node["budget_usd"]


@pytest.mark.parametrize("child_budget", ["0.004", "0.05"])
def test_with_wind_down_the_runaway_child_hands_back_a_partial_answer(child_budget):
    code, report = demo("research_runaway", "--child-budget", child_budget)
    assert code == 0 and report["status"] == "completed"
    stopped = [c for c in report["children"] if c["status"] != "completed"]
    assert stopped
    for child in stopped:
        assert child["status"] in ("budget_exceeded", "max_turns_exceeded")
        answer = child["answer"]
        wound = answer.startswith("From what I found")  # a final call (its last turn)
        handed = answer.startswith("[Written by Orchestra, not the model: budget nearly spent")
        assert child["answer_partial"] and (wound or handed)
        assert child["tree_cost_usd"] <= child["budget_usd"]
        assert child["answer"] in report["answer"]


def test_unknown_run_is_a_clear_error():
    demo("plan")
    result = CliRunner().invoke(main, ["show", "run_nope"])
    assert result.exit_code == 8
    assert result.stderr.startswith("error: ") and "run_nope" in result.stderr
