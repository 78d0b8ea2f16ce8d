"""Benchmark: prompt-counting cost per turn as a run grows to 100 turns.

Grows a transcript the way the ``runaway`` scenario does (an assistant tool
call and a tool result per turn) and times, at every turn, what the budget
gate spends counting the prompt: Orchestra's incremental ``MessageCounter``
beside a full recount of the whole transcript (the baseline). Reports the
per-turn cost at turns 10, 50 and 100 as ratios to turn 10: flat (≈1) for the
counter, growing with the run (≈10 at turn 100) for the baseline.

    python tools/bench_counting.py [--turns 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from orchestra._tokens import MessageCounter, count_prompt, encoding
from orchestra.testing import SANDBOX_FILES

Messages = list[dict[str, Any]]


def grow(turns: int) -> list[Messages]:
    """The transcript as it stands before each turn."""
    messages: Messages = [
        {"role": "system", "content": "You are an operations assistant."},
        {"role": "user", "content": "Look into the logs."},
    ]
    snapshots = []
    for turn in range(turns):
        snapshots.append(list(messages))
        call = {
            "id": f"call_{turn}_0",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"notes.txt"}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": SANDBOX_FILES["notes.txt"]}
        )
    return snapshots


def per_turn_seconds(snapshots: list[Messages], count: Callable[[Messages], int]) -> list[float]:
    out = []
    for messages in snapshots:
        start = time.perf_counter()
        count(messages)
        out.append(time.perf_counter() - start)
    return out


def run(turns: int, repeats: int) -> dict[str, Any]:
    encoding()  # load once, outside the timings
    snapshots = grow(turns)
    # each snapshot is a new list holding the same message objects, as in a run
    incremental, full = [], []
    for _ in range(repeats):
        counter = MessageCounter()
        incremental.append(per_turn_seconds(snapshots, lambda m, c=counter: c.count(m, None)))
        full.append(per_turn_seconds(snapshots, lambda m: count_prompt(m)))
    med = lambda series: [statistics.median(xs) for xs in zip(*series, strict=True)]  # noqa: E731
    inc, base = med(incremental), med(full)
    marks = [t for t in (10, 50, 100, turns) if t <= turns]
    return {
        "turns": turns,
        "incremental_us": {t: round(inc[t - 1] * 1e6, 1) for t in marks},
        "full_recount_us": {t: round(base[t - 1] * 1e6, 1) for t in marks},
        "incremental_ratio_to_turn_10": {t: round(inc[t - 1] / inc[9], 2) for t in marks},
        "full_recount_ratio_to_turn_10": {t: round(base[t - 1] / base[9], 2) for t in marks},
        "total_ms": {
            "incremental": round(sum(inc) * 1e3, 2),
            "full_recount": round(sum(base) * 1e3, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.turns, args.repeats), indent=2))


if __name__ == "__main__":
    main()
