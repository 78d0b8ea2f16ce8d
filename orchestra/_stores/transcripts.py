"""Saving a run's transcript by appending: a turn's save costs what the turn added.

A run state is saved after every step, and its transcript only grows: a step
appends a reply or a batch of tool results, and no code rewrites a message
once it is in ``messages``. Stores therefore keep the transcript apart from
the rest of the state (the *head*: status, usage, limits...), as one record
per message, and on each save write the head plus only the messages the
store has not seen.

:class:`SavedTranscripts` remembers, per run, how many messages a store has
written and which object the last one was; a state whose transcript does not
extend that (a state loaded afresh, one whose list was replaced) is written
whole, so a store never holds a transcript that is not the state's.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._exceptions import StateError
from .._redact import redact
from .._state import Interruption, LimitRaise, RunState
from .serde import state_from_dict

__all__ = ["SavedTranscripts", "head_json", "joined", "message_json", "store_rows"]


def head_json(state: RunState) -> str:
    """The state without its transcript, as JSON text (see :func:`joined`).

    The same document as :func:`~orchestra._stores.serde.state_to_dict` minus
    ``messages`` (a test holds them equal), built by hand: it is written at
    every step, and orjson takes the state's dicts and lists as they are
    where the converter would copy each one first.
    """
    s = state
    document = {
        "run_id": s.run_id,
        "root_id": s.root_id,
        "agent": s.agent,
        "model": s.model,
        "parent_id": s.parent_id,
        "parent_call_id": s.parent_call_id,
        "schema_version": s.schema_version,
        "status": s.status.value,
        "reason": redact(s.reason),
        "error": None if s.error is None else redact(s.error),
        "interruption": _interruption(s.interruption),
        "limits": s.limits.saved(),
        "limit_raises": [_raise(r) for r in s.limit_raises],
        "own": s.own.to_dict(),
        "tree": s.tree.to_dict(),
        "approvals": [{"call_id": a.call_id, "arguments": a.arguments} for a in s.approvals],
        "rejections": s.rejections,
        "results": s.results,
        "started": s.started,
        "children": s.children,
        "awaiting": s.awaiting,
        "elapsed_s": s.elapsed_s,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "trace_context": s.trace_context,
        "metadata": s.metadata,
        "answer_partial": s.answer_partial,
        "output": s.output,
        "continues": s.continues,
        "conversation_id": s.conversation_id,
    }
    if s.winding_down is not None:  # saved only when set, as by state_to_dict
        wind = s.winding_down
        document["winding_down"] = {"status": wind.status.value, "reason": wind.reason}
    if s.settings is not None and not s.settings.empty:  # the same
        document["settings"] = s.settings.saved()
    return _text(orjson.dumps(document))


def message_json(message: dict[str, Any]) -> str:
    """One transcript message as JSON text."""
    return _text(orjson.dumps(message))


def _text(json: bytes) -> str:
    """``json`` as text, sized to fit: orjson's bytes keep its whole 4 KB buffer
    however short the document, and a store keeps what it is given."""
    return json.decode()


def _interruption(value: Interruption | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {**value.to_dict(), "reason": redact(value.reason)}


def _raise(value: LimitRaise) -> dict[str, Any]:
    return {
        "at": value.at,
        "before": value.before.saved(),
        "after": value.after.saved(),
        "note": value.note,
    }


def joined(head: str | bytes, messages: list[dict[str, Any]]) -> RunState:
    """The state saved as ``head`` with its transcript ``messages``.

    Raises:
        StateError: ``head`` is not a run state (see :func:`state_from_dict`).
        SchemaVersionError: it was saved by an unknown schema version.
    """
    data = _loads(head)
    if isinstance(data, dict):
        data["messages"] = messages
    return state_from_dict(data)


def _loads(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise StateError(f"run state is not valid JSON: {exc}") from exc


class SavedTranscripts:
    """Which part of each run's transcript a store holds already."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, object]] = {}

    def unsaved(self, state: RunState) -> tuple[int, list[dict[str, Any]]]:
        """``(start, messages)``: the messages to write, from index ``start``.

        ``start`` is 0 (write the whole transcript, replacing what is stored)
        unless the state extends what this store last wrote for the run.
        """
        messages = state.messages
        count, last = self._held.get(state.run_id, (0, None))
        if 0 < count <= len(messages) and messages[count - 1] is last:
            return count, messages[count:]
        return 0, messages

    def written(self, state: RunState) -> None:
        """Note that ``state``'s whole transcript is stored now (after the commit)."""
        messages = state.messages
        if state.status.terminal or not messages:
            self._held.pop(state.run_id, None)  # saved again only by a later resume
        else:
            self._held[state.run_id] = (len(messages), messages[-1])


RunRow = tuple[str, str, str | None, str, str, float, float, str, int]
"""A run's row in a SQL store: run_id, root_id, parent_id, agent, status,
created_at, updated_at, the head (JSON) and the number of messages."""
MessageRow = tuple[str, int, str]
"""One message of a transcript: run_id, its index, the message (JSON)."""


def store_rows(saved: SavedTranscripts, state: RunState) -> tuple[RunRow, int, list[MessageRow]]:
    """A SQL store's rows for saving ``state``: the run's row, where its unsaved
    messages start (0: the transcript is written whole), and their rows.

    Raises:
        StateError: the state cannot be stored as JSON.
    """
    start, unsaved = saved.unsaved(state)
    try:
        head = head_json(state)
        messages = [(state.run_id, start + i, message_json(m)) for i, m in enumerate(unsaved)]
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise StateError(f"run {state.run_id!r} cannot be stored as JSON: {exc}") from exc
    row = (
        state.run_id,
        state.root_id,
        state.parent_id,
        state.agent,
        state.status.value,
        state.created_at,
        state.updated_at,
        head,
        len(state.messages),
    )
    return row, start, messages
