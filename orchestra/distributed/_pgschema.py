"""The PostgreSQL store's tables: their layout, its version, and migrations.

Store schema versions (of the tables, not of the run states inside them):

1. the tables below without epochs;
2. leases and runs carry an epoch (fencing);
3. the ``live_text`` table;
4. runs can be ``parked`` (waiting for their children, holding no worker),
   and are indexed by parent;
5. indexes for the workers' frequent queries: the running runs (the sweep)
   and the ledger's rows by tree (a root's reconcile), so neither reads the
   finished runs;
6. runs record the run whose step executes them (``step_of``: a child run
   executed inline, inside its parent's step, holding no workflow of its own);
7. the function ``orchestra_fence``: a fence checked by the server, so a
   batched write sends its check with its writes (see
   :attr:`PostgresStore.FENCE_CHECK`).

A database of an older version is migrated in place (each step from its
version on, in one transaction under the caller's lock); a newer or unknown
version is refused with a clear message.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

from .._exceptions import LeaseLost, StateError
from .._state import Status
from .._stores.fence import Fence, fence_lost

__all__ = ["FENCE_SQLSTATE", "PG_SCHEMA_VERSION", "create_or_migrate", "refusal"]

PG_SCHEMA_VERSION = 7
"""Version of the tables' layout (not of the run states inside them)."""

# Ids compare byte by byte ("C"), as in SQLite: the same order everywhere, and
# a prefix search (``LIKE 'abc%'``) can use the primary key's index.
_LIVE_TEXT_TABLE = """CREATE TABLE IF NOT EXISTS live_text (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    root_id TEXT COLLATE "C" NOT NULL,
    text TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    tokens BIGINT NOT NULL DEFAULT 0,
    prompt BIGINT NOT NULL DEFAULT 0,
    cap BIGINT NOT NULL DEFAULT 0
)"""
"""What each run is streaming now (see :class:`~orchestra._stores.contract.StreamNotes`)."""

_PARKING = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS parked BOOLEAN NOT NULL DEFAULT false",
    "CREATE INDEX IF NOT EXISTS runs_parent_id ON runs (parent_id)",
    "CREATE INDEX IF NOT EXISTS runs_parked ON runs (run_id) WHERE parked",
)
"""A run waiting for its children holds no worker: it is *parked* (see
:meth:`PostgresStore.park`); its children are found by ``parent_id``."""

_RUNNING_INDEX = (
    f"CREATE INDEX IF NOT EXISTS runs_running ON runs (updated_at)"
    f" WHERE status = '{Status.RUNNING.value}'"
)
"""The running runs alone (the sweep's query; a handful among many finished).
Queries that are to use it name the status as this literal, not as a
parameter: a generic plan cannot prove a parameter matches the predicate."""

_STEP_OF = 'ALTER TABLE runs ADD COLUMN IF NOT EXISTS step_of TEXT COLLATE "C"'
"""A child executed inside its parent's step (see :class:`~._host.Inline`) names
the run whose claim covers it; NULL for a run that steps on its own."""

FENCE_SQLSTATE = "OR001"
"""The error ``orchestra_fence`` raises; its detail is JSON: the fence checked
(``scope``, ``key``, ``holder``, ``epoch``) and what the database has
(``found``: ``[holder, epoch]``, null if nobody holds it)."""

_FENCE_FUNCTION = f"""CREATE OR REPLACE FUNCTION orchestra_fence(
    p_scope TEXT, p_key TEXT, p_holder TEXT, p_epoch BIGINT
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    found_holder TEXT;
    found_epoch BIGINT;
BEGIN
    IF p_scope = 'claim' THEN
        SELECT executor, epoch INTO found_holder, found_epoch
        FROM runs WHERE run_id = p_key FOR SHARE;
    ELSE
        SELECT NULLIF(owner, ''), epoch INTO found_holder, found_epoch
        FROM leases WHERE root_id = p_key FOR SHARE;
    END IF;
    IF found_epoch IS NULL OR found_holder IS DISTINCT FROM p_holder
            OR found_epoch <> p_epoch THEN
        RAISE EXCEPTION 'orchestra fence lost' USING ERRCODE = '{FENCE_SQLSTATE}',
            DETAIL = json_build_object(
                'scope', p_scope, 'key', p_key, 'holder', p_holder, 'epoch', p_epoch,
                'found', CASE WHEN found_holder IS NULL THEN NULL
                    ELSE json_build_array(found_holder, found_epoch) END)::text;
    END IF;
END $$"""
"""Raise :data:`FENCE_SQLSTATE` unless the holder and epoch of the lease or claim
named are the ones given; the row read stays share-locked until the commit
(a takeover, which updates it, waits for the fenced write, or the check waits
for the takeover and then fails), as the store's client-side check."""


def refusal(exc: psycopg.Error) -> LeaseLost:
    """The :class:`LeaseLost` of a fence that ``orchestra_fence`` refused (``exc``:
    its :data:`FENCE_SQLSTATE` error), worded as the store's own check words it."""
    said = orjson.loads(exc.diag.message_detail or "{}")
    fence = Fence(scope=said["scope"], key=said["key"], holder=said["holder"], epoch=said["epoch"])
    found = said["found"]
    return fence_lost(fence, None if found is None else (found[0], int(found[1])))


_TABLES = (
    """CREATE TABLE runs (
        run_id TEXT COLLATE "C" PRIMARY KEY,
        root_id TEXT COLLATE "C" NOT NULL,
        parent_id TEXT COLLATE "C",
        agent TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL,
        messages INTEGER NOT NULL DEFAULT 0,
        executor TEXT,
        attempt INTEGER NOT NULL DEFAULT 0,
        epoch BIGINT NOT NULL DEFAULT 0,
        parked BOOLEAN NOT NULL DEFAULT false,
        step_of TEXT COLLATE "C"
    )""",
    "CREATE INDEX runs_root_id ON runs (root_id)",
    *_PARKING[1:],
    "CREATE INDEX runs_updated_at ON runs (updated_at)",
    _RUNNING_INDEX,
    """CREATE TABLE messages (
        run_id TEXT COLLATE "C" NOT NULL,
        idx INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, idx)
    )""",
    """CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT COLLATE "C" NOT NULL,
        root_id TEXT COLLATE "C" NOT NULL,
        type TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        data TEXT NOT NULL
    )""",
    "CREATE INDEX events_run_id ON events (run_id, seq)",
    "CREATE INDEX events_root_id ON events (root_id, seq)",
    """CREATE TABLE cancels (
        run_id TEXT COLLATE "C" PRIMARY KEY,
        root_id TEXT COLLATE "C" NOT NULL,
        reason TEXT NOT NULL,
        requested_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX cancels_root_id ON cancels (root_id)",
    """CREATE TABLE leases (
        root_id TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        epoch BIGINT NOT NULL DEFAULT 0
    )""",
    _LIVE_TEXT_TABLE,
    _FENCE_FUNCTION,
    "CREATE TABLE orchestra_schema (version INTEGER NOT NULL)",
)

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE leases ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0",
    ),
    2: (_LIVE_TEXT_TABLE,),
    3: _PARKING,
    4: (
        _RUNNING_INDEX,
        # the ledger's own tables are made by PostgresLedger.create (which makes
        # this index in a ledger it creates); one made before version 5 gets it here
        """DO $$ BEGIN
            IF to_regclass('ledger') IS NOT NULL THEN
                CREATE INDEX IF NOT EXISTS ledger_root_id ON ledger (root_id);
            END IF;
        END $$""",
    ),
    5: (_STEP_OF,),
    6: (_FENCE_FUNCTION,),
}
"""The statements that take a database from each version to the next."""


def create_or_migrate(conn: Any, shown_url: str) -> None:
    """Create the tables in ``conn``'s transaction, or migrate them to
    :data:`PG_SCHEMA_VERSION` (the caller holds the schema's lock).

    Raises:
        StateError: the tables were made by an unknown store schema version.
    """
    (exists,) = conn.execute("SELECT to_regclass('orchestra_schema') IS NOT NULL").fetchone()
    if not exists:
        for statement in _TABLES:
            conn.execute(statement)
        conn.execute("INSERT INTO orchestra_schema VALUES (%s)", (PG_SCHEMA_VERSION,))
        return
    found = [v for (v,) in conn.execute("SELECT version FROM orchestra_schema")]
    if len(found) != 1 or found[0] not in (*_MIGRATIONS, PG_SCHEMA_VERSION):
        shown = found[0] if len(found) == 1 else found
        raise StateError(
            f"{shown_url} has store schema version {shown!r}; this Orchestra "
            f"reads version {PG_SCHEMA_VERSION} only (upgrade Orchestra)"
        )
    if found[0] == PG_SCHEMA_VERSION:
        return
    for version in range(found[0], PG_SCHEMA_VERSION):
        for statement in _MIGRATIONS[version]:
            conn.execute(statement)
    conn.execute("UPDATE orchestra_schema SET version = %s", (PG_SCHEMA_VERSION,))
