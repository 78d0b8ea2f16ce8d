"""Claim: a payment killed with ``kill -9`` right after it took effect is settled on
resume by asking the payment service: paid once, and no human is asked.

A child process runs a run whose model asks for one payment; the ``pay`` tool
records the payment in a ledger file (the "payment service", keyed by the
call's idempotency key, fsynced) and the process SIGKILLs itself right there,
before the call's result is saved: the write is *in doubt*. A second child
process resumes the run. With ``@tool(reconcile=...)`` the tool can say
whether a key was paid, and the resumed run records the payment's result and
completes; without it, the run stops ``interrupted``/``unknown_outcome`` for a
person to decide, as Orchestra always did.

Prints, for the tool with and without a reconcile hook: the payments in the
ledger, how the resumed run ended, and whether a human was asked. Exits 1
unless the hooked tool paid exactly once and completed without a human, and
the unhooked one paid once and waited for a human.

    python examples/reconcile.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from orchestra import Agent, Limits, Reconciled, Runner, SQLiteStore, Status, ToolContext, tool
from orchestra.testing import DONE, FakeProvider, tool_calls

RUN_ID = "reconcile-demo"
TASK = "Pay invoice 7 (5 USD)."


def payer(ledger: Path, *, hooked: bool, die_after_paying: bool) -> Agent:
    """An agent with one write, ``pay``, whose effect is a line in ``ledger``."""

    def paid(arguments: Mapping[str, Any], key: str) -> Reconciled:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        if any(line.startswith(key + " ") for line in lines):
            return Reconciled.done(f"paid {arguments['amount']} USD (found in the ledger)")
        return Reconciled.not_done()

    @tool(reconcile=paid if hooked else None)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay an amount in USD (a plain write: not idempotent)."""
        with ledger.open("a") as f:
            f.write(f"{ctx.idempotency_key} {amount}\n")
            f.flush()
            os.fsync(f.fileno())
        if die_after_paying:
            os.kill(os.getpid(), signal.SIGKILL)  # the effect is done; its result is not saved
        return f"paid {amount} USD"

    return Agent(name="payer", model="m", tools=(pay,), limits=Limits(max_turns=5))


def child(directory: Path, step: str, hooked: bool) -> None:
    """One process: the first run (which dies after paying), or the resume."""
    ledger = directory / "ledger.txt"
    with SQLiteStore(directory / "runs.db") as store:
        if step == "run":
            agent = payer(ledger, hooked=hooked, die_after_paying=True)
            model = FakeProvider(tool_calls(("pay", '{"amount": 5}')), DONE)
            trio.run(lambda: Runner(provider=model, store=store).run(agent, TASK, run_id=RUN_ID))
            return
        agent = payer(ledger, hooked=hooked, die_after_paying=False)
        result = trio.run(Runner(provider=FakeProvider(DONE), store=store).resume, RUN_ID, agent)
        waiting = result.state.interruption
        print(result.status.value, waiting.kind.value if waiting else "-")


def trial(hooked: bool) -> tuple[int, str, str]:
    """(payments in the ledger, the resumed run's status, what it waits for)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        me = [sys.executable, __file__, "child", str(directory), str(int(hooked))]
        killed = subprocess.run([*me[:3], "run", *me[3:]], capture_output=True, text=True)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        resumed = subprocess.run([*me[:3], "resume", *me[3:]], capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr
        status, waiting = resumed.stdout.split()
        payments = len((directory / "ledger.txt").read_text().splitlines())
        return payments, status, waiting


def main() -> int:
    rows = {"reconcile hook": trial(hooked=True), "no hook": trial(hooked=False)}
    print(f"{'tool':<16}{'payments':>9}  {'resumed run':<13}{'waits for':<16}human asked")
    for name, (payments, status, waiting) in rows.items():
        asked = "yes" if waiting == "unknown_outcome" else "no"
        print(f"{name:<16}{payments:>9}  {status:<13}{waiting:<16}{asked}")
    hooked_ok = rows["reconcile hook"] == (1, Status.COMPLETED.value, "-")
    unhooked_ok = rows["no hook"] == (1, Status.INTERRUPTED.value, "unknown_outcome")
    print("claim holds" if hooked_ok and unhooked_ok else "CLAIM DOES NOT HOLD")
    return 0 if hooked_ok and unhooked_ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(Path(sys.argv[3]), sys.argv[2], sys.argv[4] == "1")
        sys.exit(0)
    sys.exit(main())
