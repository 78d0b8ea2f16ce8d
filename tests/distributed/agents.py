"""Agents the distributed tests submit by reference (workers import this module).

- :func:`journal_tree`: the ``slow_tree`` parent asks N researchers at once;
  each researcher's ``scan_archive`` is here an *idempotent write*: it takes
  ``seconds`` (3 s in the script), then appends its idempotency key to the
  journal file ``$ORCHESTRA_TEST_JOURNAL`` unless the key is there already.
  A worker killed mid-write leaves the call in doubt; the worker that takes
  the run up runs it again with the same key, so the journal gets each
  call's effect exactly once.
- :func:`scan_tree`: ``[tree N] [slow]``: N children, each in a 600 s scan
  (a tree to cancel).
- :func:`research_tree`: the demo's ``research`` tree, on the workers' model
  endpoint (a slowly streaming one shows live events).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from orchestra import Agent, Limits, Reconciled, RunContext, ToolContext, catalog, tool
from orchestra.testing import scan_archive as canned_scan

SANDBOX = Path(os.environ.get("ORCHESTRA_TEST_SANDBOX", "."))


@tool(idempotent=True)
async def scan_archive(query: str, ctx: ToolContext, seconds: float = 3.0) -> str:
    """Scan the archive and journal the finding (a slow write).

    Args:
        query: the text to look for.
        seconds: how long the scan takes.
    """
    journal = trio.Path(os.environ["ORCHESTRA_TEST_JOURNAL"])
    key = ctx.idempotency_key
    if await journal.exists() and key in (await journal.read_text()).split():
        return f"Journaled {query!r} already."
    await trio.sleep(seconds)
    await _held_at_gate()
    async with await journal.open("a") as f:
        await f.write(f"{key}\n")
    return f"Scanned for {query!r}: 1 match in errors.log; journaled."


async def _held_at_gate() -> None:
    """Wait while the file ``$ORCHESTRA_TEST_GATE`` names exists: a test that must
    see every write in flight at once holds them there, however slowly a loaded
    machine starts them, and lets them go by removing it."""
    gate = os.environ.get("ORCHESTRA_TEST_GATE")
    # Another process opens it: no trio.Event can cross that boundary, so poll.
    while gate and await trio.Path(gate).exists():  # noqa: ASYNC110
        await trio.sleep(0.05)


def _journaled(arguments: Any, key: str) -> Reconciled:
    """Whether a plain scan's effect is in the journal (its reconcile hook)."""
    journal = Path(os.environ["ORCHESTRA_TEST_JOURNAL"])
    if journal.exists() and key in journal.read_text().split():
        return Reconciled.done(f"Scanned for {arguments['query']!r}: journaled (found).")
    return Reconciled.not_done()


@tool(name="scan_archive", reconcile=_journaled)
async def reconciled_scan(query: str, ctx: ToolContext, seconds: float = 3.0) -> str:
    """Scan the archive and journal the finding (a slow plain write whose outcome
    the journal tells).

    Args:
        query: the text to look for.
        seconds: how long the scan takes.
    """
    await trio.sleep(seconds)
    await _held_at_gate()
    async with await trio.Path(os.environ["ORCHESTRA_TEST_JOURNAL"]).open("a") as f:
        await f.write(f"{ctx.idempotency_key}\n")
    return f"Scanned for {query!r}: 1 match in errors.log; journaled."


def reconciled_tree() -> Agent:
    """As :func:`journal_tree`, its researchers' write plain, with a reconcile hook."""
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher.",
        tools=(reconciled_scan,),
        limits=Limits(max_turns=4, max_budget_usd=0.01),
    )
    return _slow_tree_parent(researcher, Limits(max_turns=40, max_budget_usd=0.2))


def journal_tree() -> Agent:
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher.",
        tools=(scan_archive,),
        limits=Limits(max_turns=4, max_budget_usd=0.01),
    )
    return _slow_tree_parent(researcher, Limits(max_turns=40, max_budget_usd=0.2))


def scan_tree() -> Agent:
    tools = (canned_scan,)
    leaf = Agent(name="leaf", model="tree", instructions="You are a researcher.", tools=tools)
    return Agent(
        name="root",
        model="tree",
        instructions="You are a researcher.",
        tools=(leaf.as_tool(name="research"),),
        max_tokens=8192,
    )


def research_tree() -> Agent:
    """The demo's ``research`` tree (a root and 3 researchers) over the sandbox."""
    from orchestra._recipes.recipe import Recipe

    return Recipe(directory=str(SANDBOX), scenario="research").agent(Limits(max_turns=20))


def approval_tree() -> Agent:
    """One child that deletes a file (a human approves it), under the ``slow_tree`` parent."""
    cleaner = Agent(
        name="cleaner",
        model="destructive",
        instructions="You free disk space.",
        tools=catalog(SANDBOX),
        limits=Limits(max_turns=6, max_budget_usd=0.01),
    )
    return _slow_tree_parent(cleaner, Limits(max_turns=20, max_budget_usd=0.1))


def _slow_tree_parent(child: Agent, limits: Limits) -> Agent:
    """The ``slow_tree`` parent that runs ``child`` as its ``research`` tool."""
    return Agent(
        name="assistant",
        model="slow_tree",
        instructions="You are an operations assistant.",
        tools=(child.as_tool(name="research"),),
        limits=limits,
        max_tokens=4096,
    )


# -- the chaos test's trees ---------------------------------------------------------


def _line(phase: str, key: str) -> None:
    """One journal line (one append: whole lines, whatever process writes)."""
    path = os.environ["ORCHESTRA_TEST_JOURNAL"]
    text = f"{phase} {key} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


async def _journaled_write(ctx: ToolContext, seconds: float, *, idempotent: bool) -> str:
    """``start``, the write's 3 s, then its ``effect`` (once per key when
    ``idempotent``: a key already journaled is not written again); ``end``."""
    key = ctx.idempotency_key
    _line("start", key)
    try:
        journal = trio.Path(os.environ["ORCHESTRA_TEST_JOURNAL"])
        done = {
            line.split()[1]
            for line in (await journal.read_text()).splitlines()
            if line.startswith("effect ")
        }
        if idempotent and key in done:
            return "Journaled already."
        await trio.sleep(seconds)
        await trio.lowlevel.checkpoint()
        _line("effect", key)
        return "Scanned: 1 match in errors.log; journaled."
    finally:
        _line("end", key)


@tool(name="scan_archive", idempotent=True)
async def chaos_idempotent_scan(query: str, ctx: ToolContext, seconds: float = 3.0) -> str:
    """Scan the archive and journal the finding (a slow idempotent write).

    Args:
        query: the text to look for.
        seconds: how long the scan takes.
    """
    return await _journaled_write(ctx, seconds, idempotent=True)


@tool(name="scan_archive")
async def chaos_plain_scan(query: str, ctx: ToolContext, seconds: float = 3.0) -> str:
    """Scan the archive and journal the finding (a slow plain write: never run twice
    without a human).

    Args:
        query: the text to look for.
        seconds: how long the scan takes.
    """
    return await _journaled_write(ctx, seconds, idempotent=False)


def _chaos_tree(scan: Any) -> Agent:
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions="You are a researcher.",
        tools=(scan,),
        limits=Limits(max_turns=4, max_budget_usd=0.004),
    )
    return _slow_tree_parent(researcher, Limits(max_turns=12, max_budget_usd=0.02))


def chaos_idempotent_tree() -> Agent:
    """The ``slow_tree`` parent over researchers whose write is idempotent."""
    return _chaos_tree(chaos_idempotent_scan)


def chaos_plain_tree() -> Agent:
    """The ``slow_tree`` parent over researchers whose write is plain."""
    return _chaos_tree(chaos_plain_scan)


@attrs.frozen
class Incident:
    """The dependencies of :func:`deps_tree`'s runs: files, and who made them."""

    texts: dict[str, str]
    made_in: int


def incident() -> Incident:
    """Made by each worker that executes a run of a :func:`deps_tree` tree."""
    texts = {"errors.log": "WORKER-MADE: worker 7 timed out", "notes.txt": "restart it"}
    return Incident(texts=texts, made_in=os.getpid())


@tool(read_only=True)
def read_incident_file(path: str, ctx: ToolContext[Incident]) -> str:
    """The text of one file of the incident (from the run's dependencies)."""
    return f"{ctx.deps.texts.get(Path(path).name, 'none')} (pid {ctx.deps.made_in})"


def _instructions(ctx: RunContext[Incident]) -> str:
    return f"You read files of an incident; depth {ctx.depth}."


def deps_tree() -> Agent[Incident, Any]:
    """The ``research`` tree whose researchers read files from ``ctx.deps``."""
    researcher = Agent(
        name="researcher",
        model="researcher",
        instructions=_instructions,
        tools=[attrs.evolve(read_incident_file, name="read_file")],
        deps_type=Incident,
        limits=Limits(max_turns=6, max_budget_usd=0.01),
    )
    return Agent(
        name="assistant",
        model="research",
        instructions=_instructions,
        tools=[researcher.as_tool(name="research")],
        deps_type=Incident,
        limits=Limits(max_turns=10, max_budget_usd=0.05),
    )
