"""The run loop, in layers (each imports only those below it):

- :mod:`.execute` drives one run inside its cancel scope and records its one
  exit; :func:`~.execute.spawn_child` is the one way a child starts;
- :mod:`.loop` is a step: the limits, then a model call (or the pending tool
  calls of the last reply), its reply recorded;
- :mod:`.dispatch` runs a reply's tool calls (reads at once, writes in
  order, approvals, deduplication) and writes what it decided in words;
- :mod:`.budget` is the gate before each call (count, reserve, shrink
  ``max_tokens``) and the charge after it; :mod:`.fair` carves children's
  budgets and :mod:`.shape` bounds the tree's shape; :mod:`.wind_down` hands
  back what a run found when a limit stops it; :mod:`.budget_note` tells the
  model what it has left;
- :mod:`.answers` and :mod:`.stops` decide when a run has answered or must stop;
- :mod:`.run` is the live run (``LiveRun``) and the typed seams to whatever
  runs it (``Host`` and its parts, ``Ledger``).
"""
