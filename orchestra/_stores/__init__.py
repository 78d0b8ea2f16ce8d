"""Where run states are kept: the store contract and the stores.

:mod:`.contract` (the typed protocols every store fulfils: ``Store``,
``CancelInbox``, ``Leases``, ``DurableStore``), :mod:`.fence` (fencing
tokens), :mod:`.memory` (``MemoryStore``), :mod:`.sql` (the body both SQL
stores share, over a small dialect), :mod:`.sqlite` (``SQLiteStore``, the
default store), :mod:`.shared` (row checks and wording every store uses),
:mod:`.transcripts` (saving a transcript by appending) and :mod:`.serde`
(run state to JSON and back, with a schema version check). The PostgreSQL
store is in :mod:`orchestra.distributed`. Nothing is imported here: each
module loads its own dependencies when it is imported.
"""
