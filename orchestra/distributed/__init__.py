"""Scale-out: the same run trees executed by worker processes over PostgreSQL.

Embedded (the default) a tree runs in one process and needs no database. With
``orchestra worker --store postgresql://…`` running on one or more machines,
runs submitted to that database are executed by whichever worker takes them,
as DBOS workflows (each model call or batch of tool calls saved before the
next, so a worker's death costs only the step in flight), with:

- a **PostgreSQL run store** with the same interface as the SQLite one
  (:class:`PostgresStore`);
- a **budget ledger** (:class:`PostgresLedger`): every reservation, release and
  charge of a tree, and every carve of a child's limits, is one transaction
  over the locked rows of the run's lineage, so no run of a tree spread over
  workers spends past its budget;
- **tree cancel across workers** (:func:`cancel_tree`): one request, applied
  by each worker's watcher to the trio cancel scopes of the runs it executes;
- **approval across workers** (:func:`resume_tree`): a run paused on one
  worker continues on any;
- **live events** (:func:`tree_events`): every event of a tree the workers
  execute, text deltas included, each with its run's depth, as it happens;
- **worker loss**: a worker whose heartbeat stops is declared dead and its
  workflows are queued again; tools with a result never run again, a write in
  flight runs again only if idempotent (same idempotency key).

Needs the ``[distributed]`` extra (``dbos`` pinned, ``psycopg``).
"""

from .._deps import DEPS_KEY
from ._client import Cluster, cancel_tree, ledger_rows, resume_tree, submit
from ._follow import tree_events
from ._ledger import PostgresLedger
from ._pgstore import PostgresStore
from ._worker import AGENTS_KEY, Worker

__all__ = [
    "AGENTS_KEY",
    "DEPS_KEY",
    "Cluster",
    "PostgresLedger",
    "PostgresStore",
    "Worker",
    "cancel_tree",
    "ledger_rows",
    "resume_tree",
    "submit",
    "tree_events",
]
