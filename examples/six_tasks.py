"""The design's six-task table, with a real local model behind the same endpoint.

Six tasks over the sandbox's three files (errors.log, access.log, notes.txt),
each a root run of the chapter's catalog with limits, against any
OpenAI-compatible endpoint: by default the local llama.cpp server of
``tools/local_model.py`` (``$ORCHESTRA_LOCAL_MODEL_URL``, else
http://127.0.0.1:8090/v1). Every run is saved in a store and traced as JSON
lines (both in a fresh temporary directory unless ``--store``/``--trace``).
Prints per task the turns, tool runs, wall milliseconds and the answer (or
how the run stopped), then the totals and the mean turn time::

    python tools/local_model.py start --size 1.5b
    python examples/six_tasks.py

Answers are the model's; what the table shows about the harness is that
every run ends with a status, its turns and tool runs counted and its spend
within its budget.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import attrs
import httpx
import trio

from orchestra import (
    Agent,
    JsonlSink,
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
from orchestra.testing import make_sandbox

TASKS = (
    "Which file mentions a timeout?",
    "How many files are in the directory?",
    "Read notes.txt and tell me what it says.",
    "List the files and then read each one.",
    "Which file is the largest?",
    "Is there a file about rotating logs?",
)
DEFAULT_URL = "http://127.0.0.1:8090/v1"
WIDTH = 80


@attrs.frozen
class Row:
    task: str
    result: RunResult
    wall_ms: float


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    default_url = os.environ.get("ORCHESTRA_LOCAL_MODEL_URL") or DEFAULT_URL
    parser.add_argument("--base-url", default=default_url, help=f"default {default_url}")
    parser.add_argument("--model", default="local")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-budget", type=float, default=0.05, help="USD per task")
    parser.add_argument("--max-tokens", type=int, default=512, help="per reply")
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument(
        "--recover-tool-calls", action="store_true", help="read calls written as JSON text"
    )
    parser.add_argument("--dir", type=Path, default=None, help="sandbox (default: a new one)")
    parser.add_argument("--store", type=Path, default=None, help="SQLite store")
    parser.add_argument("--trace", type=Path, default=None, help="JSONL events")
    return parser.parse_args()


def agent(args: argparse.Namespace, directory: Path) -> Agent:
    return Agent(
        name="assistant",
        model=args.model,
        instructions=INSTRUCTIONS,
        tools=catalog(directory),
        limits=Limits(max_turns=args.max_turns, max_budget_usd=args.max_budget),
        max_tokens=args.max_tokens,
    )


async def run_all(args: argparse.Namespace, work: Path) -> list[Row]:
    directory = args.dir or make_sandbox(work / "sandbox")
    store = SQLiteStore(args.store or work / "runs.db")
    trace = JsonlSink(path=str(args.trace or work / "trace.jsonl"))
    provider = OpenAIProvider(
        base_url=args.base_url,
        api_key="local",
        timeout=args.request_timeout,
        recover_tool_calls=args.recover_tool_calls,
    )
    prices = PriceTable(models={args.model: Price()})  # the design's $2 / $12 per million
    runner = Runner(provider=provider, store=store, sink=trace, prices=prices)
    rows = []
    try:
        for task in TASKS:
            started = trio.current_time()
            result = await runner.run(agent(args, directory), task)
            rows.append(Row(task, result, (trio.current_time() - started) * 1000))
            print(line(rows[-1]), flush=True)
    finally:
        await provider.aclose()
        trace.close()
        store.close()
    return rows


def outcome(result: RunResult) -> str:
    """The answer on one line, or how the run stopped."""
    state = result.state
    if state.status is Status.COMPLETED:
        return f'-> "{" ".join((state.answer or "").split())}"'
    return f"[{state.status.value}: {state.reason}]"


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


HEADER = f"{'turns':>5} {'tools':>5} {'wall ms':>9}  task / answer"
INDENT = " " * 23


def line(row: Row) -> str:
    """One task: its counts and the task, then the answer, each cut to WIDTH columns."""
    state = row.result.state
    counts = f"{state.turns:>5} {state.own.tool_runs:>5} {row.wall_ms:>9,.0f}  "
    return cut(counts + row.task, WIDTH) + "\n" + cut(INDENT + outcome(row.result), WIDTH)


def totals(rows: list[Row]) -> str:
    turns = sum(r.result.state.turns for r in rows)
    tools = sum(r.result.state.own.tool_runs for r in rows)
    wall = sum(r.wall_ms for r in rows)
    cost = sum(r.result.tree_cost_usd for r in rows)
    mean = wall / turns if turns else 0.0
    return (
        f"TOTAL turns={turns}  toolruns={tools}  wall={wall:,.0f}ms  mean turn={mean:,.0f}ms\n"
        f"      cost=${cost:.6f} (the server's own token counts at $2/$12 per million)"
    )


def check_server(url: str) -> None:
    """Exit with a clear message unless ``{url}/models`` answers."""
    try:
        httpx.get(f"{url.rstrip('/')}/models", timeout=5.0).raise_for_status()
    except httpx.HTTPError as exc:
        raise SystemExit(
            f"no model server at {url} ({exc}); start one with "
            "`python tools/local_model.py start` or pass --base-url"
        ) from None


def main() -> None:
    args = arguments()
    check_server(args.base_url)
    with tempfile.TemporaryDirectory(prefix="six-tasks-") as tmp:
        print(
            f"{args.model} at {args.base_url}; limits: {args.max_turns} turns, "
            f"${args.max_budget} per task"
        )
        print(HEADER)
        rows = trio.run(run_all, args, Path(tmp))
        print(totals(rows))
        for row in rows:
            if row.result.tree_cost_usd > args.max_budget:
                raise SystemExit(f"over budget: {row.task}")


if __name__ == "__main__":
    main()
