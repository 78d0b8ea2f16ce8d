"""What the stores share: row checks, lease wording, run id prefixes.

Used by the SQLite and the PostgreSQL stores (and the memory store), so each
rule is written once.
"""

from __future__ import annotations

import math
import os
import re
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from .._exceptions import ConfigError, LeaseError, RunNotFound, StateError

__all__ = [
    "alive",
    "check_limit",
    "checked_ttl",
    "event_row",
    "held_by",
    "message",
    "not_held",
    "now_or",
    "pick_run_id",
    "process_owner",
]

EVENT_KEYS = ("run_id", "root_id", "type", "at")
"""What every stored event has."""


def message(run_id: str, idx: int, data: str) -> dict[str, Any]:
    """Stored message ``idx`` of ``run_id``, decoded; :class:`StateError` if it is not
    a JSON object."""
    try:
        found = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StateError(f"message {idx} of run {run_id!r} is not valid JSON: {exc}") from exc
    if not isinstance(found, dict):
        raise StateError(f"message {idx} of run {run_id!r} is not a JSON object")
    return found


def now_or(now: float | None) -> float:
    """``now``, or the wall clock's time if None."""
    return time.time() if now is None else now


def check_limit(limit: int) -> None:
    """:class:`ConfigError` unless ``limit`` (how many runs to list) is >= 0."""
    if limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")


def checked_ttl(ttl: float) -> float:
    """``ttl`` if it is a positive finite number of seconds; :class:`ConfigError` if not."""
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ConfigError(f"a lease ttl must be a positive number of seconds, got {ttl}")
    return ttl


def process_owner() -> str:
    """This process, as lease owners are named: ``pid N on HOST`` (:func:`alive`
    reads it back)."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


def alive(owner: str) -> bool:
    """False only when ``owner`` is a process on this host that no longer exists.

    Owners are named ``pid N on HOST``; a lease left by a crashed (killed)
    process on this machine is released at once instead of after its ttl.
    """
    match = re.fullmatch(r"pid (\d+) on (.+)", owner)
    if match is None or match[2] != socket.gethostname():
        return True
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _describe(held: tuple[str, float], now: float) -> str:
    owner, expires_at = held
    until = datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    left = expires_at - now
    timing = f"{left:.1f} s left" if left > 0 else f"expired {-left:.1f} s ago"
    return f"{owner!r} until {until} ({timing})"


def held_by(root_id: str, held: tuple[str, float], now: float) -> LeaseError:
    """The error of taking a lease another owner holds."""
    return LeaseError(
        f"run {root_id!r} is leased by {_describe(held, now)}; another process is running it"
    )


def not_held(root_id: str, owner: str, held: tuple[str, float] | None, now: float) -> LeaseError:
    """The error of renewing a lease ``owner`` does not hold."""
    holder = "nobody" if held is None else _describe(held, now)
    return LeaseError(f"{owner!r} does not hold the lease on run {root_id!r} (held by {holder})")


def pick_run_id(prefix: str, ids: Sequence[str], where: object) -> str:
    """The one id ``prefix`` designates among the (sorted, capped) candidates."""
    if prefix in ids:
        return prefix
    if not ids:
        raise RunNotFound(f"no run id starts with {prefix!r} in {where}")
    if len(ids) > 1:
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise StateError(f"run id prefix {prefix!r} is ambiguous: {shown} (give more characters)")
    return ids[0]


def event_row(event: dict[str, Any]) -> tuple[str, str, str, float, str]:
    """The columns of one event; :class:`StateError` if it cannot be stored."""
    missing = [key for key in EVENT_KEYS if key not in event]
    if missing:
        raise StateError(f"an event needs {', '.join(missing)}; got keys {sorted(event)}")
    try:
        data = orjson.dumps(event).decode()
        return (event["run_id"], event["root_id"], event["type"], float(event["at"]), data)
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise StateError(f"event {event.get('type')!r} cannot be stored as JSON: {exc}") from exc
