"""A tree's events as an AG-UI event stream, for agent front ends (CopilotKit and others).

Needs the ``agui`` extra (``pip install 'orchestra-trees[agui]'``: the AG-UI
protocol's own package, ``ag-ui-protocol``); the core never imports it.
:class:`Translator` turns Orchestra's events into AG-UI events (a pure
function of the events, with a little state per stream); :func:`sse` serves
them as server-sent events from any ASGI app, over ``orchestra.aio``'s
``Handle.events()`` or trio's ``RunHandle.events()``:

    return StreamingResponse(agui.sse(handle.events()), media_type=agui.MEDIA_TYPE)

The mapping (AG-UI 1.0, whose subagent events are the protocol's own):

* the root's ``run_started`` → ``RUN_STARTED`` (its run id; the thread, the
  root's id unless given); its ``run_stopped`` → ``RUN_FINISHED`` (an
  ``interrupt`` outcome for a run waiting for a person or a grant, ``cancelled``
  for a cancelled one), or ``RUN_ERROR`` for ``failed``;
* a child's ``run_started`` → ``SUBAGENT_STARTED`` (``subagentRunId``: the
  child's run id; ``parentSubagentRunId``: its parent's, below the root's
  children; ``parentToolCallId``: the call that started it); its
  ``run_stopped`` → ``SUBAGENT_FINISHED`` (``suspended`` if ``interrupted``),
  or ``SUBAGENT_ERROR`` for ``failed``. Everything a child does
  carries its ``subagentRunId``;
* ``text_delta`` → ``TEXT_MESSAGE_START``/``CONTENT``/``END``, one message per
  reply (id ``<run id>:<turn>``; ended by the reply's ``turn``, a ``reply_cut``
  or the run's stop);
* ``tool_start`` → ``TOOL_CALL_START``/``ARGS``/``END`` (id ``<run id>:<call
  id>``, its parent message the reply that asked), ``tool_result`` →
  ``TOOL_CALL_RESULT`` (JSON of what Orchestra's events say of the call: ``ok``,
  ``ms``, an error; the result's text stays in the store);
* the budget's events, :data:`CUSTOM_EVENTS` (a reply's spend, a grant, a
  price assumed, a cut reply's charge) → ``CUSTOM`` events of the same name,
  and a stop at a limit (``max_turns_exceeded``, ``budget_exceeded``,
  ``deadline_exceeded``, or a ``budget_request``) → a ``CUSTOM`` event named so,
  before the run's end.

Orchestra's own fields of a run's start and stop (agent, model, limits;
status, reason, turns, own and tree cost) ride in ``metadata["orchestra"]``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

import attrs

try:
    from ag_ui.core import (
        PROTOCOL_VERSION,
        BaseEvent,
        CustomEvent,
        Interrupt,
        RunErrorEvent,
        RunFinishedCancelledOutcome,
        RunFinishedEvent,
        RunFinishedInterruptOutcome,
        RunStartedEvent,
        SubagentErrorEvent,
        SubagentFinishedEvent,
        SubagentFinishedSuspendedOutcome,
        SubagentStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
    from ag_ui.encoder import EventEncoder
except ModuleNotFoundError:  # pragma: no cover - the core install
    raise ModuleNotFoundError(
        "orchestra.agui needs the agui extra: pip install 'orchestra-trees[agui]'", name="ag_ui"
    ) from None

from ._events import Event, EventRecord

__all__ = ["CUSTOM_EVENTS", "LIMITS", "MEDIA_TYPE", "Translator", "event_of", "sse", "translate"]

CUSTOM_EVENTS = ("price_warning", "reply_cut", "top_up", "turn")
"""Orchestra's budget events, passed on as ``CUSTOM`` events of the same name
(value: the event's data with its ``run_id`` and ``parent_id``)."""
LIMITS = ("budget_exceeded", "deadline_exceeded", "max_turns_exceeded")
"""The stops at a limit, each said as a ``CUSTOM`` event of its name."""
MEDIA_TYPE = "text/event-stream"


@attrs.define
class _Run:
    """One run's place in the stream: its current reply's message, open or not."""

    message: str
    turn: object = None
    tries: int = 0
    open: bool = False


@attrs.define(eq=False)
class Translator:
    """Orchestra's events of one tree in, AG-UI events out (see the module docstring)."""

    thread_id: str | None = None
    """The AG-UI thread (the root's run id if none)."""
    _runs: dict[str, _Run] = attrs.field(factory=dict, init=False)
    _errors: dict[str, str] = attrs.field(factory=dict, init=False)
    _root: str | None = attrs.field(default=None, init=False)
    _thread: str = attrs.field(default="", init=False)

    def translate(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events ``event`` stands for (none for most of Orchestra's own)."""
        made = _HANDLERS.get(event.type, _nothing)(self, event)
        if event.type in CUSTOM_EVENTS:
            made.append(_custom(event.type, event))
        for out in made:
            out.timestamp = int(event.at * 1000)
        return made

    def end(self) -> list[BaseEvent]:
        """What ends a stream whose events stopped before its root did (a tree
        stopped by a store error or a lost lease): ``RUN_ERROR``; else nothing."""
        if self._root is None:
            return []
        closed: list[BaseEvent] = [
            TextMessageEndEvent(
                message_id=run.message, subagent_run_id=None if run_id == self._root else run_id
            )
            for run_id, run in self._runs.items()
            if run.open
        ]
        return [*closed, RunErrorEvent(message="the tree's events ended before it stopped")]

    def _run(self, run_id: str) -> _Run:
        return self._runs.setdefault(run_id, _Run(message=f"{run_id}:0"))

    def _close(self, event: Event) -> list[BaseEvent]:
        """``TEXT_MESSAGE_END`` of the run's open reply, if one is open."""
        run = self._run(event.run_id)
        if not run.open:
            return []
        run.open = False
        return [TextMessageEndEvent(message_id=run.message, subagent_run_id=_by(event))]

    def _started(self, event: Event) -> list[BaseEvent]:
        said = _said(event)
        if event.parent_id is None:
            self._root, self._thread = event.run_id, self.thread_id or event.root_id
            started = RunStartedEvent(
                thread_id=self._thread,
                run_id=event.run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata=said,
            )
            return [started]
        parent = None if event.parent_id == event.root_id else event.parent_id
        name = str(event.data.get("agent", "agent"))
        call = event.data.get("call_id")
        return [
            SubagentStartedEvent(
                subagent_run_id=event.run_id,
                name=name,
                parent_subagent_run_id=parent,
                parent_tool_call_id=None if call is None else f"{event.parent_id}:{call}",
                metadata=said,
            )
        ]

    def _asked(self, event: Event) -> list[BaseEvent]:
        """A model request: the next reply's message id (``<run>:<turn>``, and
        ``.<try>`` when a cut reply's turn is asked again)."""
        made, run = self._close(event), self._run(event.run_id)
        turn = event.data.get("turn")
        run.tries = run.tries + 1 if turn == run.turn else 1
        run.turn = turn
        suffix = "" if run.tries == 1 else f".{run.tries}"
        run.message = f"{event.run_id}:{turn}{suffix}"
        return made

    def _delta(self, event: Event) -> list[BaseEvent]:
        run, by = self._run(event.run_id), _by(event)
        made: list[BaseEvent] = []
        if not run.open:
            run.open = True
            start = TextMessageStartEvent(
                message_id=run.message, role="assistant", subagent_run_id=by
            )
            made.append(start)
        text = str(event.data.get("text", ""))
        made.append(TextMessageContentEvent(message_id=run.message, delta=text, subagent_run_id=by))
        return made

    def _tool_start(self, event: Event) -> list[BaseEvent]:
        made, run, by, call = self._close(event), self._run(event.run_id), _by(event), _call(event)
        name = str(event.data.get("tool", ""))
        arguments = json.dumps(event.data.get("args", {}), default=str)
        return [
            *made,
            ToolCallStartEvent(
                tool_call_id=call,
                tool_call_name=name,
                parent_message_id=run.message,
                subagent_run_id=by,
            ),
            ToolCallArgsEvent(tool_call_id=call, delta=arguments, subagent_run_id=by),
            ToolCallEndEvent(tool_call_id=call, subagent_run_id=by),
        ]

    def _tool_error(self, event: Event) -> list[BaseEvent]:
        self._errors[_call(event)] = str(event.data.get("error", ""))
        return []

    def _tool_result(self, event: Event) -> list[BaseEvent]:
        call = _call(event)
        said = {k: v for k, v in event.data.items() if k not in ("tool", "call_id", "depth")}
        if call in self._errors:
            said["error"] = self._errors.pop(call)
        content = json.dumps(said, default=str)
        made = ToolCallResultEvent(
            message_id=f"{call}:result",
            tool_call_id=call,
            content=content,
            role="tool",
            subagent_run_id=_by(event),
        )
        return [made]

    def _stopped(self, event: Event) -> list[BaseEvent]:
        made = self._close(event)
        limit = _limit(event.data)
        if limit is not None:
            made.append(_custom(limit, event))
        if event.parent_id is not None:
            return [*made, _subagent_end(event)]
        self._root = None
        return [*made, _run_end(event, self._thread or self.thread_id or event.root_id)]


def _nothing(_: Translator, __: Event) -> list[BaseEvent]:
    return []


_HANDLERS: dict[str, Callable[[Translator, Event], list[BaseEvent]]] = {
    "run_started": Translator._started,
    "model_request": Translator._asked,
    "text_delta": Translator._delta,
    "turn": Translator._close,
    "reply_cut": Translator._close,
    "tool_start": Translator._tool_start,
    "tool_error": Translator._tool_error,
    "tool_result": Translator._tool_result,
    "run_stopped": Translator._stopped,
}


def _by(event: Event) -> str | None:
    """The subagent an event is attributed to: its run, unless it is the root."""
    return None if event.parent_id is None else event.run_id


def _call(event: Event) -> str:
    """A tool call's AG-UI id: call ids are unique within a run only."""
    return f"{event.run_id}:{event.data.get('call_id')}"


def _custom(name: str, event: Event) -> CustomEvent:
    value = {"run_id": event.run_id, "parent_id": event.parent_id, **event.data}
    return CustomEvent(name=name, value=value, subagent_run_id=_by(event))


def _limit(stop: dict[str, Any]) -> str | None:
    """The limit a run stopped at, or the grant it asks for; None for other stops."""
    if stop.get("status") in LIMITS:
        return str(stop["status"])
    asked = stop.get("interruption") or {}
    return "budget_request" if asked.get("kind") == "budget_request" else None


def _said(event: Event) -> dict[str, Any]:
    """A run's start or stop as Orchestra says it, for the AG-UI event's metadata."""
    return {"orchestra": {k: v for k, v in event.data.items() if k != "depth"}}


def _interrupt(event: Event) -> Interrupt | None:
    """The AG-UI interrupt of a run waiting for a person (its own or a descendant's)."""
    asked = event.data.get("interruption")
    if not asked or asked.get("kind") == "cancelled":
        return None
    waiting, call = asked.get("run_id") or event.run_id, asked.get("call_id")
    return Interrupt(
        id=f"{waiting}:{call}" if call else waiting,
        reason=str(asked.get("kind")),
        message=asked.get("reason"),
        tool_call_id=f"{waiting}:{call}" if call else None,
        subagent_run_id=None if waiting == event.root_id else waiting,
        metadata={"orchestra": asked},
    )


def _run_end(event: Event, thread: str) -> BaseEvent:
    status, said = event.data.get("status"), _said(event)
    if status == "failed":
        reason = str(event.data.get("reason") or "failed")
        return RunErrorEvent(message=reason, code="failed", metadata=said)
    finished = RunFinishedEvent(thread_id=thread, run_id=event.run_id, metadata=said)
    if status == "interrupted":
        interrupt = _interrupt(event)
        finished.outcome = (
            RunFinishedCancelledOutcome()
            if interrupt is None
            else RunFinishedInterruptOutcome(interrupts=[interrupt])
        )
    return finished


def _subagent_end(event: Event) -> BaseEvent:
    status, said = event.data.get("status"), _said(event)
    if status == "failed":
        reason = str(event.data.get("reason") or "failed")
        return SubagentErrorEvent(
            subagent_run_id=event.run_id, message=reason, code="failed", metadata=said
        )
    finished = SubagentFinishedEvent(subagent_run_id=event.run_id, metadata=said)
    if status == "interrupted":
        interrupt = _interrupt(event)
        own = interrupt is not None and interrupt.subagent_run_id == event.run_id
        ids = [interrupt.id] if own and interrupt is not None else None
        finished.outcome = SubagentFinishedSuspendedOutcome(interrupt_ids=ids)
    return finished


def translate(events: Iterable[Event], *, thread_id: str | None = None) -> list[BaseEvent]:
    """The AG-UI events of a tree's events, in order (ended by :meth:`Translator.end`
    if its root never stopped in them)."""
    translator = Translator(thread_id=thread_id)
    made = [out for event in events for out in translator.translate(event)]
    return [*made, *translator.end()]


async def sse(events: AsyncIterable[Event], *, thread_id: str | None = None) -> AsyncIterator[str]:
    """A tree's events as AG-UI server-sent events (``data: <JSON>`` and a blank
    line each), for any ASGI app's streaming response (media type
    :data:`MEDIA_TYPE`); ``events``: ``Handle.events()`` of ``orchestra.aio``, or
    of trio's ``RunHandle``, or a stopped tree's records (:func:`event_of`)."""
    translator, encoder = Translator(thread_id=thread_id), EventEncoder()
    async for event in events:
        for out in translator.translate(event):
            yield encoder.encode(out)
    for out in translator.end():
        yield encoder.encode(out)


def event_of(record: EventRecord) -> Event:
    """The :class:`~orchestra.Event` of a stored event record (``store.events()``),
    to stream a tree that has stopped."""
    return Event.from_record(record)
