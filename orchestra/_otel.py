"""OpenTelemetry spans for the run tree, following the GenAI semantic conventions.

One ``invoke_agent {agent}`` span per run (per process segment of a run), one
``chat {model}`` span per model call and one ``execute_tool {tool}`` span per
tool call. A child run's agent span is a child of the parent's
``execute_tool`` span, so one trace holds the whole tree. Run ids, the call's
own cost (chat spans) and the run's own and tree cost (agent spans) are in the
``orchestra.*`` namespace; no cost is counted twice across levels. A run that
spans several processes has one agent span per process: ``orchestra.cost_usd``
and ``orchestra.tree_cost_usd`` there are what was spent *during that span*
(so agent spans add up), and ``orchestra.run.*_total`` the run's totals.

The span context of every run is saved with its state
(``RunState.trace_context``): a run resumed in another process, days later,
starts its new agent span as a child of the last one, in the same trace.

Spans are built from the run's events on the trio thread, through any
OpenTelemetry ``TracerProvider``: the SDK's (sampling, custom processors) or
:func:`configure_otlp`'s lean one, which records spans as plain data and
exports them from a child process. Message contents and
tool arguments are recorded only with ``capture_content=True``. Stop reasons
and error texts are redacted of secrets (events already are; see
:mod:`orchestra._redact`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ._events import Event
from ._otlp_protocol import protocol_name
from ._redact import redact
from ._run import LiveRun
from ._spans import RecordingTracerProvider
from ._state import Usage

__all__ = ["OTelTracer", "configure_otlp", "finish_export", "flush_spans"]

_PROPAGATOR = TraceContextTextMapPropagator()
_INSTRUMENTATION = "orchestra"


class OTelTracer:
    """Turns a runner's events into OpenTelemetry spans.

    Pass it as ``Runner(tracer=OTelTracer())``. ``provider_name`` fills
    ``gen_ai.provider.name`` (the model vendor behind the endpoint).
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        provider_name: str = "openai",
        capture_content: bool = False,
    ) -> None:
        self._tracer = trace.get_tracer(_INSTRUMENTATION, tracer_provider=tracer_provider)
        self._provider_name = provider_name
        self._capture = capture_content
        self._agents: dict[str, Span] = {}
        self._contexts: dict[str, otel_context.Context] = {}
        self._chats: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}
        self._at_start: dict[str, tuple[Usage, Usage]] = {}
        self._handlers = {  # event type -> its _on_<type> method
            name.removeprefix("_on_"): getattr(self, name)
            for name in dir(self)
            if name.startswith("_on_")
        }

    def __call__(self, run: LiveRun, event: Event) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(run, event)

    # -- agent spans ------------------------------------------------------------

    def _on_run_started(self, run: LiveRun, event: Event) -> None:
        state = run.state
        parent, links = self._parent(run)
        span = self._tracer.start_span(
            f"invoke_agent {state.agent}",
            context=parent,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": self._provider_name,
                "gen_ai.agent.name": state.agent,
                "gen_ai.agent.id": state.run_id,
                "gen_ai.conversation.id": state.root_id,
                "gen_ai.request.model": state.model,
                **_ids(run),
                "orchestra.resumed": bool(event.data.get("resumed")),
            },
        )
        self._agents[state.run_id] = span
        self._contexts[state.run_id] = trace.set_span_in_context(span)
        self._at_start[state.run_id] = (state.own, state.tree)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=self._contexts[state.run_id])
        state.trace_context = carrier

    def _parent(self, run: LiveRun) -> tuple[otel_context.Context | None, Sequence[Link]]:
        """The live parent span (the spawning tool call), else the saved context."""
        saved = trace.INVALID_SPAN_CONTEXT
        if run.state.trace_context:  # saved by an earlier process
            extracted = _PROPAGATOR.extract(run.state.trace_context)
            saved = trace.get_current_span(extracted).get_span_context()
        links = [Link(saved)] if saved.is_valid else []
        tool = None
        if run.parent is not None and run.state.parent_call_id is not None:
            tool = self._tools.get((run.parent.state.run_id, run.state.parent_call_id))
        if tool is not None:
            return trace.set_span_in_context(tool), links
        if saved.is_valid:
            return trace.set_span_in_context(trace.NonRecordingSpan(saved)), []
        return None, []

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

    def _on_run_stopped(self, run: LiveRun, event: Event) -> None:
        state = run.state
        why = _stop_error(run)
        for key in [k for k in self._tools if k[0] == state.run_id]:
            _end_with_error(self._tools.pop(key), why or "run stopped")
        chat = self._chats.pop(state.run_id, None)
        if chat is not None:
            _end_with_error(chat, why or "run stopped")
        span = self._agents.pop(state.run_id, None)
        self._contexts.pop(state.run_id, None)
        if span is None:
            return
        reason = redact(state.reason)
        span.set_attributes({**self._spent(run), "orchestra.stop_reason": reason})
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
            "orchestra.cost_usd": own.cost_usd,
            "orchestra.tree_cost_usd": tree.cost_usd,
            "orchestra.turns": own.model_calls,
            "orchestra.tool_runs": own.tool_runs,
            "orchestra.child_runs": own.child_runs,
            "gen_ai.usage.input_tokens": own.prompt_tokens,
            "gen_ai.usage.output_tokens": own.completion_tokens,
            "orchestra.run.cost_usd_total": state.own.cost_usd,
            "orchestra.run.tree_cost_usd_total": state.tree.cost_usd,
            "orchestra.run.turns_total": state.turns,
        }

    # -- chat spans ---------------------------------------------------------------

    def _on_model_request(self, run: LiveRun, event: Event) -> None:
        span = self._tracer.start_span(
            f"chat {run.state.model}",
            kind=SpanKind.CLIENT,
            context=self._contexts.get(run.state.run_id),
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self._provider_name,
                "gen_ai.request.model": run.state.model,
                "gen_ai.request.max_tokens": int(event.data["max_tokens"]),
                "orchestra.turn": int(event.data["turn"]),
                "orchestra.run.id": run.state.run_id,
            },
        )
        self._chats[run.state.run_id] = span

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
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": int(d["prompt_tokens"]),
                "gen_ai.usage.output_tokens": int(d["completion_tokens"]),
                "gen_ai.response.finish_reasons": [str(d["finish"])],
                "orchestra.cost_usd": float(d["call_cost_usd"]),
            }
        )
        span.end()

    # -- tool spans ---------------------------------------------------------------

    def _start_tool(self, run: LiveRun, tool: str, call_id: str, args: Any) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "orchestra.run.id": run.state.run_id,
        }
        if self._capture and args is not None:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(args)
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

    def _on_tool_result(self, run: LiveRun, event: Event) -> None:
        d = event.data
        key = (run.state.run_id, str(d["call_id"]))
        span = self._tools.pop(key, None)
        if span is None:  # decided without running (rejected, deduplicated, invalid)
            span = self._start_tool(run, str(d["tool"]), key[1], None)
            span.set_attribute("orchestra.tool.decided", True)
            span.end()
        elif d.get("ok"):
            span.end()
        else:
            _end_with_error(span, "timeout" if d.get("timed_out") else "tool_error")


def _ids(run: LiveRun) -> dict[str, str]:
    """Run, root and parent ids (on agent spans; chat and tool spans carry the run id)."""
    state = run.state
    ids = {"orchestra.run.id": state.run_id, "orchestra.root_run.id": state.root_id}
    if state.parent_id is not None:
        ids["orchestra.parent_run.id"] = state.parent_id
    return ids


def _stop_error(run: LiveRun) -> str | None:
    """``error.type`` for a stopped run: cancellations and failures are errors."""
    state = run.state
    if state.interruption is not None and state.interruption.kind.value == "cancelled":
        return "cancelled"
    if state.status.value == "failed":
        return redact(state.error or "failed").split(":", 1)[0].split("\n", 1)[0][:80] or "failed"
    return None


def _end_with_error(span: Span, error_type: str, description: str = "") -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))
    span.end()


# -- export -------------------------------------------------------------------------


def configure_otlp(
    *, service_name: str | None = None, protocol: str | None = None, endpoint: str | None = None
) -> RecordingTracerProvider:
    """A tracer provider exporting over OTLP from a child process.

    Spans are recorded as plain data on the trio thread and exported by the
    SDK's OTLP exporter in a child process (see
    :mod:`orchestra._otlp_process`), off this process's GIL. Follows the
    standard variables: ``OTEL_SERVICE_NAME`` (default ``orchestra``),
    ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` /
    ``..._TRACES_PROTOCOL`` (``http/protobuf``, the default, or ``grpc``),
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``..._TRACES_ENDPOINT`` and the
    exporter's others (headers, timeout, certificates). Call ``shutdown()``
    when done (it flushes; also run at exit).
    """
    from opentelemetry.sdk.resources import Resource  # the SDK: only to export

    from ._otlp_process import ExportProcess  # POSIX pipes: imported only to export

    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "orchestra"
    resource = Resource.create({"service.name": name})
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
