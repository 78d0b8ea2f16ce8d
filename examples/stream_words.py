"""Claim: a plain script (no ``async`` anywhere) reads a tree's words as they arrive.

A research tree (a lead and three researchers, the scripted model streaming
its replies a piece every 20 ms) is started with ``Runner.stream_sync``; the
script prints the lead's words to stderr as they come (``.text()``), then a
table: when the first word arrived and when the tree stopped (both from the
start), how many pieces the answer came in, and the tree's status. Exits 1
unless the words came in several pieces and the first arrived before the
tree had stopped.

    python examples/stream_words.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from orchestra import Agent, Limits, OpenAIProvider, Runner, catalog
from orchestra.testing import ScriptedTransport, make_sandbox

CHUNK_S = 0.02

files = catalog(make_sandbox(Path(tempfile.mkdtemp()) / "incident"))
researcher = Agent(
    name="researcher", model="researcher", tools=files, limits=Limits(max_budget_usd=0.01)
)
lead = Agent(
    name="lead",
    model="research",
    tools=[researcher.as_tool(name="research", description="Research one question.")],
    limits=Limits(max_turns=10, max_budget_usd=0.05),
)
provider = OpenAIProvider(
    base_url="http://scripted/v1", transport=ScriptedTransport(chunk_s=CHUNK_S)
)

start = time.perf_counter()
first: float | None = None
pieces = 0
with Runner(provider=provider).stream_sync(lead, "Why did the nightly job fail?") as stream:
    for words in stream.text():
        first = time.perf_counter() - start if first is None else first
        pieces += 1
        print(words, end="", file=sys.stderr, flush=True)
    result = stream.result
ended = time.perf_counter() - start
print(file=sys.stderr)

held = pieces > 1 and first is not None and first < ended
print(f"{'first word after':<24}{first * 1000 if first else float('nan'):>10.0f} ms")
print(f"{'tree stopped after':<24}{ended * 1000:>10.0f} ms")
print(f"{'pieces of the answer':<24}{pieces:>10}")
print(f"{'tree':<24}{result.status.value:>10}  ${result.tree_cost_usd:.4f}")
print("claim holds" if held else "CLAIM FAILED")
sys.exit(0 if held else 1)
