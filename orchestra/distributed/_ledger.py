"""The budget ledger in PostgreSQL: one tree's numbers, shared by every worker.

Embedded, a tree's spend and reservations live in its runs' memory (see
:mod:`orchestra._core.budget`). When a tree's runs execute on several workers,
the same numbers live here, one row per run (``ledger``): the run's tree
usage (its own spend plus every descendant's) and what is reserved against
it by model calls in flight, its own and its descendants'.

Every budget decision is one transaction (:meth:`PostgresLedger.guarded`):
the rows of the run's lineage are locked root first (one order for every
worker, so two decisions never deadlock), loaded into the live runs, the
decision is made by the same code as embedded (carve a child's limits from
what its parent has left; check the turn limit and reserve a call's worst
case; release it and charge the real cost), and what it changed is written
back before the locks go. So a reservation on one worker sees every
reservation and every spend of the tree on every other: the zero-overshoot
rule holds across workers. A decision runs on the worker's trio thread, as
a save does (no thread hop), while the lineage's rows are free (``NOWAIT``);
if another worker's decision holds one, it is made in a worker thread that
waits for the lock, so the loop never waits on another worker.

Alongside: ``ledger_holds``, the reservation a run's call in flight holds
(one at most per run: a run makes one model call at a time), and
``ledger_spend``, one row per model call a run paid for, written in the same
transaction as the roll-up to its ancestors. A hold still present when a
worker takes a run up belongs to a call whose worker died mid-call: the
provider may have charged for it, so it is charged at its reservation (a
``lost`` spend row, an ``lost_call`` event), never dropped
(:meth:`PostgresLedger.settle_lost`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import attrs
import orjson
import psycopg
import trio

from .._core.run import LiveRun
from .._exceptions import LeaseLost, StateError
from .._state import RunState, Usage
from .._stores.fence import Fence
from ._threads import (
    StepAbandoned,
    abandon_step,
    attempt_here,
    attempt_in_thread,
    here,
    in_thread,
    step_fence,
    supersede_step,
)

__all__ = ["LEDGER_TABLES", "PostgresLedger"]

_T = TypeVar("_T")

LEDGER_TABLES = (
    """CREATE TABLE IF NOT EXISTS ledger (
        run_id TEXT PRIMARY KEY,
        root_id TEXT NOT NULL,
        depth INTEGER NOT NULL,
        tree TEXT NOT NULL,
        own TEXT,
        reserved_pico BIGINT NOT NULL DEFAULT 0,
        reserved_tokens BIGINT NOT NULL DEFAULT 0,
        reserved_turns INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS ledger_holds (
        run_id TEXT PRIMARY KEY,
        pico BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        turns INTEGER NOT NULL,
        executor TEXT NOT NULL,
        held_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS ledger_spend (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL,
        root_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        model_calls INTEGER NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        cost_pico BIGINT NOT NULL,
        lost BOOLEAN NOT NULL,
        executor TEXT NOT NULL,
        recorded_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ledger_spend_root_id ON ledger_spend (root_id)",
    # a ledger made before these two
    "ALTER TABLE ledger ADD COLUMN IF NOT EXISTS own TEXT",
    # one charge per (run, turn): a second is refused by the database (a call
    # charged at its reservation because its outcome was lost is apart)
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_spend_one_per_turn"
    " ON ledger_spend (run_id, turn) WHERE NOT lost",
    # a tree's rows (reconcile), without reading every finished tree's; made by the
    # store's schema version 5 in a ledger made before it
    "CREATE INDEX IF NOT EXISTS ledger_root_id ON ledger (root_id)",
)
"""The ledger's tables (created by :meth:`PostgresLedger.create`)."""

RETRY_S = 0.5
RELEASE_PATIENCE_S = 300.0
"""How long releasing a reservation waits for an unreachable database."""

_LOCK_LINEAGE = """
    SELECT run_id, tree, reserved_pico, reserved_tokens, reserved_turns, own
    FROM ledger WHERE run_id = ANY(%s) ORDER BY depth FOR UPDATE
"""
_LOCK_LINEAGE_NOW = _LOCK_LINEAGE + " NOWAIT"
"""The lineage's rows if no other decision holds one of them (else :class:`_Busy`)."""
_WRITE_NODE = """
    UPDATE ledger SET tree = %s, reserved_pico = %s, reserved_tokens = %s, reserved_turns = %s
    WHERE run_id = %s
"""
_WRITE_OWN = "UPDATE ledger SET own = %s WHERE run_id = %s"
_LOSE_EARLIER_CHARGE = """
    UPDATE ledger_spend SET lost = TRUE WHERE run_id = %s AND turn = %s AND NOT lost
"""
"""A turn charged again: the earlier call's reply was never saved (its worker died
between the charge and the save), so that charge is a lost call's."""
_INSERT_SPEND = """
    INSERT INTO ledger_spend (run_id, root_id, turn, model_calls, prompt_tokens,
        completion_tokens, cost_pico, lost, executor, recorded_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def _ledger_complete(conn: Any) -> bool:
    """Whether the ledger has its last additions (the one-charge-per-turn index,
    and the index of its rows by tree)."""
    (complete,) = conn.execute(
        "SELECT to_regclass('ledger_spend_one_per_turn') IS NOT NULL"
        " AND to_regclass('ledger_root_id') IS NOT NULL"
    ).fetchone()
    return bool(complete)


class _Transactions(Protocol):
    """What the ledger needs of its store: transactions, and fences checked in them."""

    def transaction(self, *, batched: bool = False) -> Any: ...

    def check_fence(self, fence: Fence) -> None: ...

    def amend_usage(self, usages: Mapping[str, tuple[Usage, Usage | None]]) -> list[str]: ...

    def lock_rows(self, conn: Any, sql: str, params: Sequence[object]) -> list[Any]: ...


@attrs.frozen
class _Numbers:
    """What the ledger keeps of one run."""

    tree: Usage
    pico: int
    tokens: int
    turns: int

    @classmethod
    def of(cls, node: LiveRun) -> _Numbers:
        return cls(node.state.tree, node.reserved_pico, node.reserved_tokens, node.reserved_turns)

    def load_into(self, node: LiveRun) -> None:
        node.state.tree = self.tree
        node.reserved_pico, node.reserved_tokens, node.reserved_turns = (
            self.pico,
            self.tokens,
            self.turns,
        )


@attrs.define(kw_only=True, eq=False)
class PostgresLedger:
    """The :class:`~orchestra._core.run.Ledger` of runs whose store is a
    :class:`~orchestra.distributed.PostgresStore` (same database).

    ``executor`` names this worker in holds and spend rows.
    """

    store: _Transactions
    executor: str

    def create(self) -> None:
        """Create the ledger's tables if they are missing.

        A ledger that is complete is left alone: its DDL (``ALTER TABLE`` takes an
        exclusive lock even when the column exists) would deadlock with the
        workers writing to it while a new worker starts.
        """
        with self.store.transaction() as conn:
            if _ledger_complete(conn):
                return
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('orchestra.ledger'))")
            if _ledger_complete(conn):  # made while this waited for the lock
                return
            for sql in LEDGER_TABLES:
                conn.execute(sql)

    def open_node(self, state: RunState, depth: int, fence: Fence | None = None) -> None:
        """The ledger row of a new run (nothing spent); kept if it exists. Fenced by
        ``fence`` (the claim of the step creating the run) when given."""
        with self._fenced(fence) as conn:
            conn.execute(
                "INSERT INTO ledger (run_id, root_id, depth, tree) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO NOTHING",
                (state.run_id, state.root_id, depth, _usage_json(state.tree)),
            )

    async def guarded(self, run: LiveRun, decide: Callable[[], _T]) -> _T:
        """See :class:`~orchestra._core.run.Ledger`; one transaction, on the trio
        thread if no other decision holds a row of the lineage (as a save is:
        no thread hop), else in a worker thread that waits for them (the loop
        never waits on another worker's lock).

        Raises:
            StepAbandoned: the database could not be reached (the current step
                is abandoned: nothing more of it is saved).
        """
        return await self._decision(run, decide, abandon=True)

    async def released(self, run: LiveRun, release: Callable[[], _T]) -> _T:
        """See :class:`~orchestra._core.run.Ledger`: tried every :data:`RETRY_S` for
        up to :data:`RELEASE_PATIENCE_S` while the database is away. A try that
        fails changes nothing, so once one gets through the step goes on as if
        the database had never been away; if none does, the step is abandoned
        (the hold stays, and is charged at its reservation when the run is next
        taken up)."""
        waited = 0.0
        while True:
            try:
                return await self._decision(run, release, abandon=False)
            except StepAbandoned:
                if waited >= RELEASE_PATIENCE_S:
                    abandon_step()
                    raise
            await trio.sleep(RETRY_S)
            waited += RETRY_S

    async def _decision(self, run: LiveRun, decide: Callable[[], _T], *, abandon: bool) -> _T:
        """``decide`` on the trio thread if the lineage's rows are free, else in a
        worker thread. ``abandon=False`` (a release, tried again): an unreachable
        database leaves the step as it was."""
        on_loop = here if abandon else attempt_here
        try:
            with _superseding():
                decided: _T = on_loop(self._guarded, run, decide, step_fence(), False)
                return decided
        except _Busy:
            thread = in_thread if abandon else attempt_in_thread
            return await self._in_step(thread, self._guarded, run, decide)

    def _guarded(
        self, run: LiveRun, decide: Callable[[], _T], fence: Fence | None, wait: bool = True
    ) -> _T:
        """``decide`` in one transaction, fenced by the step's claim (``fence``);
        if that fails, the live lineage's numbers (and the run's own usage) are
        left as they were before it. ``wait=False``: :class:`_Busy` at once if
        another transaction holds a row of the lineage."""
        nodes = run.lineage()
        before = [_Numbers.of(node) for node in nodes]
        own = run.state.own
        try:
            with self._fenced(fence) as conn:
                return self._decided(conn, run, decide, wait=wait)
        except BaseException:
            for node, was in zip(nodes, before, strict=True):
                was.load_into(node)
            run.state.own = own
            raise

    def _decided(
        self,
        conn: Any,
        run: LiveRun,
        decide: Callable[[], _T],
        *,
        lost: bool = False,
        wait: bool = True,
    ) -> _T:
        """Within ``conn``'s transaction: lock and load the lineage, ``decide``,
        write back what changed, and record the hold and spend (``lost``: a
        charge for a call whose outcome was never recorded; ``wait``: see
        :meth:`_guarded`)."""
        nodes = run.lineage()
        _load(conn, nodes, wait=wait)
        before = [_Numbers.of(node) for node in nodes]
        own = run.state.own
        result = decide()
        for node, was in zip(nodes, before, strict=True):
            now = _Numbers.of(node)
            if now != was:
                _write(conn, node.state.run_id, now)
        if run.state.own != own:
            conn.execute(_WRITE_OWN, (_usage_json(run.state.own), run.state.run_id))
        self._record(conn, run, before[0], own, lost=lost)
        return result

    def _record(self, conn: Any, run: LiveRun, was: _Numbers, own: Usage, *, lost: bool) -> None:
        """The hold a decision took or released, and the spend it charged."""
        turns = run.reserved_turns - was.turns
        if turns > 0:
            conn.execute(
                "INSERT INTO ledger_holds (run_id, pico, tokens, turns, executor, held_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    run.state.run_id,
                    run.reserved_pico - was.pico,
                    run.reserved_tokens - was.tokens,
                    turns,
                    self.executor,
                    time.time(),
                ),
            )
        elif turns < 0:
            conn.execute("DELETE FROM ledger_holds WHERE run_id = %s", (run.state.run_id,))
        spent = run.state.own - own
        if spent.model_calls or spent.cost_pico:
            self._spend(conn, run.state, spent, lost=lost)

    def _spend(self, conn: Any, state: RunState, spent: Usage, *, lost: bool) -> None:
        """One spend row; a turn charged before (rare: see :data:`_LOSE_EARLIER_CHARGE`)
        has its earlier row made a lost call's first. Both statements go with
        the decision's other writes: nothing is read back."""
        if not lost:
            conn.execute(_LOSE_EARLIER_CHARGE, (state.run_id, state.turns + 1))
        conn.execute(
            _INSERT_SPEND,
            (
                state.run_id,
                state.root_id,
                state.turns + 1,
                spent.model_calls,
                spent.prompt_tokens,
                spent.completion_tokens,
                spent.cost_pico,
                lost,
                self.executor,
                time.time(),
            ),
        )

    async def settle_lost(self, run: LiveRun) -> Usage | None:
        """Charge a hold left by a call whose outcome was never recorded (its
        worker died mid-call, or its release gave up), at its reservation; and
        load the lineage's numbers either way (as :meth:`refresh`), in the same
        transaction.

        Call it when ``run`` is taken up (no call of the run is in flight
        then). Returns what was charged (None: no hold was left).
        """
        return await self._in_step(in_thread, self._settle_lost, run)

    def _settle_lost(self, run: LiveRun, fence: Fence | None) -> Usage | None:
        with self._fenced(fence) as conn:
            row = conn.execute(
                "SELECT pico, tokens, turns FROM ledger_holds WHERE run_id = %s",
                (run.state.run_id,),
            ).fetchone()
            if row is None:
                self._decided(conn, run, lambda: None)  # a refresh: nothing decided
                return None
            pico, tokens, turns = row
            lost = Usage(model_calls=1, prompt_tokens=tokens, cost_pico=pico)

            def charge() -> None:  # released like a call's hold (the row goes), charged in full
                run.reserve(-pico, -turns, -tokens)
                run.charge(lost)

            self._decided(conn, run, charge, lost=True)
        return lost

    @contextlib.contextmanager
    def _fenced(self, fence: Fence | None) -> Iterator[Any]:
        """One transaction, whose writes are fenced by ``fence`` (if given); batched
        (the fence's check goes with the first read, the writes with the commit)."""
        with self.store.transaction(batched=True) as conn:
            if fence is not None:
                self.store.check_fence(fence)
            yield conn

    async def _in_step(
        self, thread: Callable[..., Awaitable[_T]], fn: Callable[..., _T], *args: object
    ) -> _T:
        """``fn(*args, fence)`` through ``thread`` (:func:`in_thread` or
        :func:`attempt_in_thread`), fenced by the current step's claim; a
        refusal of that fence supersedes the step."""
        fence = step_fence()
        with _superseding():
            return await thread(fn, *args, fence)

    async def refresh(self, run: LiveRun) -> None:
        """Load the lineage's numbers (e.g. after a child on another worker spent)."""
        await self.guarded(run, lambda: None)

    def reconcile(self, root_id: str) -> list[str]:
        """Set the saved tree and own spend of the stopped runs of the tree
        ``root_id`` to the ledger's; the ids of the runs amended.

        The ledger is the record of what was charged: a run stopped in the
        database, a parent whose children spent after its last save, or a run
        whose worker died between a charge and its save, lags it until then.
        """
        with self.store.transaction() as conn:
            rows = self.store.lock_rows(
                conn,
                "SELECT run_id, tree, own FROM ledger WHERE root_id = %s ORDER BY depth, run_id"
                " FOR UPDATE",
                (root_id,),
            )
            usages = {
                run_id: (_usage(tree), None if own is None else _usage(own))
                for run_id, tree, own in rows
            }
            return self.store.amend_usage(usages)

    def spent(self, root_id: str) -> Usage:
        """The sum of the tree's ``ledger_spend`` rows."""
        with self.store.transaction() as conn:
            row = conn.execute(
                "SELECT coalesce(sum(model_calls), 0), coalesce(sum(prompt_tokens), 0), "
                "coalesce(sum(completion_tokens), 0), coalesce(sum(cost_pico), 0) "
                "FROM ledger_spend WHERE root_id = %s",
                (root_id,),
            ).fetchone()
        calls, prompt, completion, cost = (int(v) for v in row)
        return Usage(
            model_calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_pico=cost,
        )


def _load(conn: Any, nodes: Sequence[LiveRun], *, wait: bool = True) -> None:
    """Lock the lineage's rows (root first) and load them into its live runs
    (``wait=False``: :class:`_Busy` if another transaction holds one)."""
    by_id = {node.state.run_id: node for node in nodes}
    if wait:
        rows = conn.execute(_LOCK_LINEAGE, (list(by_id),)).fetchall()
    else:
        try:
            rows = conn.execute(_LOCK_LINEAGE_NOW, (list(by_id),)).fetchall()
        except psycopg.errors.LockNotAvailable as exc:
            raise _Busy(str(exc)) from exc
    if len(rows) != len(by_id):
        found = {row[0] for row in rows}
        missing = ", ".join(sorted(set(by_id) - found))
        raise StateError(f"the budget ledger has no row for run(s) {missing}")
    for run_id, tree, pico, tokens, turns, own in rows:
        node = by_id[run_id]
        _Numbers(_usage(tree), pico, tokens, turns).load_into(node)
        if own is not None:  # the run's own spend, as charged (its saved state may lag)
            node.state.own = _usage(own)


def _write(conn: Any, run_id: str, numbers: _Numbers) -> None:
    conn.execute(
        _WRITE_NODE,
        (_usage_json(numbers.tree), numbers.pico, numbers.tokens, numbers.turns, run_id),
    )


def _usage_json(usage: Usage) -> str:
    return orjson.dumps(usage.to_dict()).decode()


def _usage(text: str) -> Usage:
    return Usage(**orjson.loads(text))


class _Busy(Exception):
    """Another transaction holds a row of the lineage (a decision elsewhere)."""


@contextlib.contextmanager
def _superseding() -> Iterator[None]:
    """A decision refused because the step's claim was taken over supersedes the
    step (on the trio thread: a cancel scope is not thread-safe)."""
    try:
        yield
    except LeaseLost:
        supersede_step()
        raise
