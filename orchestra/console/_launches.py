"""Resumes the console starts: each an ``orchestra resume`` process of its own.

A resumed tree runs in its own process, as if resumed from a shell: it takes
the tree's lease, applies cancel requests (so Stop works on it as on any
run) and saves as it goes. The console keeps its exit code and, if it failed
to resume, its ``error: …`` line to show. When the console stops, the resumes
it started are stopped gracefully (SIGTERM: every run saved ``interrupted``,
resumable later).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from .._exceptions import StateError
from .._views.exits import INTERNAL, OPERATIONAL, USAGE

__all__ = ["Launch", "Launches"]

ORCHESTRA = (sys.executable, "-m", "orchestra")


@attrs.define(kw_only=True)
class Launch:
    """One ``orchestra resume`` started from the console."""

    root_id: str
    started_at: float = attrs.Factory(time.time)
    returncode: int | None = None
    said: str = ""
    """Its last ``error: …`` line, if it printed one."""
    ended: trio.Event = attrs.field(factory=trio.Event, repr=False)
    """Set once its process has exited."""

    @property
    def running(self) -> bool:
        return self.returncode is None

    @property
    def failed(self) -> bool:
        """Whether it could not resume the tree (a usage, operational or internal error,
        or killed): a tree that stopped, even at a limit, is not a failure to resume."""
        code = self.returncode
        return code is not None and (code < 0 or code in (USAGE, OPERATIONAL, INTERNAL))


class Launches:
    """The resume processes started by this console, by root run id."""

    def __init__(
        self, *, nursery: trio.Nursery, store_path: Path | str, command: Sequence[str] = ORCHESTRA
    ) -> None:
        self._nursery = nursery
        self._store_path = store_path
        self._command = tuple(command)
        self._by_root: dict[str, Launch] = {}

    def get(self, root_id: str) -> Launch | None:
        return self._by_root.get(root_id)

    def start(self, root_id: str) -> Launch:
        """Start ``orchestra resume ROOT_ID`` in a new process.

        Raises:
            StateError: a resume of this tree started here is still running.
        """
        earlier = self._by_root.get(root_id)
        if earlier is not None and earlier.running:
            raise StateError(f"run {root_id} is being resumed already (by this console)")
        launch = self._by_root[root_id] = Launch(root_id=root_id)
        self._nursery.start_soon(self._run, launch)
        return launch

    async def _run(self, launch: Launch) -> None:
        store = ("--store", str(self._store_path))
        command = [*self._command, "resume", *store, "--json", "--", launch.root_id]
        done = await trio.run_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            capture_stderr=True,
            check=False,
            start_new_session=True,  # Ctrl-C in the console's terminal is the console's alone
        )
        launch.returncode = done.returncode
        lines = done.stderr.decode(errors="replace").splitlines()
        launch.said = next((line for line in reversed(lines) if line.startswith("error:")), "")
        launch.ended.set()
