"""The CLI's money options, each in a fresh process as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestra.testing import make_sandbox

TASK = "Look into the logs and tell me what went wrong."


def orchestra(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "orchestra", *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def run(url: str, tmp_path: Path, model: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    sandbox = make_sandbox(tmp_path / "sandbox")
    store = tmp_path / "runs.db"
    return orchestra(
        *("run", TASK, "--base-url", url, "--model", model, "--dir", str(sandbox)),
        *("--store", str(store), "--api-key", "k", *extra),
    )


@pytest.mark.parametrize("budget", [0.001, 0.004, 0.011])
def test_a_server_counting_60_percent_more_never_gets_past_the_budget(server_url, tmp_path, budget):
    code, report, _ = run(
        server_url, tmp_path, "runaway+prompt160", "--max-budget", str(budget), "--max-turns", "200"
    )
    assert (code, report["status"]) == (4, "budget_exceeded")
    assert report["tree_cost_usd"] <= budget


def test_an_unknown_model_is_priced_by_assumption_and_said_so(server_url, tmp_path):
    code, report, stderr = run(server_url, tmp_path, "plan")
    assert code == 0 and report["status"] == "completed"
    assert stderr.count("warning: no price for model 'plan'") == 1
    assert "$2.00 in / $12.00 out" in stderr


def test_prices_from_the_command_line_are_used_and_silence_the_warning(server_url, tmp_path):
    _, assumed, _ = run(server_url, tmp_path / "a", "plan")
    code, priced, stderr = run(
        server_url, tmp_path / "b", "plan", "--price-in", "4", "--price-out", "24"
    )
    assert code == 0 and "warning" not in stderr
    assert priced["cost_usd"] == pytest.approx(2 * assumed["cost_usd"])


def test_a_zero_price_under_a_usd_budget_is_said(server_url, tmp_path):
    _, _, stderr = run(
        server_url, tmp_path, "plan", "--price-in", "0", "--price-out", "0", "--max-budget", "1"
    )
    assert "zero price" in stderr


def test_a_token_budget_bounds_the_run_and_can_be_raised_on_resume(tmp_path):
    store = str(tmp_path / "runs.db")
    code, report, _ = orchestra("demo", "runaway", "--max-tokens-budget", "8000", "--store", store)
    assert (code, report["status"]) == (4, "budget_exceeded")
    assert report["reason"].startswith("token budget")
    assert report["tree_tokens"] <= 8000 and report["budget_tokens"] == 8000
    code, resumed, _ = orchestra(
        "resume", report["run_id"], "--max-tokens-budget", "20000", "--store", store
    )
    assert (code, resumed["status"]) == (4, "budget_exceeded")
    assert resumed["budget_tokens"] == 20000
    assert report["tree_tokens"] < resumed["tree_tokens"] <= 20000


def test_max_tokens_and_request_timeout_reach_the_provider(server_url, tmp_path):
    trace = tmp_path / "t.jsonl"
    code, report, _ = run(
        *(server_url, tmp_path, "plan"),
        *("--max-tokens", "40", "--request-timeout", "30", "--trace", str(trace)),
    )
    assert code == 0 and report["status"] == "completed"
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    asked = [e["max_tokens"] for e in events if e["type"] == "model_request"]
    assert asked and all(m <= 40 for m in asked)


def test_a_request_timeout_must_be_positive(server_url, tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, "-m", "orchestra", "run", TASK, "--base-url", server_url),
            *("--model", "plan", "--request-timeout", "0"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--request-timeout" in done.stderr
