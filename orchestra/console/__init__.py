"""The local web console (``orchestra console``): the run trees of a store, live.

Pages list the recent runs and show one run's tree (status, turns, own and
tree cost against its budget as a bar, why each run stopped), the transcript
of any run in it and its events, updated as the runs go on. Its buttons
approve or reject a call waiting for a human, resume a stopped tree (in a
process of its own) and stop a running tree (a cancel request in the store,
applied by the process running it, as ``orchestra cancel`` does).

The server (Hypercorn's trio worker, Starlette) listens on 127.0.0.1 only
and needs the ``console`` extra: ``pip install 'orchestra-trees[console]'``. This
module imports neither, so ``orchestra --help`` and the other commands start
without them.

Modules, one concern each: ``_server`` (the socket and Hypercorn), ``_app``
(routes), ``_guard`` (hosts, session tokens, security headers), ``_reads``
(store snapshots), ``_actions`` (what the buttons do), ``_launches`` (resume
processes), ``_live`` (server-sent events), ``_html`` (escaped markup) and
the views: ``_page``, ``_runs_view``, ``_run_view``, ``_actions_view``,
``_tree_view``, ``_transcript_view``, ``_events_view``.
"""

from __future__ import annotations

import importlib.util

__all__ = ["REQUIRED", "missing_packages"]

REQUIRED = ("hypercorn", "starlette")
"""The packages the console needs beyond Orchestra's own (the ``console`` extra)."""


def missing_packages() -> list[str]:
    """Which of :data:`REQUIRED` cannot be imported here."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]
