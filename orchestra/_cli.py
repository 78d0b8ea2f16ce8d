"""The ``orchestra`` command line."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import click
import trio

from ._agent import Agent, ToolPolicy, detailed_errors, generic_errors
from ._catalog import catalog
from ._demo import SCENARIOS, demo_agent, demo_task
from ._events import Event, JsonlSink, fanout
from ._exceptions import OrchestraError
from ._provider import OpenAIProvider
from ._result import RunResult
from ._runner import Runner
from ._state import Limits, Status

__all__ = ["main"]

EXIT_CODES = {
    Status.COMPLETED: 0,
    Status.FAILED: 1,
    Status.MAX_TURNS_EXCEEDED: 3,
    Status.BUDGET_EXCEEDED: 4,
    Status.DEADLINE_EXCEEDED: 5,
    Status.INTERRUPTED: 6,
    Status.RUNNING: 7,
}


class TurnLog:
    """Collects each run's per-turn prompt tokens from the event stream."""

    def __init__(self) -> None:
        self.prompts: dict[str, list[int]] = defaultdict(list)

    def __call__(self, event: Event) -> None:
        if event.type == "turn":
            self.prompts[event.run_id].append(int(event.data["prompt_tokens"]))


def _sandbox(directory: str | None) -> Path:
    from .testing import make_sandbox

    if directory is None:
        return make_sandbox(tempfile.mkdtemp(prefix="orchestra-demo-"))
    path = Path(directory)
    return path if path.is_dir() and any(path.iterdir()) else make_sandbox(path)


def _policy(dedupe: bool, errors: str, fatal_errors: bool) -> ToolPolicy:
    wording = generic_errors if errors == "generic" else detailed_errors
    return ToolPolicy(dedupe=dedupe, error_text=wording, fatal_errors=fatal_errors)


def _report(
    result: RunResult, turns: TurnLog, elapsed_ms: float, directory: Path | None
) -> dict[str, Any]:
    def add_turns(summary: dict[str, Any]) -> dict[str, Any]:
        summary["per_turn_prompt_tokens"] = turns.prompts.get(summary["run_id"], [])
        summary["children"] = [add_turns(c) for c in summary["children"]]
        return summary

    report = add_turns(result.summary())
    report["elapsed_ms"] = round(elapsed_ms, 1)
    report["dir"] = str(directory) if directory else None
    return report


def _print_human(report: dict[str, Any], depth: int = 0) -> None:
    pad = "  " * depth + ("└─ " if depth else "")
    why = f" ({report['reason']})" if report["status"] != "completed" and report["reason"] else ""
    line = (
        f"{pad}{report['agent']} {report['run_id']} {report['status']}{why}"
        f" | turns={report['turns']} tools={report['tool_runs']}"
        f" in={report['prompt_tokens']} out={report['completion_tokens']}"
        f" cost=${report['cost_usd']:.6f} tree=${report['tree_cost_usd']:.6f}"
    )
    if depth == 0:
        line += f" ms={report['elapsed_ms']:.0f}"
    click.echo(line)
    click.echo(f"{'  ' * depth}   per-turn prompt tokens: {report['per_turn_prompt_tokens']}")
    if report["answer"]:
        click.echo(f"{'  ' * depth}   answer: {report['answer']}")
    for child in report["children"]:
        _print_human(child, depth + 1)


def _emit(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
        return
    _print_human(report)
    if report.get("dir"):
        click.echo(f"dir: {report['dir']}")


async def _run_demo(
    agent: Agent, task: str, trace: str | None, turns: TurnLog
) -> tuple[RunResult, float]:
    from .testing import scripted_server

    sink = JsonlSink(path=trace) if trace else None
    async with scripted_server() as base_url:
        provider = OpenAIProvider(base_url=base_url, api_key="scripted")
        runner = Runner(provider=provider, sink=fanout(turns, sink))
        started = trio.current_time()
        result = await runner.run(agent, task)
        elapsed = (trio.current_time() - started) * 1000
        await provider.aclose()
    if sink:
        sink.close()
    return result, elapsed


@click.group()
def main() -> None:
    """Orchestra: LLM agents as governed trees."""


def _limits(max_turns: int | None, max_budget: float | None, timeout: float | None) -> Limits:
    return Limits(max_turns=max_turns, max_budget_usd=max_budget, timeout_s=timeout)


@main.command()
@click.argument("scenario", type=click.Choice(SCENARIOS))
@click.option("--max-turns", type=click.IntRange(min=0), default=20, show_default=True)
@click.option(
    "--max-budget", type=click.FloatRange(min=0), default=None, help="USD for the whole tree."
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Seconds for the whole tree."
)
@click.option("--child-budget", type=click.FloatRange(min=0), default=0.05, show_default=True)
@click.option("--child-turns", type=click.IntRange(min=0), default=8, show_default=True)
@click.option("--children", type=click.IntRange(min=1), default=None, help="slow_tree: how many.")
@click.option("--dedupe", is_flag=True, help="Answer repeated read-only calls from the transcript.")
@click.option(
    "--errors", type=click.Choice(["detailed", "generic"]), default="detailed", show_default=True
)
@click.option("--fatal-errors", is_flag=True, help="Any tool error fails the run.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
@click.option(
    "--trace", type=click.Path(dir_okay=False), default=None, help="Append JSONL events here."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def demo(
    scenario: str,
    max_turns: int,
    max_budget: float | None,
    timeout: float | None,
    child_budget: float,
    child_turns: int,
    children: int | None,
    dedupe: bool,
    errors: str,
    fatal_errors: bool,
    directory: str | None,
    trace: str | None,
    as_json: bool,
) -> None:
    """Run SCENARIO against the embedded scripted provider."""
    sandbox = _sandbox(directory)
    agent = demo_agent(
        scenario,
        sandbox,
        limits=_limits(max_turns, max_budget, timeout),
        child_limits=Limits(max_turns=child_turns, max_budget_usd=child_budget),
        policy=_policy(dedupe, errors, fatal_errors),
    )
    turns = TurnLog()
    result, elapsed = trio.run(_run_demo, agent, demo_task(scenario, children), trace, turns)
    _emit(_report(result, turns, elapsed, sandbox), as_json)
    sys.exit(EXIT_CODES[result.status])


@main.command("run")
@click.argument("task")
@click.option("--base-url", envvar=["OPENAI_BASE_URL", "LLM_BASE_URL"], required=True)
@click.option("--api-key", envvar="OPENAI_API_KEY", default="")
@click.option("--model", required=True)
@click.option("--max-turns", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--max-budget", type=click.FloatRange(min=0), default=None)
@click.option("--timeout", type=click.FloatRange(min=0), default=None)
@click.option("--dir", "directory", type=click.Path(file_okay=False, exists=True), default=".")
@click.option("--trace", type=click.Path(dir_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True)
def run_command(
    task: str,
    base_url: str,
    api_key: str,
    model: str,
    max_turns: int,
    max_budget: float | None,
    timeout: float | None,
    directory: str,
    trace: str | None,
    as_json: bool,
) -> None:
    """Run TASK with the file catalog against any OpenAI-compatible endpoint."""
    agent = Agent(
        name="assistant",
        model=model,
        tools=catalog(directory),
        limits=_limits(max_turns, max_budget, timeout),
    )
    turns = TurnLog()

    async def go() -> tuple[RunResult, float]:
        sink = JsonlSink(path=trace) if trace else None
        provider = OpenAIProvider(base_url=base_url, api_key=api_key)
        started = trio.current_time()
        result = await Runner(provider=provider, sink=fanout(turns, sink)).run(agent, task)
        await provider.aclose()
        return result, (trio.current_time() - started) * 1000

    result, elapsed = trio.run(go)
    _emit(_report(result, turns, elapsed, Path(directory)), as_json)
    sys.exit(EXIT_CODES[result.status])


@main.command("serve-scripted")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
def serve_scripted_command(host: str, port: int, latency_ms: float) -> None:
    """Serve the scripted provider over HTTP until interrupted."""
    from .testing import serve_scripted

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_scripted(
                    host=host, port=port, latency=latency_ms / 1000, task_status=task_status
                )
            )
            click.echo(f"scripted provider at {url}", err=True)

    with contextlib.suppress(KeyboardInterrupt):
        trio.run(serve)


def run() -> None:
    """Entry point that turns our errors into a clean message and exit code 2."""
    try:
        main(standalone_mode=True)
    except OrchestraError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
