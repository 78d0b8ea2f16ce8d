"""Claim: a write waits for a human; a rejection reaches the model in words, never as silence.

Runs the ``destructive`` scenario: the scripted model lists the files, then
asks to delete access.log (``delete_file`` needs approval), then reports what
the tool said; if the tool said nothing it claims the file is deleted, as a
model does when a harness answers with an empty result. The run stops
``interrupted``/``approval`` with nothing deleted; then it is decided and
resumed:

* approved: the file is deleted and the model says so;
* rejected with a reason: the reason is the tool result, the model says the
  file was not deleted;
* rejected with no reason: Orchestra's ``ToolPolicy.rejection_text`` is the
  result ("The user declined this call; nothing was done."), the same truth;
* a harness that answers a rejection with nothing lets the model claim a
  deletion that never happened: Orchestra refuses such a policy
  (``ToolPolicy(rejection_text="")`` is a ``ConfigError``).

Prints per decision the status before and after, whether access.log is left,
what the model saw and what it answered. Exits 1 unless Orchestra's three
decisions left the file as decided and the model's answer matches the disk.

    python examples/approval.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs
import trio

from orchestra import (
    Agent,
    ConfigError,
    Limits,
    OpenAIProvider,
    Runner,
    RunResult,
    ToolPolicy,
    catalog,
)
from orchestra.testing import make_sandbox, scripted_server

INSTRUCTIONS = "You are an operations assistant. Use the tools to answer in one sentence."
REASON = "keep it for the incident review"
WIDTH = 80


@attrs.frozen
class Decision:
    label: str
    approve: bool
    reason: str = ""


DECISIONS = (
    Decision("approve", approve=True),
    Decision("reject, with a reason", approve=False, reason=REASON),
    Decision("reject, no reason", approve=False),
)


@attrs.frozen
class Row:
    decision: Decision
    waiting: RunResult
    result: RunResult
    file_before: bool
    file_after: bool


async def decide(work: Path) -> list[Row]:
    rows = []
    async with scripted_server() as url:
        provider = OpenAIProvider(base_url=url, api_key="scripted")
        for i, decision in enumerate(DECISIONS):
            directory = make_sandbox(work / f"box{i}")
            policy = ToolPolicy()
            agent = Agent(
                name="assistant",
                model="destructive",
                instructions=INSTRUCTIONS,
                tools=catalog(directory),
                limits=Limits(max_turns=10),
                policy=policy,
            )
            runner = Runner(provider=provider)
            waiting = await runner.run(agent, "The disk is full; free some space.")
            before = (directory / "access.log").exists()
            if decision.approve:
                runner.approve(waiting.run_id)
            else:
                runner.reject(waiting.run_id, reason=decision.reason)
            result = await runner.resume(waiting.run_id, agent)
            after = (directory / "access.log").exists()
            rows.append(Row(decision, waiting, result, before, after))
        await provider.aclose()
    return rows


def delete_result(result: RunResult) -> str:
    """The tool message answering the delete_file call: what the model saw."""
    calls = [
        c["id"]
        for m in result.state.messages
        for c in m.get("tool_calls") or ()
        if c["function"]["name"] == "delete_file"
    ]
    seen = [m for m in result.state.messages if m.get("tool_call_id") in calls]
    return str(seen[0].get("content")) if seen else "(no result)"


def claims_deleted(result: RunResult) -> bool:
    return (result.answer or "").startswith("Deleted")


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="approval-") as tmp:
        rows = trio.run(decide, Path(tmp))
    print("destructive: the model asks to delete access.log")
    print(f"{'decision':<23} {'first stop':<20} {'then':<10} {'access.log':<10} {'true':<4}")
    ok = True
    for r in rows:
        interruption = r.waiting.state.interruption
        first = f"{r.waiting.status.value}/{interruption.kind.value if interruption else '-'}"
        left = "left" if r.file_after else "deleted"
        true = claims_deleted(r.result) != r.file_after
        print(
            f"{r.decision.label:<23} {first:<20} {r.result.status.value:<10} {left:<10} "
            f"{'yes' if true else 'NO: lie'}"
        )
        print("  saw: " + cut(repr(delete_result(r.result)), WIDTH - 7))
        print("  ->   " + cut(r.result.answer or "", WIDTH - 7))
        ok = ok and r.file_before and r.file_after is not r.decision.approve and true
    try:
        ToolPolicy(rejection_text="")
        print("a silent rejection policy was accepted")
        ok = False
    except ConfigError as exc:
        print(cut(f"a silent rejection policy is refused: {exc}", WIDTH))
    if not ok:
        print("CLAIM FAILED: a decision was not carried out, or the model was misled")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
