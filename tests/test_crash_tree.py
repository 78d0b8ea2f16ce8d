"""Crash-fuzz of run trees: SIGKILL at random moments, resume until every tree ends.

Each tree is a root agent that fans out to ``N_CHILDREN`` concurrent children
(an agent tool); each child writes through a plain tool, an idempotent tool and
an approval-gated tool, one per turn, then answers. Every effect is one line
in a ledger file (one ``write`` + ``fsync``, so a kill cannot tear it); tools
pause before and after it, so kills also land between an effect and its record.

The driver (this pytest process) forks a worker per attempt: ``Runner.run``
the first time, ``Runner.resume`` afterwards. It SIGKILLs a few of the workers
after a random delay, and between workers acts as the operator on the store:
it approves gated calls, and for a write left in doubt it looks at the ledger
(reject "already written" if the entry is there, approve otherwise). It goes
on until the root ends in a status other than ``interrupted``.

Checked for every tree: each expected effect exactly once, every run of the
tree ended and referenced by its parent (no orphan, none stuck), exactly
``N_CHILDREN`` children, the root's tree cost equals the sum of the runs' own
costs and stays within budget, and no run requested one turn of its model
more than once per kill (only a call in flight can be paid twice).

``ORCHESTRA_CRASH_SEED`` picks the seed (kill timing is still the machine's);
``ORCHESTRA_CRASH_KILLS`` the number of kills to aim for.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    InterruptionKind,
    Limits,
    Price,
    PriceTable,
    Runner,
    RunNotFound,
    RunState,
    SQLiteStore,
    Status,
    ToolContext,
    tool,
)
from orchestra._approval import approve, reject
from orchestra._model.tokens import count_completion, count_prompt, encoding
from orchestra._money import from_usd

SEED = int(os.environ.get("ORCHESTRA_CRASH_SEED", "1729"))
TARGET_KILLS = int(os.environ.get("ORCHESTRA_CRASH_KILLS", "120"))
MIN_KILLS = 100
TIME_BOUND_S = 75.0  # no new tree starts after this once MIN_KILLS kills are done
HARD_BOUND_S = 600.0
"""No new tree starts after this at all: a loaded machine runs fewer trees in
TIME_BOUND_S (the kill count, not the clock, is what the test needs)."""
WORKER_TIMEOUT_S = 60.0
MAX_WORKERS_PER_TREE = 60

ROOT = "run_tree_root"
TASK = "Split the work between the children."
N_CHILDREN = 3
WRITES = (("append", "plain"), ("append_idem", "idem"), ("append_gated", "gated"))
ROOT_MODEL, CHILD_MODEL = "lead-model", "worker-model"
PRICES = PriceTable(
    models={
        ROOT_MODEL: Price(input_per_million=3.0, output_per_million=15.0),
        CHILD_MODEL: Price(input_per_million=1.0, output_per_million=4.0),
    }
)
BUDGET_USD = 0.02  # a clean tree costs about $0.0044: room for re-paid calls
LEDGER, REQUESTS, ERRORS = "ledger.jsonl", "requests.jsonl", "worker-errors.log"


def expected_entries() -> set[str]:
    return {f"c{i}.{kind}" for i in range(1, N_CHILDREN + 1) for _, kind in WRITES}


# -- the fake model -------------------------------------------------------------


class TreeModel:
    """Root: fan out to the children, then answer. Child: one write per turn, then answer.

    Logs every request (the run's first user message, its turn, the worker
    attempt) before answering after a short random delay, so kills land mid-request.
    """

    def __init__(self, log: Path, attempt: int, rng: random.Random) -> None:
        self.log, self.attempt, self.rng = log, attempt, rng

    async def complete(self, request: ChatRequest) -> ChatReply:
        who = next(m["content"] for m in request.messages if m["role"] == "user")
        turn = sum(m["role"] == "assistant" for m in request.messages)
        with self.log.open("a") as f:
            f.write(json.dumps({"run": who, "turn": turn, "attempt": self.attempt}) + "\n")
            f.flush()
        await trio.sleep(self.rng.uniform(0, 0.005))
        script = root_turn if request.model == ROOT_MODEL else child_turn
        msg = script(who, turn)
        return ChatReply(
            message=msg,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=count_completion(msg),
        )


def root_turn(_who: str, turn: int) -> dict[str, Any]:
    if turn > 0:
        return {"role": "assistant", "content": "All the work is done."}
    calls = [_call(0, i, "work", {"question": f"child {i}"}) for i in range(1, N_CHILDREN + 1)]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def child_turn(who: str, turn: int) -> dict[str, Any]:
    tag = "c" + who.split()[-1]  # "child 2" -> "c2"
    if turn >= len(WRITES):
        return {"role": "assistant", "content": f"{tag} wrote its entries."}
    name, kind = WRITES[turn]
    call = _call(turn, 0, name, {"entry": f"{tag}.{kind}"})
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _call(turn: int, i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{turn}_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


# -- the tools and agents -------------------------------------------------------


def read_ledger(directory: Path) -> list[dict[str, Any]]:
    path = directory / LEDGER
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_effect(directory: Path, record: dict[str, Any]) -> None:
    """One effect: one appended line, one write call, fsynced."""
    fd = os.open(directory / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_agent(directory: Path, rng: random.Random) -> Agent:
    async def effect(tool_name: str, entry: str, ctx: ToolContext) -> str:
        await trio.sleep(rng.uniform(0.001, 0.003))
        record = {"entry": entry, "tool": tool_name, "key": ctx.idempotency_key}
        _write_effect(directory, {**record, "pid": os.getpid()})
        await trio.sleep(rng.uniform(0, 0.002))  # done, not yet recorded: a kill leaves it in doubt
        return f"wrote {entry}"

    @tool
    async def append(entry: str, ctx: ToolContext) -> str:
        """Append an entry to the ledger."""
        return await effect("append", entry, ctx)

    @tool(idempotent=True)
    async def append_idem(entry: str, ctx: ToolContext) -> str:
        """Append an entry to the ledger once per idempotency key."""
        if any(r["key"] == ctx.idempotency_key for r in read_ledger(directory)):
            return f"{entry} was already written"
        return await effect("append_idem", entry, ctx)

    @tool(needs_approval=True)
    async def append_gated(entry: str, ctx: ToolContext) -> str:
        """Append an entry to the ledger (a human approves first)."""
        return await effect("append_gated", entry, ctx)

    child = Agent(
        name="worker",
        model=CHILD_MODEL,
        tools=(append, append_idem, append_gated),
        limits=Limits(max_turns=10),
        max_tokens=64,
    )
    work = child.as_tool(name="work", description="Give one child its share of the work.")
    return Agent(
        name="lead",
        model=ROOT_MODEL,
        tools=(work,),
        limits=Limits(max_turns=40, max_budget_usd=BUDGET_USD),
        max_tokens=64,
    )


# -- one worker process -----------------------------------------------------------


def _worker(directory: str, seed: str, attempt: int) -> None:
    """Run the tree (first time) or resume it, in this forked process; exit 0 or 1."""
    path = Path(directory)
    try:
        rng = random.Random(f"{seed}:{attempt}")
        store = SQLiteStore(path / "runs.db")
        provider = TreeModel(path / REQUESTS, attempt, rng)
        runner = Runner(provider=provider, store=store, prices=PRICES)
        agent = tree_agent(path, rng)

        async def main() -> None:
            if root_state(store) is None:
                await runner.run(agent, TASK, run_id=ROOT)
            else:
                await runner.resume(ROOT, agent)

        trio.run(main)
        store.close()
    except BaseException:
        with (path / ERRORS).open("a") as f:
            f.write(f"attempt {attempt}:\n{traceback.format_exc()}\n")
        os._exit(1)
    os._exit(0)


def root_state(store: SQLiteStore) -> RunState | None:
    try:
        return store.load(ROOT)
    except RunNotFound:  # killed before the root's first save
        return None


class HarnessError(Exception):
    """A worker failed or hung, or a tree did not end: reported as a broken invariant."""


def launch(
    directory: Path, seed: str, attempt: int, kill_after: float | None
) -> tuple[bool, float]:
    """Run one worker, SIGKILLed after ``kill_after`` seconds if still alive.

    Returns whether it was killed, and how long it ran.
    """
    process = multiprocessing.get_context("fork").Process(
        target=_worker, args=(str(directory), seed, attempt)
    )
    started = time.monotonic()
    process.start()
    process.join(WORKER_TIMEOUT_S if kill_after is None else kill_after)
    if process.exitcode is None:
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        if kill_after is None:
            raise HarnessError(f"worker {attempt} hung for {WORKER_TIMEOUT_S}s")
    elapsed = time.monotonic() - started
    if process.exitcode == -signal.SIGKILL:
        return True, elapsed
    if process.exitcode != 0:
        errors = (directory / ERRORS).read_text() if (directory / ERRORS).exists() else ""
        raise HarnessError(f"worker {attempt} exited {process.exitcode}:\n{errors}")
    return False, elapsed


# -- the operator -----------------------------------------------------------------


def decide(directory: Path) -> str | None:
    """Act on what the root waits on: what was done, or None if the tree has ended."""
    with SQLiteStore(directory / "runs.db") as store:
        state = root_state(store)
        if state is None or state.status is Status.RUNNING:
            return "resume after a kill"
        if state.status is not Status.INTERRUPTED:
            return None
        waiting = state.interruption
        assert waiting is not None
        if waiting.kind is InterruptionKind.APPROVAL:
            approve(store, ROOT)
            return "approved a gated call"
        if waiting.kind is not InterruptionKind.UNKNOWN_OUTCOME:
            raise HarnessError(f"root interrupted for {waiting.kind}: {waiting.reason}")
        entry = (waiting.arguments or {})["entry"]
        if entry in {r["entry"] for r in read_ledger(directory)}:
            reject(store, ROOT, reason=f"checked: {entry} is already written")
            return "rejected a call in doubt (done)"
        approve(store, ROOT)
        return "approved a call in doubt (not done)"


# -- one tree ---------------------------------------------------------------------


@attrs.define
class TreeReport:
    directory: Path
    seed: str
    kills: int = 0
    workers: int = 0
    repaid: int = 0
    durations: list[float] = attrs.Factory(list)
    """Seconds each worker that was not killed ran."""
    decisions: Counter[str] = attrs.Factory(Counter)
    broken: list[tuple[str, str]] = attrs.Factory(list)
    """(invariant, details) for each invariant that does not hold."""


def fuzz_tree(
    directory: Path, seed: str, kills_wanted: int, windows: tuple[float, float] = (0.0, 0.0)
) -> TreeReport:
    """Drive one tree to its end, killing ``kills_wanted`` workers at random moments.

    A kill lands uniformly within ``windows[0]`` seconds of the first worker's
    start, ``windows[1]`` of a later one's (about how long each takes unkilled).
    """
    directory.mkdir(parents=True)
    report = TreeReport(directory=directory, seed=seed)
    rng = random.Random(seed)
    attempts_to_kill = 3 * kills_wanted  # a worker may end before its kill lands
    try:
        while (decision := decide(directory)) is not None:
            if report.workers:  # the first worker starts the tree
                report.decisions[decision] += 1
            if report.workers >= MAX_WORKERS_PER_TREE:
                raise HarnessError(f"the tree did not end after {report.workers} workers")
            kill_after = None
            if report.kills < kills_wanted and attempts_to_kill > 0:
                attempts_to_kill -= 1
                kill_after = rng.uniform(0, windows[min(report.workers, 1)])
            killed, elapsed = launch(directory, seed, report.workers, kill_after)
            report.workers += 1
            report.kills += killed
            if not killed:
                report.durations.append(elapsed)
    except HarnessError as exc:
        report.broken.append(("harness", str(exc)))
    report.broken += check_tree(directory, report)
    return report


def check_tree(directory: Path, report: TreeReport) -> list[tuple[str, str]]:
    """The invariants that do not hold for this tree (empty if all do)."""
    with SQLiteStore(directory / "runs.db") as store:
        try:
            runs = store.tree(ROOT)
        except RunNotFound:
            return [("saved", "no run was saved")]
    root = runs[0]
    broken = [] if root.status is Status.COMPLETED else [("root completed", root.reason)]
    broken += _effects(directory)
    broken += _runs(root, runs)
    own = sum(r.own.cost_pico for r in runs)
    if root.tree.cost_pico != own:
        broken.append(("tree cost = sum of own costs", f"{root.tree.cost_pico} != {own} pico-USD"))
    if root.tree.cost_pico > from_usd(BUDGET_USD):
        broken.append(("spend <= budget", f"{root.tree.cost_pico} pico-USD"))
    report.repaid, over = _repaid(directory, report.kills)
    broken += [("re-paid model calls <= kills", text) for text in over]
    return broken


def _effects(directory: Path) -> list[tuple[str, str]]:
    written = Counter(r["entry"] for r in read_ledger(directory))
    expected = expected_entries()
    found = {
        "0 duplicated effects": sorted(e for e, n in written.items() if n > 1),
        "0 lost effects": sorted(expected - set(written)),
        "0 unexpected effects": sorted(set(written) - expected),
    }
    return [(invariant, str(entries)) for invariant, entries in found.items() if entries]


def _runs(root: RunState, runs: list[RunState]) -> list[tuple[str, str]]:
    referenced = {child for r in runs for child in r.children.values()}
    found = {
        "0 stuck runs": [f"{r.run_id} {r.agent}" for r in runs if not r.status.terminal],
        "0 orphan runs": [r.run_id for r in runs[1:] if r.run_id not in referenced],
        "every run completed": [
            f"{r.run_id} {r.status.value}" for r in runs if r.status is not Status.COMPLETED
        ],
    }
    broken = [(invariant, str(ids)) for invariant, ids in found.items() if ids]
    if len(root.children) != N_CHILDREN or len(runs) != N_CHILDREN + 1:
        details = f"{len(root.children)} referenced by the root, {len(runs) - 1} saved"
        broken.append((f"{N_CHILDREN} children", details))
    return broken


def _repaid(directory: Path, kills: int) -> tuple[int, list[str]]:
    """Model requests made again (same run, same turn); runs with more than ``kills`` of them."""
    lines = (directory / REQUESTS).read_text().splitlines()
    requests = Counter((r["run"], r["turn"]) for r in map(json.loads, lines))
    per_run: Counter[str] = Counter()
    for (who, _turn), n in requests.items():
        per_run[who] += n - 1
    over = [f"{who!r}: {n} after {kills} kills" for who, n in per_run.items() if n > kills]
    return sum(per_run.values()), over


# -- the tests ----------------------------------------------------------------------


def _failures(reports: list[TreeReport]) -> str:
    broken = [r for r in reports if r.broken]
    trees_per_invariant = Counter(i for r in broken for i in {i for i, _ in r.broken})
    lines = [
        f"{len(broken)}/{len(reports)} trees broke invariants (seed {SEED}): "
        + ", ".join(f"{i!r} in {n}" for i, n in trees_per_invariant.most_common())
    ]
    for r in broken[:10]:
        lines.append(f"{r.directory} (tree seed {r.seed!r}, {r.kills} kills):")
        lines += [f"    {invariant}: {details}" for invariant, details in r.broken]
    return "\n".join(lines)


def _summary(reports: list[TreeReport], seconds: float) -> str:
    decisions = sum((r.decisions for r in reports), Counter())
    return (
        f"crash-tree seed={SEED}: {len(reports)} trees, {sum(r.kills for r in reports)} kills, "
        f"{sum(r.workers for r in reports)} workers, {sum(r.repaid for r in reports)} re-paid "
        f"model calls, {sum(bool(r.broken) for r in reports)} broken trees, {seconds:.1f}s; "
        f"operator: {dict(decisions)}"
    )


def test_trees_without_kills_are_exact(tmp_path: Path) -> None:
    """The harness on its own: no kills, only the operator's approvals."""
    encoding()  # load the tokenizer once, before forking
    reports = [fuzz_tree(tmp_path / f"tree-{n}", f"{SEED}:clean:{n}", 0) for n in range(3)]
    print(_summary(reports, 0.0))
    assert not any(r.broken for r in reports), _failures(reports)
    assert all(r.repaid == 0 for r in reports)


def test_sigkill_trees_at_random_moments_then_resume(tmp_path: Path) -> None:
    encoding()  # load the tokenizer once, before forking
    clean = fuzz_tree(tmp_path / "calibration", f"{SEED}:calibration", 0)
    assert not clean.broken, _failures([clean])
    windows = (clean.durations[0], max(clean.durations[1:]))  # kills land mid-work
    rng = random.Random(SEED)
    reports: list[TreeReport] = []
    started = time.monotonic()
    while (kills := sum(r.kills for r in reports)) < TARGET_KILLS:
        elapsed = time.monotonic() - started
        if (elapsed > TIME_BOUND_S and kills >= MIN_KILLS) or elapsed > HARD_BOUND_S:
            break
        n = len(reports)
        tree = tmp_path / f"tree-{n:03d}"
        reports.append(fuzz_tree(tree, f"{SEED}:{n}", rng.randint(1, 5), windows))
    print(_summary(reports, time.monotonic() - started))
    assert not any(r.broken for r in reports), _failures(reports)
    kills = sum(r.kills for r in reports)
    assert kills >= MIN_KILLS, f"only {kills} kills in {HARD_BOUND_S}s (seed {SEED})"
