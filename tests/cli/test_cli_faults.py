"""``orchestra demo SCENARIO+FAULT``: faults on the embedded provider, and resume after them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from orchestra._cli.main import main

ORCHESTRA = [sys.executable, "-c", "from orchestra._cli.main import run; run()"]


def demo(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["demo", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def cli(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [*ORCHESTRA, *args, "--json"], capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout)


def test_429x3_completes_after_three_retries_in_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    code, report = demo("plan+429x3", "--trace", str(trace))
    assert (code, report["status"], report["turns"]) == (0, "completed", 3)
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    retried = [e for e in events if e["type"] == "model_retry"]
    assert [(e["attempt"], e["status"]) for e in retried] == [(2, 429), (3, 429), (4, 429)]
    assert report["model_retries"] == 3


def test_401_fails_with_exit_1_naming_it() -> None:
    code, report = demo("plan+401")
    assert (code, report["status"]) == (1, "failed")
    assert "401" in report["reason"] and report["turns"] == 0
    assert report["model_retries"] == 0


def test_an_unknown_modifier_is_a_usage_error_listing_the_choices() -> None:
    result = CliRunner().invoke(main, ["demo", "plan+teapot"])
    assert result.exit_code == 2
    assert "'teapot'" in result.output and "hang, garbage, truncated" in result.output
    result = CliRunner().invoke(main, ["demo", "plann+500"])
    assert result.exit_code == 2 and "choose one of plan, reasoning, runaway" in result.output


def test_help_lists_each_scenario_on_its_line_and_the_fault_syntax() -> None:
    from orchestra._recipes.demo import SCENARIOS
    from orchestra.testing import SCENARIOS as SCRIPTS

    result = CliRunner().invoke(main, ["demo", "--help"], terminal_width=80)
    lines = result.output.splitlines()
    assert "Usage: main demo [OPTIONS] SCENARIO[+FAULT[xN]...]" in lines
    assert max(map(len, lines)) <= 80
    for name in SCENARIOS:  # a whole name, then the start of what it does
        first_words = " ".join(SCRIPTS[name].description.split()[:3])
        assert any(line.split()[:1] == [name] and first_words in line for line in lines), name
    words = " ".join(result.output.split())
    assert "hang, garbage, truncated, reset, nousage or promptPCT" in words


def test_500x20_stops_interrupted_and_resume_in_a_new_process_completes(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    code, stopped = cli("demo", "plan+500x20", "--store", store)
    assert (code, stopped["status"]) == (6, "interrupted")
    assert stopped["interruption"]["kind"] == "provider_unavailable"
    assert "500" in stopped["reason"]
    code, done = cli("resume", stopped["run_id"], "--store", store)  # the outage is over
    assert (code, done["status"], done["turns"]) == (0, "completed", 3)
    assert done["answer"].startswith("errors.log mentions a timeout")
