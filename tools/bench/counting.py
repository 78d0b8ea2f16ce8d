"""Prompt-count cost per turn: what the budget gate spends counting the prompt.

Before every model call the loop counts the prompt with tiktoken's o200k_base
(``orchestra/_model/tokens.py``): an incremental ``MessageCounter`` that counts
each new message once. This grows a ``runaway``-shaped transcript (a tool
call and a file's text per turn) and times, at turns T, the counter's call for
that turn (the median of turns T−4..T, fed in order as a run does) against a
full recount of the same prompt with ``count_prompt`` (the baseline), both
with the agent's tool declarations. Not public API: if ``orchestra._model.tokens``
changes shape, this section reports an error and the rest of the suite runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from . import common
from .common import row

FULL = {"turns": 500, "marks": (10, 100, 500), "repeats": 5}
QUICK = {"turns": 100, "marks": (10, 100), "repeats": 2}
WINDOW = 4


def _snapshots(turns: int) -> list[list[dict[str, Any]]]:
    """The transcript as it stands before each turn 1..turns (the same message objects)."""
    from orchestra.testing import SANDBOX_FILES

    from .bare import INSTRUCTIONS

    names = sorted(SANDBOX_FILES)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": "Look into the logs and tell me what went wrong."},
    ]
    out = []
    for turn in range(turns):
        out.append(list(messages))
        name = names[turn % len(names)]
        call = {
            "id": f"call_{turn}_0",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path":"{name}"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": SANDBOX_FILES[name]}
        )
    return out


def run(quick: bool) -> common.Section:
    from orchestra._model.tokens import MessageCounter, count_prompt

    p = QUICK if quick else FULL
    common.warm_tokenizer()
    snapshots = _snapshots(p["turns"])
    tools = common.plan_agent(common.sandbox()).tool_specs()
    marks = p["marks"]
    incremental: dict[int, list[float]] = {m: [] for m in marks}
    full: dict[int, list[float]] = {m: [] for m in marks}
    for _ in range(p["repeats"]):
        counter = MessageCounter()
        times = []
        for messages in snapshots:
            start = time.perf_counter()
            counter.count(messages, tools)
            times.append(time.perf_counter() - start)
        for m in marks:
            incremental[m].append(statistics.median(times[max(m - 1 - WINDOW, 0) : m]) * 1e6)
            recount = []
            for _ in range(5):
                start = time.perf_counter()
                count_prompt(snapshots[m - 1], tools)
                recount.append(time.perf_counter() - start)
            full[m].append(statistics.median(recount) * 1e6)
    first, last = marks[0], marks[-1]
    rows = [
        row(
            f"turn {m}: incremental count",
            "µs",
            incremental[m],
            baseline=f"full recount at turn {m}",
            baseline_samples=full[m],
            paired=True,
        )
        for m in marks
    ]
    rows.append(
        row(
            f"incremental count: turn {last} against turn {first}",
            "µs",
            incremental[last],
            baseline=f"incremental count at turn {first}",
            baseline_samples=incremental[first],
            paired=True,
        )
    )
    return common.section(
        "counting",
        "Prompt-count cost per turn",
        f"This run: {p['repeats']} transcripts of {p['turns']} turns.",
        rows,
    )
