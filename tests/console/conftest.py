"""Fixtures of the console tests: a console over the test's store, where screenshots go."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_support import Served, start_console, stop_console


@pytest.fixture
def console(private_store: Path) -> Iterator[Served]:
    """``orchestra console --port 0 --create`` over the test's (new) store; stopped
    (SIGTERM) after the test, which it must survive with exit code 0."""
    private_store.parent.mkdir(parents=True, exist_ok=True)
    served = start_console(private_store, create=True)
    try:
        yield served
    finally:
        stop_console(served)


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go: ``console/`` in ``$ORCHESTRA_ARTIFACTS``, else in the
    repo's ``.artifacts`` (as the README says)."""
    default = Path(__file__).resolve().parents[2] / ".artifacts"
    path = Path(os.environ.get("ORCHESTRA_ARTIFACTS") or default) / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path
