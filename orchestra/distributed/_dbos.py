"""Runs as DBOS workflows: one workflow per run attempt, one DBOS step per taking-up.

The workflow ``orchestra.run`` takes a run id and repeats the step
``orchestra.step`` until the run leaves ``running``. A step hands the run to
the worker's trio loop (``trio.from_thread.run``), which claims it and
executes its steps (one model call, or the pending tool calls of the last
reply) one after another, each saved in the run store before the next
begins, and returns the run's status; DBOS checkpoints that return value. A
workflow recovered on another worker after its worker died re-executes the
DBOS step in flight, which continues from the run's saved state: a paid
model call is never paid again, a tool with a result is never run again,
and a write in flight is in doubt as after any crash (an idempotent one runs
again with the same idempotency key). The store, not DBOS's step record, is
what makes a death cost only the run step in flight; one DBOS step per run
step would add two DBOS transactions and a claim to each.

Workflow ids are ``RUN_ID.ATTEMPT``: queueing a run's current attempt again
is a no-op (DBOS keeps the first), and a run resumed after an interruption
(approval) is queued under its next attempt.

DBOS is pinned (``dbos==3.4.0``); its internals used here are wrapped in two
places: ``DBOS._recover_pending_workflows`` in :func:`recover`, and the
claim and start of queued workflows (as its queue thread makes them: see
:mod:`._dispatch`) in :class:`_Claims`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NoReturn, Protocol
from urllib.parse import urlencode, urlsplit

import trio

from .._exceptions import StoreError, StoreUnreachable
from .._version import installed_version
from ._dispatch import IDLE_LOOK_S, Dispatcher, announce
from ._threads import StepAbandoned, in_thread

__all__ = [
    "APP_NAME",
    "APP_VERSION",
    "QUEUE",
    "WORKFLOW",
    "DBOSQueue",
    "config",
    "launch",
    "migrate",
    "recover",
    "serve",
    "workflow_id",
]

APP_NAME = "orchestra"
APP_VERSION = f"orchestra-{installed_version()}"
"""Pinned, so every worker of one release takes every run of that release
(DBOS's default is a hash of the workflow code)."""
QUEUE = "orchestra-runs"
WORKFLOW = "orchestra.run"
STEP = "orchestra.step"

CLIENT_LOCK_TIMEOUT_MS = 100
"""A client's statement waits this long for a row lock: a cancel does not wait
on a workflow row a stalled worker holds (see :meth:`DBOSQueue.cancel`)."""
BUSY_RETRIES = 20
"""Tries of an enqueue whose workflow row is locked (50 ms apart) before it fails."""

STARTING_S = 5.0
"""A workflow this process claimed and DBOS has not begun within this long has
ended or never will (a cancel came first): its slot is free again."""

STEP_ATTEMPTS = 20
"""Tries of a step that met an unreachable database (0.5 s apart, growing by
1.3×: about five minutes in all) before its workflow fails."""


class DatabaseAway(Exception):
    """A step was abandoned because the database could not be reached (DBOS retries it)."""


_serving: tuple[Callable[[str, int | None], Awaitable[str]], trio.lowlevel.TrioToken] | None = None
"""The trio function this process's steps call, and the loop it runs in."""
_claims: _Claims | None = None
_dispatcher: Dispatcher | None = None
"""How this process takes queued runs (while DBOS is launched here)."""


def workflow_id(run_id: str, attempt: int) -> str:
    """The workflow id of ``run_id``'s ``attempt`` (0 for its first)."""
    return f"{run_id}.{attempt}"


def attempt_of(workflow: str | None) -> int | None:
    """The attempt a workflow id names (see :func:`workflow_id`); None if it names none."""
    _, _, attempt = (workflow or "").rpartition(".")
    return int(attempt) if attempt.isdigit() else None


def system_url(database: str) -> str:
    """DBOS's system database: beside ours on the same server, named ``<db>_dbos``
    (``postgres_dbos`` for a URL that names no database)."""
    parts = urlsplit(database)
    name = parts.path.lstrip("/") or "postgres"
    return parts._replace(path=f"/{name}_dbos").geturl()


def config(database: str, executor_id: str) -> dict[str, Any]:
    """The DBOS configuration of a worker."""
    return {
        "name": APP_NAME,
        "system_database_url": system_url(database),
        "application_version": APP_VERSION,
        "executor_id": executor_id,
        "log_level": "WARNING",
        "sys_db_pool_size": 10,
    }


def migrate(database: str, transactions: Any) -> None:
    """Create DBOS's system database and tables if missing (blocking).

    One process at a time (an advisory lock in ``database``, through
    ``transactions``, a store), so workers starting together do not race.
    """
    DBOS = _dbos()
    with _session_lock(transactions, "orchestra.dbos"):
        DBOS.migrate(system_url(database))


@contextlib.contextmanager
def _session_lock(transactions: Any, name: str) -> Iterator[None]:
    """Hold the advisory lock ``name`` for the block, on this thread's connection.

    A session's lock, not a transaction's: a transaction left open while DBOS
    migrates on connections of its own is idle, and the server ends a session
    idle in a transaction after 2 s (``IDLE_IN_TRANSACTION_MS``), which a
    migration on a loaded machine outlasts (workers then exited 8 at start).
    A connection that breaks releases the lock with its session.
    """
    with transactions.transaction() as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
    try:
        yield
    finally:
        with transactions.transaction() as conn:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _dbos() -> Any:
    """The ``DBOS`` class, its logger quieted to warnings (it announces itself at INFO)."""
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    return DBOS


def _register() -> None:
    """Declare the workflow and its step (before DBOS is launched)."""
    from dbos import DBOS

    @DBOS.step(
        name=STEP,
        retries_allowed=True,
        max_attempts=STEP_ATTEMPTS,
        interval_seconds=0.5,
        backoff_rate=1.3,
        should_retry=lambda exc: isinstance(exc, DatabaseAway),
    )
    def advance(run_id: str) -> str:
        if _serving is None:
            raise RuntimeError("no orchestra worker serves steps in this process")
        fn, token = _serving
        attempt = attempt_of(DBOS.workflow_id)
        try:
            # DBOS calls steps in its executor threads; the run's state lives on the
            # trio loop, so the step is handed there and this thread waits for it
            return trio.from_thread.run(fn, run_id, attempt, trio_token=token)
        except BaseException as exc:  # DBOS retries Exceptions only: say which
            if _abandoned(exc):
                raise DatabaseAway(str(exc)) from exc
            raise

    @DBOS.workflow(name=WORKFLOW)
    def run_workflow(run_id: str) -> str:
        try:
            while True:
                status = advance(run_id)
                if status != "running":
                    return status
        finally:  # its claim no longer counts against the slots (see _Claims)
            if _claims is not None:
                _claims.ended(DBOS.workflow_id)


def serve(fn: Callable[[str, int | None], Awaitable[str]]) -> None:
    """Make ``fn`` (on the current trio loop) the step of this process's workflows:
    ``fn(run_id, attempt)``, the attempt the workflow was queued for."""
    global _serving
    _serving = (fn, trio.lowlevel.current_trio_token())


def launch(
    database: str, executor_id: str, concurrency: int, *, idle_look_s: float = IDLE_LOOK_S
) -> None:
    """Start DBOS in this process as worker ``executor_id`` (blocking: call it in a thread).

    Recovers the workflows this executor left pending (a worker restarted
    under its old id) and takes runs from the queue, at most ``concurrency``
    at a time: when one is announced, when a slot frees up for one that
    waited, and every ``idle_look_s`` (see :mod:`._dispatch`; DBOS's own
    queue thread listens to none of the queues).
    """
    global _claims, _dispatcher
    DBOS = _dbos()
    _register()
    DBOS(config=config(database, executor_id))
    DBOS.listen_queues([])
    DBOS.launch()
    queue = DBOS.register_queue(QUEUE, worker_concurrency=concurrency, on_conflict="always_update")
    claims = _claims = _Claims(queue)
    dispatcher = _dispatcher = Dispatcher(
        database=database, concurrency=concurrency, claims=claims, idle_look_s=idle_look_s
    )
    dispatcher.start()


def destroy() -> None:
    """Stop taking runs, then DBOS, in this process (blocking)."""
    from dbos import DBOS

    global _claims, _dispatcher
    if _dispatcher is not None:
        _dispatcher.stop()
    _claims = _dispatcher = None
    DBOS.destroy(workflow_completion_timeout_sec=0)


class _Claims:
    """This process's claims on the queue, made as DBOS's queue thread makes them
    (:meth:`SystemDatabase.start_queued_workflows`, then
    :func:`execute_dequeued_workflow` for each). DBOS counts a workflow as
    running here once its thread has begun it; until then (or for
    :data:`STARTING_S` at most: one cancelled before it began never is) it
    is counted here, so that a look right after a claim sees the slots it took."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._starting: dict[str, float] = {}
        self._lock = threading.Lock()

    def running(self) -> int:
        from dbos._dbos import _get_dbos_instance

        active = _get_dbos_instance()._active_workflows_set
        begun = set(active.activeList())
        now = time.monotonic()
        with self._lock:
            self._starting = {
                wid: at
                for wid, at in self._starting.items()
                if wid not in begun and now - at < STARTING_S
            }
            return active.count_for_queue(QUEUE) + len(self._starting)

    def take(self, room: int) -> int:
        from dbos._core import execute_dequeued_workflow
        from dbos._dbos import _get_dbos_instance
        from dbos._utils import GlobalParams, generate_uuid

        dbos = _get_dbos_instance()
        owner = generate_uuid()
        ids, _ = dbos._sys_db.start_queued_workflows(
            self._queue,
            GlobalParams.executor_id,
            GlobalParams.app_version,
            None,
            self._queue._worker_concurrency - room,
            owner_xid=owner,
            is_latest_version=False,  # ours are queued under this release's version
        )
        if not ids:
            return 0
        claimed = time.monotonic()
        with self._lock:
            self._starting.update(dict.fromkeys(ids, claimed))
        statuses = {s["workflow_uuid"]: s for s in dbos._sys_db.get_workflow_statuses(ids)}
        for wid in ids:
            try:
                execute_dequeued_workflow(dbos, statuses[wid], owner)
            except Exception as exc:  # it did not start (DBOS marked it so): its slot is free
                logging.getLogger(__name__).error("cannot start workflow %s: %s", wid, exc)
                self.ended(wid)
        return len(ids)

    def ended(self, workflow_id: str | None) -> None:
        """``workflow_id``'s function returned here (or never began): not starting."""
        with self._lock:
            self._starting.pop(workflow_id or "", None)


def recover(executor_ids: list[str], runs: QueuedRuns) -> int:
    """Queue again the workflows that dead executors left pending; how many.

    Any live worker then takes them (they are announced in ``runs``' database).
    Safe to call twice (only workflows still marked as the dead executors' are
    moved).
    """
    from dbos import DBOS

    moved = len(DBOS._recover_pending_workflows(executor_ids))
    if moved:
        announce(runs)
    return moved


class QueuedRuns(Protocol):
    """What a queue needs of the run store."""

    def attempt(self, run_id: str) -> int: ...

    def transaction(self) -> Any: ...


class DBOSQueue:
    """Queues runs for workers through a DBOS client (any process may queue)."""

    def __init__(self, database: str, runs: QueuedRuns, *, dbos_retries: bool = True) -> None:
        """``runs``: the store of the queued runs (their attempts; where each
        enqueue is announced to the workers, see :func:`._dispatch.announce`).

        ``dbos_retries=False``: a lost connection is raised (as StoreUnreachable)
        rather than retried by DBOS itself, with backoff up to a minute and no
        deadline; for a client whose callers retry within their own deadline.
        Such a client also waits at most :data:`CLIENT_LOCK_TIMEOUT_MS` for a
        row lock."""
        from dbos import DBOSClient

        url = system_url(database)
        if not dbos_retries:
            url = _with_options(url, f"-c lock_timeout={CLIENT_LOCK_TIMEOUT_MS}")
        self._client = DBOSClient(
            system_database_url=url,
            application_name=APP_NAME,
            retry_connection_errors=dbos_retries,
        )
        self._runs = runs

    def enqueue_now(self, run_id: str) -> str:
        """Queue ``run_id``'s current attempt (blocking); its workflow id.

        Raises:
            StoreUnreachable: the database could not be reached.
            StoreError: the workflow's row stayed locked (a worker stalled
                while holding it) through :data:`BUSY_RETRIES` tries.
        """
        wid = workflow_id(run_id, self._runs.attempt(run_id))
        options: Any = {
            "workflow_name": WORKFLOW,
            "queue_name": QUEUE,
            "workflow_id": wid,
            "app_version": APP_VERSION,
        }
        for _ in range(BUSY_RETRIES):
            try:
                self._client.enqueue(options, run_id)
            except Exception as exc:  # DBOS's own database errors, mapped at this boundary
                if not _locked(exc):
                    _raise_mapped(exc, f"cannot queue {run_id}")
            else:
                announce(self._runs)
                return wid
            time.sleep(0.05)
        raise StoreError(f"cannot queue {run_id}: its workflow stayed locked by a stalled worker")

    async def enqueue(self, run_id: str) -> None:
        """Queue ``run_id``'s current attempt (a no-op if it is queued or ran already)."""
        await in_thread(self.enqueue_now, run_id)

    def unfinished(self, workflow_ids: list[str]) -> dict[str, str | None]:
        """Those of ``workflow_ids`` that are queued or executing (blocking), each
        with the worker executing it (None: queued); a workflow that ended, or
        that DBOS never had, is not."""
        try:
            found = self._client.list_workflows(
                workflow_ids=workflow_ids, load_input=False, load_output=False
            )
        except Exception as exc:  # DBOS's own database errors, mapped at this boundary
            _raise_mapped(exc, "cannot read workflows")
        return {
            w.workflow_id: w.executor_id if w.status == "PENDING" else None
            for w in found
            if w.status in _LIVE
        }

    def cancel(self, workflow_ids: list[str]) -> None:
        """Take workflows off the queue, in one statement (blocking; those running
        end at their next step).

        Best effort if a workflow's row is locked (its worker is inside a DBOS
        transaction, or stalled there): they are left as they are, and each
        ends at its next step, which finds its run stopped.
        """
        if not workflow_ids:
            return
        try:
            self._client.cancel_workflows(workflow_ids)
        except Exception as exc:  # DBOS's own database errors, mapped at this boundary
            if not _locked(exc):
                _raise_mapped(exc, f"cannot cancel workflows {', '.join(workflow_ids)}")

    def close(self) -> None:
        """Close the client's connections."""
        self._client.destroy()


def _with_options(url: str, option: str) -> str:
    """``url`` with a libpq ``options`` setting added."""
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode({"options": option})) if q)
    return parts._replace(query=query).geturl()


def _raise_mapped(exc: Exception, doing: str) -> NoReturn:
    """Raise ``exc`` as StoreUnreachable if the database could not be reached, else as is."""
    if _is_connection_error(exc):
        raise StoreUnreachable(f"{doing}: {exc}") from exc
    raise exc


def _locked(exc: BaseException) -> bool:
    """Whether DBOS failed because a row lock was not granted in time."""
    import psycopg

    return isinstance(getattr(exc, "orig", exc), psycopg.errors.LockNotAvailable)


_LIVE = frozenset({"PENDING", "ENQUEUED", "DELAYED"})
"""DBOS's statuses of a workflow that has not ended."""


def _is_connection_error(exc: BaseException) -> bool:
    """Whether DBOS failed because its database could not be reached."""
    import psycopg
    import sqlalchemy.exc

    return isinstance(exc, sqlalchemy.exc.OperationalError | psycopg.OperationalError)


def _abandoned(exc: BaseException) -> bool:
    """Whether a step stopped because the database went away (alone or in a group)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(StepAbandoned)[0] is not None
    return isinstance(exc, StepAbandoned)
