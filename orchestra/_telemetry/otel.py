"""OpenTelemetry spans for the run tree, following the GenAI semantic conventions.

Conventions followed: the OpenTelemetry GenAI semantic conventions
(github.com/open-telemetry/semantic-conventions-genai, status Development:
read at main, commit e9de14b, whose registry the tests check every emitted
``gen_ai.*`` key against), which build on the general semantic conventions
v1.41.1 (``error.type``, ``server.*``, ``exception.*``): the tracer's schema
URL is :data:`SCHEMA_URL`. The names emitted before (the conventions at commit
002c8a6) come with ``ORCHESTRA_OTEL_SEMCONV=gen_ai_legacy``: see
:mod:`orchestra._telemetry.semconv`.

Each process segment of a run starts with an ``orchestra.segment {agent}``
span that ends at once (so it is exported even if the process is then
killed); the segment's ``invoke_agent {agent}`` span, its ``chat {model}``
spans (one per model call) and ``execute_tool {tool}`` spans (one per tool
call) are its children, and so is a child run's segment span (with a link to
the spawning ``execute_tool`` span and its ``gen_ai.tool.call.id``). One trace
holds the whole tree, and only segment spans, which end first, are parents:
after ``kill -9`` the spans in flight (the killed segment's agent span, its
unfinished chat and tool spans) are lost, but no exported span points at a
parent that never was.

Costs and tokens are never counted twice. Each chat span carries its call's
cost (``orchestra.call.cost_usd``, and the same number as ``llm.cost.total``,
which OpenInference/Phoenix sums; with the legacy names also
``gen_ai.usage.cost``, which Langfuse sums) and its token counts
(``gen_ai.usage.*``): summing them over a trace gives the tree's spend. Agent
spans carry what was spent *during that span* (a run that spans several
processes has one agent span per process, so they add up): own and inclusive
cost as ``orchestra.usage.cost.own_usd`` / ``orchestra.usage.cost.tree_usd``
(named after the proposed ``gen_ai.usage.cost.*``; the same numbers as
``orchestra.run.cost_usd`` and ``orchestra.tree.cost_usd``), tokens under
``orchestra.run.*`` / ``orchestra.tree.*`` only (names no backend sums), and
the run's totals so far in ``orchestra.run.cost_usd_total`` /
``orchestra.tree.cost_usd_total``. There is no ``orchestra.cost_usd``: it meant
the call's cost on one span kind and the run's on another.

A run that did not complete has span status ERROR, ``error.type`` its status
(``failed``, ``budget_exceeded``, ``max_turns_exceeded``,
``deadline_exceeded``) or, when ``interrupted``, what it waits for
(``approval``, ``cancelled``, ``unknown_outcome``, ``provider_unavailable``,
``no_progress``, ``stop_condition``), and its redacted stop reason as the
status description. A tool that raised has an ``exception`` event
(``exception.type``; ``exception.message`` only with content capture) and
``error.type`` its exception class; one that ran out of time ``timeout``.
Chat and tool spans still open when their run stops end with the run's
``error.type``.

The context of a run's first segment span is saved with its state
(``RunState.trace_context``): a run resumed in another process, days later,
starts its new segment span as a child of that one, which was exported when
that segment started (a child resumed under its resumed parent hangs under
the parent's new segment span, with a link to its own first one); the new
agent span has an ``orchestra.decision`` event for each waiting call a human
decided on.

Spans are built from the run's events on the trio thread, through any
OpenTelemetry ``TracerProvider``: the SDK's (sampling, custom processors) or
:func:`configure_otlp`'s lean one, which records spans as plain data and
exports them from a child process. Contents (messages, tool arguments and
results) are recorded only when content capture is on (see
:mod:`orchestra._telemetry.otel_content`). Stop reasons and error texts are redacted of
secrets (events already are; see :mod:`orchestra._redact`).
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit

import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._core.dispatch import pending_calls
from .._core.run import LiveRun
from .._events import Event
from .._model.provider import endpoint_of, name_of
from .._redact import redact
from .._state import RunState, Usage
from .._state import Status as RunStatus
from .._version import installed_version
from . import otel_content as content
from .otlp_protocol import protocol_name
from .semconv import LEGACY, agent_extras, chat_extras, semconv_from_env
from .semconv import agent_id as agent_id
from .spans import RecordingTracerProvider

__all__ = ["SCHEMA_URL", "OTelTracer", "configure_otlp", "finish_export", "flush_spans"]

_PROPAGATOR = TraceContextTextMapPropagator()
_INSTRUMENTATION = "orchestra"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.1"
"""The semantic conventions version the GenAI conventions we follow build on."""


def package_version() -> str:
    """Orchestra's installed version (the instrumentation scope's and ``service.version``)."""
    return installed_version()


class OTelTracer:
    """Turns a runner's events into OpenTelemetry spans.

    Pass it as ``Runner(tracer=OTelTracer())``. ``provider_name`` fills
    ``gen_ai.provider.name``; by default the runner's provider names itself
    (``OpenAIProvider.provider_name``). ``capture_content`` records messages,
    tool arguments and results (redacted, bounded); None follows
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (off unless ``true``).
    ``semconv`` picks the convention names (``gen_ai``, the default, or
    ``gen_ai_legacy``: see :mod:`orchestra._telemetry.semconv`); None follows
    ``ORCHESTRA_OTEL_SEMCONV``.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        provider_name: str | None = None,
        capture_content: bool | None = None,
        semconv: str | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            _INSTRUMENTATION,
            package_version(),
            tracer_provider=tracer_provider,
            schema_url=SCHEMA_URL,
        )
        self._provider_name = provider_name
        self._semconv = semconv_from_env(semconv)
        self._capture = content.capture_from_env() if capture_content is None else capture_content
        self._endpoint: tuple[object, dict[str, Any]] | None = None
        self._agents: dict[str, Span] = {}
        self._contexts: dict[str, otel_context.Context] = {}
        self._chats: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}
        self._raised: dict[tuple[str, str], str] = {}
        self._unread: list[tuple[LiveRun, str, Span, int]] = []
        self._at_start: dict[str, tuple[Usage, Usage]] = {}
        self._top_ups: dict[str, float] = {}
        self._handlers = {  # event type -> its _on_<type> method
            name.removeprefix("_on_"): getattr(self, name)
            for name in dir(self)
            if name.startswith("_on_")
        }

    @property
    def capture_content(self) -> bool:
        """Whether contents are recorded on spans."""
        return self._capture

    @property
    def semconv(self) -> str:
        """The convention names spans carry: ``gen_ai`` or ``gen_ai_legacy``."""
        return self._semconv

    def __call__(self, run: LiveRun, event: Event) -> None:
        if self._unread:
            self._end_unread()
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(run, event)

    def _server(self, run: LiveRun) -> dict[str, Any]:
        """``gen_ai.provider.name`` and ``server.address``/``port`` of the run's provider."""
        provider = run.route[0]
        if self._endpoint is None or self._endpoint[0] is not provider:
            self._endpoint = (provider, _endpoint(provider, self._provider_name))
        return self._endpoint[1]

    def _common(self, run: LiveRun, *, agent: bool = True) -> dict[str, Any]:
        """What chat and tool spans share: the conversation, the agent (unless not
        ``agent``), the run."""
        state = run.state
        return {
            "gen_ai.conversation.id": conversation_id(run),
            **({"gen_ai.agent.name": state.agent} if agent else {}),
            "orchestra.run.id": state.run_id,
        }

    # -- agent spans ------------------------------------------------------------

    def _on_run_started(self, run: LiveRun, event: Event) -> None:
        state = run.state
        resumed = bool(event.data.get("resumed"))
        segment = self._start_segment(run, resumed)
        context = trace.set_span_in_context(segment)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": state.agent,
            **agent_extras(
                self._semconv,
                agent=state.agent,
                model=state.model,
                provider=self._server(run)["gen_ai.provider.name"],
            ),
            "gen_ai.conversation.id": conversation_id(run),
            "gen_ai.request.model": state.model,
            **_ids(run),
            **({"orchestra.continues": state.continues} if state.continues else {}),
            "orchestra.resumed": resumed,
        }
        if self._capture:
            system = content.system_instructions(state.messages)
            if system is not None:
                attributes["gen_ai.system_instructions"] = system
        span = self._tracer.start_span(
            f"invoke_agent {state.agent}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        if resumed:
            _add_decisions(span, state)
        self._agents[state.run_id] = span
        self._contexts[state.run_id] = context
        self._at_start[state.run_id] = (state.own, state.tree)

    def _start_segment(self, run: LiveRun, resumed: bool) -> Span:
        """This process segment's span, ended at once so that it is exported first.

        Its parent: the parent run's segment span when the parent runs here
        (with a link to the spawning tool call's span, which a crash may
        lose), else the run's saved first segment span (exported when it
        started), else none (a new trace). The run saves its context only
        when it has none yet, or when it hangs under a live parent.
        """
        state = run.state
        saved = trace.INVALID_SPAN_CONTEXT
        if state.trace_context:  # saved by an earlier process
            extracted = _PROPAGATOR.extract(state.trace_context)
            saved = trace.get_current_span(extracted).get_span_context()
        parent: otel_context.Context | None = None
        links: list[Link] = []
        attributes: dict[str, Any] = {
            "gen_ai.agent.name": state.agent,
            "gen_ai.conversation.id": conversation_id(run),
            **_ids(run),
            "orchestra.resumed": resumed,
        }
        parent_id = run.parent.state.run_id if run.parent is not None else None
        live = parent_id is not None and parent_id in self._contexts
        if parent_id is not None and live:
            parent = self._contexts[parent_id]
            if state.parent_call_id is not None:
                attributes["gen_ai.tool.call.id"] = state.parent_call_id
                tool = self._tools.get((parent_id, state.parent_call_id))
                if tool is not None:
                    links.append(Link(tool.get_span_context(), {"orchestra.link": "spawned_by"}))
            if saved.is_valid:
                links.append(Link(saved, {"orchestra.link": "earlier_segment"}))
        elif saved.is_valid:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(saved))
        segment = self._tracer.start_span(
            f"orchestra.segment {state.agent}",
            context=parent,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes=attributes,
        )
        segment.end()
        if live or not saved.is_valid:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(segment))
            state.trace_context = carrier
        return segment

    def _on_approval_required(self, run: LiveRun, event: Event) -> None:
        span = self._agents.get(run.state.run_id)
        if span is not None:
            span.add_event(
                "approval_required",
                {
                    "gen_ai.tool.name": str(event.data["tool"]),
                    "gen_ai.tool.call.id": str(event.data["call_id"]),
                },
            )

    def _on_top_up(self, run: LiveRun, event: Event) -> None:
        """The run's policy answered a child's request for more: an event on its
        span, and how much it granted in all as an attribute."""
        span = self._agents.get(run.state.run_id)
        if span is None:
            return
        granted = bool(event.data["granted"])
        span.add_event(
            "top_up",
            {
                "orchestra.child_run_id": str(event.data["child_id"]),
                "orchestra.top_up.granted": granted,
                "orchestra.top_up.usd": float(event.data.get("usd", 0.0)),
                "orchestra.top_up.reason": redact(str(event.data["reason"])),
            },
        )
        if granted:
            total = self._top_ups.get(run.state.run_id, 0.0) + float(event.data["usd"])
            self._top_ups[run.state.run_id] = total
            span.set_attribute("orchestra.top_ups_granted_usd", total)

    def _on_run_stopped(self, run: LiveRun, event: Event) -> None:
        state = run.state
        why = error_type(state)
        reason = redact(state.reason)
        for key in [k for k in self._tools if k[0] == state.run_id]:
            self._raised.pop(key, None)
            _end_with_error(self._tools.pop(key), why or "run_stopped", reason)
        chat = self._chats.pop(state.run_id, None)
        if chat is not None:
            _end_with_error(chat, why or "run_stopped", reason)
        span = self._agents.pop(state.run_id, None)
        self._contexts.pop(state.run_id, None)
        self._top_ups.pop(state.run_id, None)
        if span is None:
            return
        span.set_attributes(
            {
                **self._spent(run),
                "orchestra.stop_reason": reason,
                "orchestra.answer_partial": state.answer_partial,
            }
        )
        span.add_event(
            "run_stopped", {"orchestra.status": state.status.value, "orchestra.stop_reason": reason}
        )
        if why is not None:
            _end_with_error(span, why, reason)
        else:
            span.end()

    def _spent(self, run: LiveRun) -> dict[str, Any]:
        """What the run spent during this span (so spans add up), and its totals."""
        state = run.state
        own0, tree0 = self._at_start.pop(state.run_id, (Usage(), Usage()))
        own, tree = state.own - own0, state.tree - tree0
        return {
            "orchestra.status": state.status.value,
            "orchestra.usage.cost.own_usd": own.cost_usd,
            "orchestra.usage.cost.tree_usd": tree.cost_usd,
            "orchestra.run.cost_usd": own.cost_usd,
            "orchestra.tree.cost_usd": tree.cost_usd,
            "orchestra.run.input_tokens": own.prompt_tokens,
            "orchestra.run.output_tokens": own.completion_tokens,
            "orchestra.tree.input_tokens": tree.prompt_tokens,
            "orchestra.tree.output_tokens": tree.completion_tokens,
            "orchestra.turns": own.model_calls,
            "orchestra.tool_runs": own.tool_runs,
            "orchestra.child_runs": own.child_runs,
            "orchestra.run.cost_usd_total": state.own.cost_usd,
            "orchestra.tree.cost_usd_total": state.tree.cost_usd,
            "orchestra.run.turns_total": state.turns,
        }

    # -- chat spans ---------------------------------------------------------------

    def _on_model_request(self, run: LiveRun, event: Event) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **self._server(run),
            "gen_ai.request.model": run.state.model,
            "gen_ai.request.max_tokens": int(event.data["max_tokens"]),
            **self._common(run, agent=self._semconv == LEGACY),
            "orchestra.turn": int(event.data["turn"]),
        }
        if self._capture:
            attributes.update(content.input_attributes(run.state.messages))
        self._chats[run.state.run_id] = self._tracer.start_span(
            f"chat {run.state.model}",
            kind=SpanKind.CLIENT,
            context=self._contexts.get(run.state.run_id),
            attributes=attributes,
        )

    def _on_model_retry(self, run: LiveRun, event: Event) -> None:
        span = self._chats.get(run.state.run_id)
        if span is not None:
            status = event.data.get("status")
            span.add_event(
                "retry",
                {
                    "orchestra.attempt": int(event.data["attempt"]),
                    "error.type": str(status) if status is not None else "transport",
                    "orchestra.error": str(event.data["error"])[:500],
                },
            )

    def _on_turn(self, run: LiveRun, event: Event) -> None:
        span = self._chats.pop(run.state.run_id, None)
        if span is None:
            return
        d = event.data
        cost = float(d["call_cost_usd"])
        attributes: dict[str, Any] = {
            "gen_ai.usage.input_tokens": int(d["prompt_tokens"]),
            "gen_ai.usage.output_tokens": int(d["completion_tokens"]),
            "gen_ai.response.finish_reasons": [str(d["finish"])],
            "orchestra.call.cost_usd": cost,
            "llm.cost.total": cost,  # what OpenInference (Phoenix) reads
            **chat_extras(self._semconv, d, cost=cost),
        }
        for key, field in (
            ("gen_ai.response.model", "response_model"),
            ("gen_ai.response.id", "response_id"),
        ):
            if d.get(field):
                attributes[key] = str(d[field])
        for key, field in (
            ("gen_ai.usage.cache_read.input_tokens", "cached_input_tokens"),
            ("gen_ai.usage.reasoning.output_tokens", "reasoning_tokens"),
        ):
            if d.get(field):  # subsets of input_tokens and output_tokens, as reported
                attributes[key] = int(d[field])
        if d.get("streamed"):
            attributes["orchestra.streamed"] = True
            if d.get("time_to_first_chunk_s") is not None:
                attributes["gen_ai.response.time_to_first_chunk"] = float(
                    d["time_to_first_chunk_s"]
                )
        if self._capture and run.state.messages:
            reply = run.state.messages[-1]  # appended just before this event
            attributes["gen_ai.output.messages"] = content.output_messages(reply, str(d["finish"]))
        span.set_attributes(attributes)
        span.end()

    # -- tool spans ---------------------------------------------------------------

    def _start_tool(self, run: LiveRun, tool: str, call_id: str, args: Any) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            **self._common(run),
        }
        if self._capture and args is not None:
            attributes["gen_ai.tool.call.arguments"] = content.tool_arguments(args)
        return self._tracer.start_span(
            f"execute_tool {tool}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            context=self._contexts.get(run.state.run_id),
        )

    def _on_tool_start(self, run: LiveRun, event: Event) -> None:
        d = event.data
        key = (run.state.run_id, str(d["call_id"]))
        self._tools[key] = self._start_tool(run, str(d["tool"]), key[1], d.get("args"))

    def _on_tool_progress(self, run: LiveRun, event: Event) -> None:
        span = self._tools.get((run.state.run_id, str(event.data["call_id"])))
        if span is not None:
            span.add_event(
                "progress",
                {
                    "orchestra.label": str(event.data["label"]),
                    "orchestra.elapsed_ms": float(event.data["elapsed_ms"]),
                },
            )

    def _on_tool_error(self, run: LiveRun, event: Event) -> None:
        key = (run.state.run_id, str(event.data["call_id"]))
        span = self._tools.get(key)
        if span is None:
            return
        kind = str(event.data.get("error_type") or "Exception")
        details = {"exception.type": kind}
        if self._capture:
            details["exception.message"] = content.text(str(event.data.get("error", "")))
        span.add_event("exception", details)
        self._raised[key] = kind

    def _on_tool_waiting(self, run: LiveRun, event: Event) -> None:
        """A call parked while its child runs on another worker: its span ends
        here (marked ``orchestra.tool.waiting``, naming the child); the call's
        second run, once the child ended, has a span of its own."""
        key = (run.state.run_id, str(event.data["call_id"]))
        span = self._tools.pop(key, None)
        self._raised.pop(key, None)
        if span is not None:
            span.set_attribute("orchestra.tool.waiting", True)
            span.set_attribute("orchestra.child.run_id", str(event.data.get("child_id", "")))
            span.end()

    def _on_tool_result(self, run: LiveRun, event: Event) -> None:
        d = event.data
        key = (run.state.run_id, str(d["call_id"]))
        span = self._tools.pop(key, None)
        raised = self._raised.pop(key, None)
        if span is None:  # decided without running (rejected, deduplicated, invalid)
            span = self._start_tool(run, str(d["tool"]), key[1], None)
            span.set_attribute("orchestra.tool.decided", True)
            if self._capture and d.get("result") is not None:
                span.set_attribute("gen_ai.tool.call.result", content.text(d["result"]))
            span.end()
        elif d.get("ok"):
            if self._capture:  # its result is recorded just after this event: read it then
                self._unread.append((run, key[1], span, time.time_ns()))
            else:
                span.end()
        elif d.get("timed_out"):
            _end_with_error(span, "timeout", "the tool ran out of time")
        else:
            _end_with_error(span, raised or "tool_error", raised or "the tool failed")

    def _end_unread(self) -> None:
        """End the tool spans that waited for their result text (content capture).

        Runs before the next event is handled: the dispatcher records a call's
        result right after its ``tool_result`` event, with no checkpoint in
        between, so it is there by then. Each span ends at its event's time.
        """
        unread, self._unread = self._unread, []
        for run, call_id, span, ended_ns in unread:
            result = _result_of(run.state, call_id)
            if result is not None:
                span.set_attribute("gen_ai.tool.call.result", content.text(result))
            span.end(end_time=ended_ns)


def _endpoint(provider: object, name: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": name or name_of(provider) or type(provider).__name__.lower()
    }
    url = endpoint_of(provider)
    if url is not None:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return attributes
        if parts.hostname:
            attributes["server.address"] = parts.hostname
            attributes["server.port"] = port or (443 if parts.scheme == "https" else 80)
    return attributes


def conversation_id(run: LiveRun) -> str:
    """The conversation a run belongs to: its root's (the first run of the chain of
    runs that continue one another; a tree's own root when it continues none)."""
    return run.lineage()[-1].state.conversation


def _ids(run: LiveRun) -> dict[str, str]:
    """Run, root and parent ids (on agent spans; chat and tool spans carry the run id)."""
    state = run.state
    ids = {"orchestra.run.id": state.run_id, "orchestra.root_run.id": state.root_id}
    if state.parent_id is not None:
        ids["orchestra.parent_run.id"] = state.parent_id
    return ids


def error_type(state: RunState) -> str | None:
    """``error.type`` of a stopped run: None if it completed, else its status, or
    for ``interrupted`` what it waits for (``approval``, ``cancelled``...)."""
    if state.status is RunStatus.COMPLETED:
        return None
    if state.status is RunStatus.INTERRUPTED and state.interruption is not None:
        return state.interruption.kind.value
    return state.status.value


def _add_decisions(span: Span, state: RunState) -> None:
    """An ``orchestra.decision`` event for each waiting call a human decided on."""
    approved = {a.call_id for a in state.approvals}
    for call in pending_calls(state):
        call_id = str(call["id"])
        if call_id in state.rejections:
            decision, reason = "rejected", state.rejections[call_id]
        elif call_id in approved:
            decision, reason = "approved", ""
        else:
            continue
        span.add_event(
            "orchestra.decision",
            {
                "orchestra.decision": decision,
                "orchestra.decision.reason": redact(reason),
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.name": str((call.get("function") or {}).get("name", "")),
            },
        )


def _result_of(state: RunState, call_id: str) -> str | None:
    """The recorded result of ``call_id``: pending, or already in the transcript."""
    if call_id in state.results:
        return state.results[call_id]
    for message in reversed(state.messages):
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return str(message.get("content") or "")
    return None


def _end_with_error(span: Span, kind: str, description: str = "") -> None:
    """End ``span`` as an error: ``error.type`` ``kind``, status ERROR with ``description``."""
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, description or kind))
    span.end()


# -- export -------------------------------------------------------------------------


def configure_otlp(
    *, service_name: str | None = None, protocol: str | None = None, endpoint: str | None = None
) -> RecordingTracerProvider:
    """A tracer provider exporting over OTLP from a child process.

    Spans are recorded as plain data on the trio thread and exported by the
    SDK's OTLP exporter in a child process (see
    :mod:`orchestra._telemetry.otlp_process`), off this process's GIL. Follows the
    standard variables: ``OTEL_SERVICE_NAME`` (default ``orchestra``),
    ``OTEL_RESOURCE_ATTRIBUTES`` (``service.version`` defaults to orchestra's
    version), ``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``..._TRACES_PROTOCOL``
    (``http/protobuf``, the default, or ``grpc``),
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``..._TRACES_ENDPOINT`` and the
    exporter's others (headers, timeout, certificates). Call ``shutdown()``
    when done (it flushes; also run at exit).
    """
    from opentelemetry.sdk.resources import Resource  # the SDK: only to export

    from .otlp_process import ExportProcess  # POSIX pipes: imported only to export

    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "orchestra"
    resource = Resource.create({"service.name": name})
    if "service.version" not in resource.attributes:  # OTEL_RESOURCE_ATTRIBUTES may set it
        resource = resource.merge(Resource({"service.version": package_version()}))
    sink = ExportProcess(protocol=protocol_name(protocol), endpoint=endpoint, resource=resource)
    return RecordingTracerProvider(sink=sink)


async def flush_spans(provider: Any, timeout_s: float = 10.0) -> bool:
    """Flush ``provider`` (ours or the SDK's) from a worker thread, never blocking trio.

    With :func:`configure_otlp`'s provider the answer says whether the export
    succeeded; the SDK's ``force_flush`` says True even when it failed, so
    check the backend, not this call, with an SDK provider.

    Cancellation: the flush is not abandoned; a cancelled caller returns once
    the worker thread does (bounded by ``timeout_s``).
    """
    # the SDK's flush blocks until the exporter answers: a thread's wait, not the loop's
    result = await trio.to_thread.run_sync(provider.force_flush, int(timeout_s * 1000))
    return bool(result)


def finish_export(provider: RecordingTracerProvider, timeout_s: float = 2.0) -> str | None:
    """Flush :func:`configure_otlp`'s ``provider`` and stop its export, in bounded time.

    Returns None when every span was exported, else why not, in one line
    (``no OTLP collector at URL (connection refused)``). Takes about
    ``timeout_s`` at most, however the collector fares (a missing one is
    noticed at its first refusal): spans not exported by then are dropped.
    Blocks: call it off the trio thread.
    """
    if provider.force_flush(int(timeout_s * 1000)):
        provider.shutdown(timeout_millis=500)  # nothing is left to send
        return None
    provider.shutdown(timeout_millis=0)  # the export stops retrying at once
    return getattr(provider.sink, "error", None) or "the export failed"
