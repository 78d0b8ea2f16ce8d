"""Spans exported for real over OTLP, then read back from the trace backend over HTTP.

Nothing here trusts the exporter: each test runs the CLI in a fresh process,
then polls the backend's query API (bounded) until the spans are there and
checks the tree they describe against the CLI's JSON report.

- Jaeger (``otel/start-jaeger.sh``): set ``ORCHESTRA_JAEGER_URL``, e.g.
  ``http://127.0.0.1:16686``. OTLP endpoints: ``ORCHESTRA_OTLP_HTTP``
  (default ``http://127.0.0.1:4318``) and ``ORCHESTRA_OTLP_GRPC``
  (default ``http://127.0.0.1:4317``).
- Phoenix (``otel/start-phoenix.sh``): set ``ORCHESTRA_PHOENIX_URL``, e.g.
  ``http://127.0.0.1:6006``. OTLP/gRPC endpoint: ``ORCHESTRA_PHOENIX_OTLP_GRPC``
  (default ``http://127.0.0.1:4319``).

Without the URL variable a test skips. Each test exports under its own
service name (Jaeger) or project (Phoenix), so every query is unambiguous.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

T = TypeVar("T")

ORCHESTRA = [sys.executable, "-c", "from orchestra._cli.main import run; run()"]
POLL_TIMEOUT_S = 20.0
COST_TOLERANCE = 1e-9
EXIT_INTERRUPTED = 6


@dataclass(frozen=True)
class Span:
    """One span as a backend returned it, in a backend-neutral shape."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status: str = "UNSET"
    """``UNSET``, ``OK`` or ``ERROR``."""
    status_message: str = ""

    def attr(self, key: str) -> Any:
        return self.attributes.get(key)


# -- fixtures -------------------------------------------------------------------------


def _backend_url(variable: str, what: str) -> str:
    url = os.environ.get(variable)
    if not url:
        pytest.skip(f"{variable} is not set: no {what} to read spans back from")
    return url.rstrip("/")


@pytest.fixture
def jaeger_url() -> str:
    return _backend_url("ORCHESTRA_JAEGER_URL", "Jaeger (start one with otel/start-jaeger.sh)")


@pytest.fixture
def phoenix_url() -> str:
    return _backend_url("ORCHESTRA_PHOENIX_URL", "Phoenix (start one with otel/start-phoenix.sh)")


@pytest.fixture
def unique_name() -> str:
    return f"orchestra-test-{uuid.uuid4().hex[:12]}"


# -- running the CLI ------------------------------------------------------------------


def otel_env(**variables: str) -> dict[str, str]:
    """This process's environment without any inherited ``OTEL_*``, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(variables)
    return env


def cli(*args: str, env: dict[str, str], check: int = 0) -> dict[str, Any]:
    done = subprocess.run(
        [*ORCHESTRA, *args, "--json"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == check, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def walk(report: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield report
    for child in report["children"]:
        yield from walk(child)


def expected_span_count(report: dict[str, Any], segments: int = 1) -> int:
    """A segment and an agent span per run and process segment, one chat per turn, one span
    per tool run."""
    runs = list(walk(report))
    return 2 * (len(runs) + segments - 1) + sum(int(r["turns"]) + int(r["tool_runs"]) for r in runs)


# -- reading spans back ---------------------------------------------------------------


def poll(fetch: Callable[[], T | None], what: str, timeout: float = POLL_TIMEOUT_S) -> T:
    """Call ``fetch`` until it returns a value (bounded); fail if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not there after {timeout:.0f} s")
        time.sleep(0.25)


def get_json(url: str, params: dict[str, str | int] | None = None) -> Any:
    response = httpx.get(url, params=params, timeout=5.0)
    return response.json() if response.status_code == 200 else None


def jaeger_span(raw: dict[str, Any], trace_id: str) -> Span:
    parents = [r["spanID"] for r in raw["references"] if r["refType"] == "CHILD_OF"]
    assert len(parents) <= 1, raw["references"]
    events = tuple(
        str(f["value"])
        for log in raw.get("logs") or []
        for f in log["fields"]
        if f["key"] == "event"
    )
    tags = {t["key"]: t["value"] for t in raw["tags"]}
    return Span(
        trace_id=trace_id,
        span_id=raw["spanID"],
        parent_id=parents[0] if parents else None,
        name=raw["operationName"],
        attributes=tags,
        events=events,
        status=str(tags.get("otel.status_code", "UNSET")),
        status_message=str(tags.get("otel.status_description", "")),
    )


def jaeger_traces(base: str, service: str, min_spans: int) -> dict[str, list[Span]]:
    """All traces of ``service``, once they hold at least ``min_spans`` spans in total."""

    def fetch() -> dict[str, list[Span]] | None:
        body = get_json(f"{base}/api/traces", {"service": service, "lookback": "1h", "limit": 50})
        traces = {
            # The v1 JSON API may drop leading zeros of a trace id.
            t["traceID"].zfill(32): [jaeger_span(s, t["traceID"].zfill(32)) for s in t["spans"]]
            for t in (body or {}).get("data") or []
        }
        return traces if sum(map(len, traces.values())) >= min_spans else None

    return poll(fetch, f"{min_spans} spans of service {service} in Jaeger")


def phoenix_span(raw: dict[str, Any]) -> Span:
    return Span(
        trace_id=raw["context"]["trace_id"],
        span_id=raw["context"]["span_id"],
        parent_id=raw["parent_id"],
        name=raw["name"],
        attributes=raw["attributes"],
        events=tuple(e["name"] for e in raw.get("events") or []),
        status=str(raw.get("status_code") or "UNSET"),
        status_message=str(raw.get("status_message") or ""),
    )


def phoenix_spans(base: str, project: str, min_spans: int) -> list[Span]:
    def fetch() -> list[Span] | None:
        body = get_json(f"{base}/v1/projects/{project}/spans", {"limit": 1000})
        spans = [phoenix_span(s) for s in (body or {}).get("data") or []]
        return spans if len(spans) >= min_spans else None

    return poll(fetch, f"{min_spans} spans of project {project} in Phoenix")


# -- what a research tree must look like ------------------------------------------------


def operation(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.attr("gen_ai.operation.name") == name]


def segment_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.name.startswith("orchestra.segment ")]


def check_one_root_no_orphan(spans: list[Span]) -> Span:
    """One trace, one root, every parent id a span of the trace (no Jaeger "invalid parent
    span IDs" warning); returns the root."""
    assert len({s.trace_id for s in spans}) == 1
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    orphans = [s.name for s in spans if s.parent_id is not None and s.parent_id not in by_id]
    assert orphans == []
    [root] = [s for s in spans if s.parent_id is None]
    return root


def check_research_tree(spans: list[Span], report: dict[str, Any]) -> None:
    """One trace, one root, no orphan; root segment -> child segments, each segment ->
    its agent, chat and tool spans; a child's segment names the spawning call; costs add up."""
    assert len(spans) == expected_span_count(report)
    assert {s.trace_id for s in spans} == {report["trace_id"]}
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    agents = {s.attr("orchestra.run.id"): s for s in operation(spans, "invoke_agent")}
    runs = {r["run_id"]: r for r in walk(report)}
    assert len(operation(spans, "invoke_agent")) == len(runs) == 4
    assert set(agents) == set(runs)

    root_id = report["run_id"]
    root = agents[root_id]
    segments = {s.attr("orchestra.run.id"): s for s in segment_spans(spans)}
    assert set(segments) == set(runs)
    assert check_one_root_no_orphan(spans) == segments[root_id]
    assert segments[root_id].name == "orchestra.segment assistant"
    assert (root.parent_id, root.name) == (segments[root_id].span_id, "invoke_agent assistant")
    assert root.attr("orchestra.parent_run.id") is None
    tools = {  # call ids are per run: the root's
        s.attr("gen_ai.tool.call.id"): s
        for s in operation(spans, "execute_tool")
        if s.attr("orchestra.run.id") == root_id
    }
    tool_spans: set[str] = set()
    for child in report["children"]:
        span = agents[child["run_id"]]
        segment = segments[child["run_id"]]
        assert span.parent_id == segment.span_id
        assert segment.parent_id == segments[root_id].span_id  # exported before any crash
        tool = tools[segment.attr("gen_ai.tool.call.id")]  # the spawning tool call
        tool_spans.add(tool.span_id)
        assert tool.name == "execute_tool research"
        assert tool.parent_id == segments[root_id].span_id
        assert tool.attr("orchestra.run.id") == root_id
        assert span.name == "invoke_agent researcher"
        assert span.attr("orchestra.parent_run.id") == root_id
    assert len(tool_spans) == len(report["children"]) == 3
    for run_id, span in agents.items():
        assert span.attr("orchestra.root_run.id") == root_id
        assert span.attr("orchestra.status") == runs[run_id]["status"] == "completed"
        assert span.attr("gen_ai.agent.name") == runs[run_id]["agent"]
        assert span.status == "UNSET" and span.attr("error.type") is None
    for span in [*operation(spans, "chat"), *operation(spans, "execute_tool")]:
        run = runs[span.attr("orchestra.run.id")]
        assert span.attr("gen_ai.conversation.id") == root_id
        if span.attr("gen_ai.operation.name") == "execute_tool":  # not an inference span's
            assert span.attr("gen_ai.agent.name") == run["agent"]
    for chat in operation(spans, "chat"):
        assert chat.attr("gen_ai.provider.name") == "orchestra.scripted"  # the demo's server
        assert chat.attr("server.address") == "127.0.0.1"
        assert chat.attr("gen_ai.response.model") == chat.attr("gen_ai.request.model")
        assert chat.attr("gen_ai.response.id")
    check_costs(spans, agents, report)


def check_costs(spans: list[Span], agents: dict[str, Span], report: dict[str, Any]) -> None:
    """Agent spans: own and tree cost; chat spans: each call's, under every key a backend
    sums, adding up to the root's tree cost; no key means one thing here, another there."""
    for run in walk(report):
        span = agents[run["run_id"]]
        assert span.attr("orchestra.run.cost_usd") == pytest.approx(
            run["cost_usd"], abs=COST_TOLERANCE
        )
        assert span.attr("orchestra.tree.cost_usd") == pytest.approx(
            run["tree_cost_usd"], abs=COST_TOLERANCE
        )
    root = agents[report["run_id"]]
    tree = root.attr("orchestra.tree.cost_usd")
    children = sum(agents[c["run_id"]].attr("orchestra.tree.cost_usd") for c in report["children"])
    assert tree == pytest.approx(root.attr("orchestra.run.cost_usd") + children, abs=COST_TOLERANCE)
    assert tree == pytest.approx(report["tree_cost_usd"], abs=COST_TOLERANCE)
    assert tree > 0
    chats = operation(spans, "chat")
    for key in ("orchestra.call.cost_usd", "llm.cost.total"):
        assert sum(c.attr(key) for c in chats) == pytest.approx(tree, abs=COST_TOLERANCE)
    assert root.attr("orchestra.usage.cost.tree_usd") == pytest.approx(tree, abs=COST_TOLERANCE)
    segments = {s.attr("orchestra.run.id"): s for s in segment_spans(spans)}
    for chat in chats:  # each call under its own run's segment span
        assert chat.parent_id == segments[chat.attr("orchestra.run.id")].span_id
    for span in spans:
        assert span.attr("orchestra.cost_usd") is None
        if span.attr("gen_ai.operation.name") != "chat":
            assert span.attr("gen_ai.usage.cost") is None
            assert span.attr("gen_ai.usage.input_tokens") is None


# -- Jaeger ---------------------------------------------------------------------------------


@pytest.mark.otlp
@pytest.mark.parametrize(
    ("protocol", "endpoint_var", "default_endpoint"),
    [
        ("http/protobuf", "ORCHESTRA_OTLP_HTTP", "http://127.0.0.1:4318"),
        ("grpc", "ORCHESTRA_OTLP_GRPC", "http://127.0.0.1:4317"),
    ],
    ids=["http", "grpc"],
)
def test_research_tree_reaches_jaeger_as_one_trace(
    jaeger_url: str,
    unique_name: str,
    tmp_path: Path,
    protocol: str,
    endpoint_var: str,
    default_endpoint: str,
) -> None:
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_EXPORTER_OTLP_ENDPOINT=os.environ.get(endpoint_var, default_endpoint),
    )
    report = cli("demo", "research", "--dir", str(tmp_path / "box"), "--otlp", env=env)
    assert report["status"] == "completed"
    traces = jaeger_traces(jaeger_url, unique_name, expected_span_count(report))
    assert list(traces) == [report["trace_id"]]
    check_research_tree(traces[report["trace_id"]], report)


@pytest.mark.otlp
def test_approval_and_resume_in_other_processes_continue_the_trace(
    jaeger_url: str, unique_name: str, tmp_path: Path
) -> None:
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_EXPORTER_OTLP_ENDPOINT=os.environ.get("ORCHESTRA_OTLP_HTTP", "http://127.0.0.1:4318"),
    )
    box = str(tmp_path / "box")
    stopped = cli("demo", "destructive", "--dir", box, "--otlp", env=env, check=EXIT_INTERRUPTED)
    run_id = stopped["run_id"]
    cli("approve", run_id, env=env)
    done = cli("resume", run_id, "--otlp", env=env)
    assert (stopped["status"], done["status"]) == ("interrupted", "completed")
    assert done["trace_id"] == stopped["trace_id"]

    traces = jaeger_traces(jaeger_url, unique_name, expected_span_count(done, segments=2))
    assert list(traces) == [done["trace_id"]]
    spans = traces[done["trace_id"]]
    assert len(spans) == expected_span_count(done, segments=2)
    first, second = sorted(
        operation(spans, "invoke_agent"), key=lambda s: bool(s.attr("orchestra.resumed"))
    )
    assert first.name == second.name == "invoke_agent assistant"
    assert first.attr("orchestra.run.id") == second.attr("orchestra.run.id") == run_id
    root = check_one_root_no_orphan(spans)
    segments = sorted(segment_spans(spans), key=lambda s: bool(s.attr("orchestra.resumed")))
    assert [s.span_id for s in segments] == [first.parent_id, second.parent_id]
    assert root == segments[0] and segments[1].parent_id == root.span_id
    assert (first.attr("orchestra.resumed"), second.attr("orchestra.resumed")) == (False, True)
    assert first.attr("orchestra.status") == "interrupted"
    assert second.attr("orchestra.status") == "completed"
    assert "approval_required" in first.events
    assert (first.status, first.attr("error.type")) == ("ERROR", "approval")
    assert first.status_message == stopped["reason"]
    assert "orchestra.decision" in second.events  # the human's yes, on the resumed segment
    assert second.status == "UNSET"
    # each agent span carries what was spent during it; together they make the run's cost
    assert first.attr("orchestra.run.cost_usd") == pytest.approx(stopped["cost_usd"], abs=1e-9)
    assert second.attr("orchestra.run.cost_usd") == pytest.approx(
        done["cost_usd"] - stopped["cost_usd"], abs=1e-9
    )
    assert second.attr("orchestra.run.cost_usd_total") == pytest.approx(done["cost_usd"], abs=1e-9)
    chats = operation(spans, "chat")
    assert len(chats) == done["turns"]
    assert sum(c.attr("orchestra.call.cost_usd") for c in chats) == pytest.approx(
        done["cost_usd"], abs=COST_TOLERANCE
    )
    delete = [s for s in spans if s.name == "execute_tool delete_file"]
    assert [s.parent_id for s in delete] == [segments[1].span_id]  # ran after the approval


@pytest.mark.otlp
def test_the_provider_name_is_saved_and_contents_are_captured_on_request(
    jaeger_url: str, unique_name: str, tmp_path: Path
) -> None:
    """``--provider-name`` is saved with the run (the resume keeps it); ``--capture-content``
    adds contents to the spans of the process that asked for it only."""
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_EXPORTER_OTLP_ENDPOINT=os.environ.get("ORCHESTRA_OTLP_HTTP", "http://127.0.0.1:4318"),
    )
    box = str(tmp_path / "box")
    demo = ("demo", "destructive", "--dir", box, "--otlp", "--provider-name", "acme.test")
    stopped = cli(*demo, env=env, check=EXIT_INTERRUPTED)
    cli("approve", stopped["run_id"], env=env)
    done = cli("resume", stopped["run_id"], "--otlp", "--capture-content", env=env)

    traces = jaeger_traces(jaeger_url, unique_name, expected_span_count(done, segments=2))
    spans = traces[done["trace_id"]]
    chats = sorted(operation(spans, "chat"), key=lambda s: s.attr("orchestra.turn"))
    assert {c.attr("gen_ai.provider.name") for c in chats} == {"acme.test"}
    before, after = chats[: stopped["turns"]], chats[stopped["turns"] :]
    assert before and after
    assert all(c.attr("gen_ai.input.messages") is None for c in before)
    for chat in after:
        messages = json.loads(chat.attr("gen_ai.input.messages"))
        assert messages[0]["role"] == "user" and messages[0]["parts"][0]["type"] == "text"
        assert json.loads(chat.attr("gen_ai.output.messages"))[0]["role"] == "assistant"
    [delete] = [s for s in spans if s.name == "execute_tool delete_file"]
    assert json.loads(delete.attr("gen_ai.tool.call.arguments")) == {"path": "access.log"}


@pytest.mark.otlp
def test_a_child_stopped_by_its_budget_shows_as_an_error_in_jaeger(
    jaeger_url: str, unique_name: str, tmp_path: Path
) -> None:
    """``orchestra demo research_runaway --child-budget 0.005 --otlp``: the child that hit
    its budget is an error with its reason; its healthy sibling is not; costs add up."""
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_EXPORTER_OTLP_ENDPOINT=os.environ.get("ORCHESTRA_OTLP_HTTP", "http://127.0.0.1:4318"),
    )
    box = str(tmp_path / "box")
    budget = ("--child-budget", "0.005", "--wind-down", "0")  # stopped, not wound down
    report = cli("demo", "research_runaway", *budget, "--dir", box, "--otlp", env=env)
    runs = {r["run_id"]: r for r in walk(report)}
    [stopped] = [r for r in runs.values() if r["status"] == "budget_exceeded"]

    traces = jaeger_traces(jaeger_url, unique_name, expected_span_count(report))
    assert list(traces) == [report["trace_id"]]
    spans = traces[report["trace_id"]]
    agents = {s.attr("orchestra.run.id"): s for s in operation(spans, "invoke_agent")}
    assert set(agents) == set(runs)
    child = agents[stopped["run_id"]]
    assert child.status == "ERROR"
    assert child.attr("error.type") == "budget_exceeded"
    assert child.status_message == stopped["reason"] and "budget" in stopped["reason"]
    for run_id, span in agents.items():
        if run_id != stopped["run_id"]:
            assert span.status == "UNSET" and span.attr("error.type") is None
    check_costs(spans, agents, report)


def killed_slow_tree(store: Path, box: Path, env: dict[str, str], jaeger: str, service: str) -> str:
    """``orchestra demo slow_tree --otlp`` SIGKILLed while its children scan (3 s each),
    once Jaeger holds the chat spans of all 4 runs; returns the root run id."""
    from orchestra._stores.sqlite import SQLiteStore  # this test's only use of orchestra itself

    command = ["demo", "slow_tree", "--otlp", "--store", str(store), "--dir", str(box), "--json"]
    process = subprocess.Popen(
        [*ORCHESTRA, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:

        def chats_of_every_run() -> dict[str, list[Span]] | None:
            traces = jaeger_traces(jaeger, service, 1)
            spans = [s for t in traces.values() for s in t]
            runs = {s.attr("orchestra.run.id") for s in operation(spans, "chat")}
            return traces if len(runs) == 4 else None

        poll(lambda: store.exists() or None, "the store")
        poll(chats_of_every_run, "the first chat span of every run of the tree", timeout=10.0)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL  # killed mid-run, not finished
    [root] = SQLiteStore(store).list_runs(limit=1)
    return root.run_id


@pytest.mark.otlp
def test_a_tree_killed_mid_run_then_resumed_is_one_trace_without_orphans(
    jaeger_url: str, unique_name: str, tmp_path: Path
) -> None:
    """``kill -9`` loses the spans in flight (agent spans, the running tools); every span
    exported before or after the kill has its parent in the trace, and the trace one root."""
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_EXPORTER_OTLP_ENDPOINT=os.environ.get("ORCHESTRA_OTLP_HTTP", "http://127.0.0.1:4318"),
    )
    store = tmp_path / "store" / "runs.db"
    root_id = killed_slow_tree(store, tmp_path / "box", env, jaeger_url, unique_name)
    done = cli("resume", root_id, "--otlp", "--store", str(store), env=env)
    assert done["status"] == "completed" and done["run_id"] == root_id

    def all_agents_ended() -> dict[str, list[Span]] | None:
        traces = jaeger_traces(jaeger_url, unique_name, 1)
        spans = [s for t in traces.values() for s in t]
        ended = [s for s in operation(spans, "invoke_agent") if s.attr("orchestra.status")]
        return traces if len(ended) == 4 else None

    traces = poll(all_agents_ended, "the resumed tree's 4 agent spans")
    assert list(traces) == [done["trace_id"]]
    spans = traces[done["trace_id"]]
    root = check_one_root_no_orphan(spans)
    segments = segment_spans(spans)
    killed = [s for s in segments if not s.attr("orchestra.resumed")]
    resumed = [s for s in segments if s.attr("orchestra.resumed")]
    assert len(killed) == len(resumed) == 4
    [first] = [s for s in killed if s.attr("orchestra.run.id") == root_id]
    [again] = [s for s in resumed if s.attr("orchestra.run.id") == root_id]
    assert root == first and again.parent_id == first.span_id
    assert {s.parent_id for s in resumed if s != again} == {again.span_id}  # under the resume
    agents = operation(spans, "invoke_agent")  # the killed segment's never ended: lost
    assert len(agents) == 4 and all(a.attr("orchestra.resumed") for a in agents)
    assert {a.attr("orchestra.status") for a in agents} == {"completed"}
    chats = operation(spans, "chat")
    assert len(chats) == sum(int(r["turns"]) for r in walk(done))  # none lost: none in flight
    by_id = {s.span_id: s for s in spans}
    assert {by_id[c.parent_id].name.split()[0] for c in chats} == {"orchestra.segment"}


# -- Phoenix --------------------------------------------------------------------------------


@pytest.mark.phoenix
def test_research_tree_reaches_phoenix_as_one_trace(
    phoenix_url: str, unique_name: str, tmp_path: Path
) -> None:
    endpoint = os.environ.get("ORCHESTRA_PHOENIX_OTLP_GRPC", "http://127.0.0.1:4319")
    env = otel_env(
        OTEL_SERVICE_NAME=unique_name,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={unique_name}",
    )
    report = cli(
        "demo",
        "research",
        "--dir",
        str(tmp_path / "box"),
        "--otlp",
        "--otlp-protocol",
        "grpc",
        "--otlp-endpoint",
        endpoint,
        env=env,
    )
    spans = phoenix_spans(phoenix_url, unique_name, expected_span_count(report))
    check_research_tree(spans, report)
