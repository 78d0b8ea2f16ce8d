"""Against a real local model (llama.cpp, ``tools/local_model.py start``): the harness's guarantees.

Skipped unless ``ORCHESTRA_LOCAL_MODEL_URL`` names the server's base URL
(``.ci/run`` starts one). Every run has a step cap and small replies, and
only what the harness guarantees is asserted, never the model's answer: a
real status, a well-formed transcript, turns and cost accounted from the
server's own usage, a budget never exceeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestra import (
    Agent,
    Event,
    Limits,
    OpenAIProvider,
    Price,
    PriceTable,
    Runner,
    RunResult,
    SQLiteStore,
    Status,
    catalog,
)
from orchestra._recipes.demo import INSTRUCTIONS

URL = os.environ.get("ORCHESTRA_LOCAL_MODEL_URL", "")
MODEL = os.environ.get("ORCHESTRA_LOCAL_MODEL", "local")
TIMEOUT_S = 600.0
"""One reply on two busy CPU cores can take minutes."""
PRICES = PriceTable(models={MODEL: Price(input_per_million=2.0, output_per_million=12.0)})
ENDED = {
    Status.COMPLETED,
    Status.MAX_TURNS_EXCEEDED,
    Status.BUDGET_EXCEEDED,
    Status.INTERRUPTED,
    Status.FAILED,
}

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        not URL,
        reason="no local model: set ORCHESTRA_LOCAL_MODEL_URL (python tools/local_model.py start)",
    ),
]


@pytest.fixture
async def provider() -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(base_url=URL, api_key="local", timeout=TIMEOUT_S)
    yield p
    await p.aclose()


def agent(directory: Path, limits: Limits, max_tokens: int = 96) -> Agent:
    return Agent(
        name="assistant",
        model=MODEL,
        instructions=INSTRUCTIONS,
        tools=catalog(directory),
        limits=limits,
        max_tokens=max_tokens,
    )


async def run(
    provider: OpenAIProvider, directory: Path, task: str, limits: Limits
) -> tuple[RunResult, list[Event]]:
    events: list[Event] = []
    runner = Runner(provider=provider, sink=events.append, prices=PRICES)
    return await runner.run(agent(directory, limits), task), events


def turn_events(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "turn"]


def provider_spend(events: list[Event]) -> float:
    """USD by the server's own usage of every reply (not our token counts)."""
    turns = turn_events(events)
    tokens = sum(2.0 * t["prompt_tokens"] + 12.0 * t["completion_tokens"] for t in turns)
    return float(tokens) / 1e6


def assert_well_formed(messages: list[dict[str, Any]]) -> None:
    """Every tool call answered once by a tool message after it; ids unique; no stray result."""
    call_ids = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    assert len(call_ids) == len(set(call_ids)), call_ids
    assert all(call_ids)
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(answered) == sorted(call_ids)
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            later = [m.get("tool_call_id") for m in messages[i + 1 :]]
            assert call["id"] in later


def assert_accounted(result: RunResult, events: list[Event]) -> None:
    state = result.state
    turns = turn_events(events)
    assistants = [m for m in state.messages if m["role"] == "assistant"]
    assert state.own == state.tree  # no children
    assert state.own.model_calls == state.turns == len(turns) == len(assistants)
    ran = [m for m in state.messages if m["role"] == "tool"]
    assert state.own.tool_runs == sum(not m["content"].startswith("Error: not run.") for m in ran)
    assert all(t["usage_reported"] for t in turns)
    assert state.own.prompt_tokens == sum(t["prompt_tokens"] for t in turns)
    assert state.own.completion_tokens == sum(t["completion_tokens"] for t in turns)
    if turns:
        assert state.own.prompt_tokens > 0
        assert result.tree_cost_usd == pytest.approx(provider_spend(events), abs=1e-9)


async def test_a_run_ends_with_a_real_status_and_an_accounted_transcript(
    provider: OpenAIProvider, sandbox: Path
) -> None:
    result, events = await run(
        provider, sandbox, "Which file mentions a timeout?", Limits(max_turns=4)
    )
    assert result.status in ENDED, result.state.reason
    assert result.state.turns >= 1
    assert_well_formed(result.state.messages)
    assert_accounted(result, events)
    assert [e.type for e in events].count("run_stopped") == 1


async def test_a_multi_step_task_stays_within_its_step_cap(
    provider: OpenAIProvider, sandbox: Path
) -> None:
    result, events = await run(
        provider, sandbox, "List the files and then read each one.", Limits(max_turns=3)
    )
    assert result.status in ENDED, result.state.reason
    assert 1 <= result.state.turns <= 3
    if result.status is Status.MAX_TURNS_EXCEEDED:
        assert result.state.turns == 3
    assert_well_formed(result.state.messages)
    assert_accounted(result, events)


@pytest.mark.parametrize("budget", [0.0005, 0.002, 0.004])
async def test_spend_by_the_servers_own_usage_never_exceeds_a_low_budget(
    provider: OpenAIProvider, sandbox: Path, budget: float
) -> None:
    """The server counts our prompts about 60 % higher; the reservation must cover it."""
    limits = Limits(max_turns=6, max_budget_usd=budget)
    result, events = await run(provider, sandbox, "Read every file, one by one.", limits)
    assert result.status in ENDED, result.state.reason
    assert provider_spend(events) <= budget
    assert result.tree_cost_usd <= budget
    assert_well_formed(result.state.messages)
    assert_accounted(result, events)


def test_orchestra_run_reports_status_turns_tool_runs_and_cost(
    sandbox: Path, tmp_path: Path
) -> None:
    store, trace = tmp_path / "runs.db", tmp_path / "trace.jsonl"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "orchestra", "run", "Which file mentions a timeout?"),
            *("--base-url", URL, "--model", MODEL, "--max-turns", "4", "--json"),
            *("--max-tokens", "96", "--dir", str(sandbox), "--store", str(store)),
            *("--trace", str(trace), "--max-budget", "0.05"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=4 * TIMEOUT_S,
    )
    report = json.loads(done.stdout)
    assert report["status"] != "running" and done.returncode != 7, done.stderr
    assert report["turns"] >= 1 and report["tool_runs"] >= 0
    assert 0 < report["cost_usd"] == report["tree_cost_usd"] <= 0.05
    assert len(report["per_turn_prompt_tokens"]) == report["turns"]
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert lines[-1]["type"] == "run_stopped" and lines[-1]["status"] == report["status"]
    saved = SQLiteStore(store)
    try:
        state = saved.load(report["run_id"])
    finally:
        saved.close()
    assert state.status.value == report["status"]
    assert_well_formed(state.messages)


REPO = Path(__file__).resolve().parent.parent


def test_five_of_the_six_tasks_are_answered_right_and_none_copies_the_harness() -> None:
    """``examples/six_tasks.py``: each task an ``orchestra run`` as typed, judged by
    the files' facts; the first token of a warm server within 5 s (median)."""
    out = subprocess.run(
        [sys.executable, "examples/six_tasks.py", "--json", "--base-url", URL, "--model", MODEL],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    table = json.loads(out.stdout)
    summary, rows = table["summary"], table["rows"]
    said = [(r["task"], r["right"], r["answer"]) for r in rows]
    assert summary["right"] >= 5, said
    assert summary["copies_harness"] == [] and summary["over_budget"] == [], said
    # the median: one turn of a loaded machine (CI runs beside nothing, but a
    # developer's machine may not) must not decide it
    assert summary["first_token_warm_median_s"] < 5.0, summary


def test_a_root_on_the_local_model_delegates_within_every_budget_and_answers_right() -> None:
    """``examples/local_tree.py``: the root calls ``research``, the child's answer is
    its tool result, every run within its budget by the server's counts, and the
    root's answer has the sandbox's facts (worker 7, 30000 ms)."""
    env = {**os.environ, "ORCHESTRA_LOCAL_MODEL_URL": URL}
    out = subprocess.run(
        [sys.executable, "examples/local_tree.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    verdict = out.stdout.strip().splitlines()[-1]
    said = out.stdout + out.stderr[-2000:]
    assert verdict == "OK: delegated, within budgets, answered right", said
    assert out.returncode == 0


async def test_a_structured_answer_fits_its_schema_through_response_format(
    provider: OpenAIProvider,
) -> None:
    """llama.cpp decodes under the response_format's schema: the answer fits it the
    first time and is built into the class (the values are the model's)."""
    from orchestra._recipes.demo import Incident

    line = "2026-11-30T04:12:09Z ERROR worker 7 timed out after 30000 ms"
    extractor = Agent(
        name="extractor",
        model=MODEL,
        instructions="Answer with the facts the user's log line states, as JSON.",
        output_type=Incident,
        limits=Limits(max_turns=3),
        max_tokens=128,
    )
    result = await Runner(provider=provider, prices=PRICES).run(
        extractor, f"Which worker timed out, after how many ms? The log says: {line}"
    )
    assert result.status is Status.COMPLETED, result.state.reason
    assert isinstance(result.output, Incident)
    assert isinstance(result.output.worker, int) and isinstance(result.output.timeout_ms, int)
    assert result.state.turns == 1  # no correction was needed
