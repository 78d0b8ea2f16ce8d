"""Claim: Orchestra dedupes only read-only calls; a naive cache that dedupes writes lies.

Runs the ``rotate`` scenario: the scripted model reads access.log twice,
deletes it, writes a fresh one, then deletes that one with the very same call
as before (``delete_file(path="access.log")``) and reports what the tool said.
Three settings:

* no cache: every call runs;
* a naive cache keyed by tool name and arguments, in front of *every* tool
  (what a memoising wrapper does): the second delete is answered from the
  cache, "Deleted access.log.", so the model reports the log deleted while it
  is still on disk;
* Orchestra's ``ToolPolicy(dedupe=True)``: only tools declared
  ``read_only=True`` are answered from the transcript, so the repeated read is
  saved and both deletes run.

Prints per setting the tool runs by kind, whether access.log is left on
disk, and whether the model's answer matches the disk. Exits 1 unless
Orchestra's gate ran every write and its answer is true.

    python examples/write_gate.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from orchestra import Agent, Limits, OpenAIProvider, Runner, RunResult, Tool, ToolPolicy, tool
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Rotate logs as asked."
SETTINGS = ("no cache", "naive cache (all)", "orchestra dedupe")


def file_tools(root: Path, runs: Counter[str]) -> tuple[Tool, ...]:
    """Read, write and delete files in ``root``, counting every real run by tool."""

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a text file.

        Args:
            path: the file's name.
        """
        runs["read_file"] += 1
        return (root / path).read_text(encoding="utf-8")

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a text file (replacing it).

        Args:
            path: the file's name.
            text: what to write.
        """
        runs["write_file"] += 1
        (root / path).write_text(text, encoding="utf-8")
        return f"Wrote {path}."

    @tool
    def delete_file(path: str) -> str:
        """Delete a file (no approval in this example: see examples/approval.py).

        Args:
            path: the file's name.
        """
        runs["delete_file"] += 1
        (root / path).unlink()
        return f"Deleted {path}."

    return (read_file, write_file, delete_file)


def naive_cache(tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
    """Every tool memoised on its name and arguments, writes included."""
    cache: dict[str, Any] = {}

    def memo(t: Tool) -> Tool:
        def cached(**kwargs: Any) -> Any:
            key = t.name + json.dumps(kwargs, sort_keys=True)
            if key not in cache:
                cache[key] = t.function(**kwargs)
            return cache[key]

        return attrs.evolve(t, function=cached)

    return tuple(memo(t) for t in tools)


@attrs.frozen
class Row:
    setting: str
    result: RunResult
    runs: Counter[str]
    log_left: bool


async def rotate(work: Path) -> list[Row]:
    rows = []
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        runner = Runner(provider=provider)
        for setting in SETTINGS:
            root = make_sandbox(work / setting.split()[0])
            runs: Counter[str] = Counter()
            tools = file_tools(root, runs)
            wrap: Callable[[tuple[Tool, ...]], tuple[Tool, ...]] = (
                naive_cache if setting.startswith("naive") else tuple
            )
            agent = Agent(
                name="assistant",
                model="rotate",
                instructions=INSTRUCTIONS,
                tools=wrap(tools),
                limits=Limits(max_turns=10),
                policy=ToolPolicy(dedupe=setting == "orchestra dedupe"),
            )
            result = await runner.run(agent, "Rotate access.log twice.")
            rows.append(Row(setting, result, runs, (root / "access.log").exists()))
        await provider.aclose()
    return rows


def says_deleted(result: RunResult) -> bool:
    return (result.answer or "").endswith("it is deleted.")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="write-gate-") as tmp:
        rows = trio.run(rotate, Path(tmp))
    print("rotate: read access.log x2, delete, write anew, delete (same call again)")
    print(
        f"{'setting':<18} {'reads':>5} {'writes':>6} {'deletes':>7}  "
        f"{'access.log':<10}  {'answer says':<11}  true"
    )
    for r in rows:
        left = "ON DISK" if r.log_left else "deleted"
        said = "deleted" if says_deleted(r.result) else "not deleted"
        true = "yes" if says_deleted(r.result) != r.log_left else "NO: lie"
        print(
            f"{r.setting:<18} {r.runs['read_file']:>5} {r.runs['write_file']:>6} "
            f"{r.runs['delete_file']:>7}  {left:<10}  {said:<11}  {true}"
        )
    gate = rows[-1]
    held = (
        gate.runs == Counter(read_file=1, write_file=1, delete_file=2)
        and not gate.log_left
        and says_deleted(gate.result)
    )
    if not held:
        print("CLAIM FAILED: Orchestra's gate skipped a write or its answer is false")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
