"""Where run states are kept: the stores and the run state's saved form.

:mod:`.memory` (the ``Store`` protocol and ``MemoryStore``), :mod:`.sqlite`
(``SQLiteStore``, the default store, with cancel requests and leases),
:mod:`.transcripts` (saving a transcript by appending) and :mod:`.serde` (run
state to JSON and back, with a schema version check). The PostgreSQL store is
in :mod:`orchestra.distributed`. Nothing is imported here: each module loads
its own dependencies when it is imported.
"""
