"""Streamed replies: deltas for the whole tree as they come, and every token
that arrived charged once, whether the stream ends, is cut or is stopped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestra import (
    Limits,
    MemoryStore,
    OpenAIProvider,
    Price,
    PriceTable,
    Runner,
    SQLiteStore,
    Status,
)
from orchestra._events import Event
from orchestra._feed import EventFeed
from orchestra._money import from_usd
from orchestra._recipes.demo import demo_agent, demo_task
from orchestra._recipes.money import SCRIPTED_PRICE
from orchestra._scripted.stream import chunks
from orchestra._stores.contract import StreamNote
from orchestra.testing import ScriptedTransport

PRICES = PriceTable(default=SCRIPTED_PRICE, published=False)


def runner_over(transport: httpx.AsyncBaseTransport, **kw: Any) -> Runner:
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=transport)
    return Runner(provider=provider, prices=PRICES, **kw)


# -- the scripted server speaks the protocol ------------------------------------------


def test_the_official_openai_client_streams_from_serve_scripted() -> None:
    openai = pytest.importorskip("openai")
    server = subprocess.Popen(
        [sys.executable, "-m", "orchestra", "serve-scripted", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        url = server.stderr.readline().split(" at ")[1].strip()
        client = openai.OpenAI(base_url=url, api_key="not-a-secret-key")
        messages = [{"role": "user", "content": "go"}]
        pieces = list(
            client.chat.completions.create(
                model="plan", messages=messages, stream=True, stream_options={"include_usage": True}
            )
        )
        whole = client.chat.completions.create(model="plan", messages=messages)
        client.close()
    finally:
        server.kill()
        server.communicate()
    calls = [
        c.choices[0].delta.tool_calls for c in pieces if c.choices and c.choices[0].delta.tool_calls
    ]
    assert (
        calls[0][0].function.name == "list_files"
        and calls[0][0].id == whole.choices[0].message.tool_calls[0].id
    )
    finish = [
        c.choices[0].finish_reason for c in pieces if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["tool_calls"] == [whole.choices[0].finish_reason]
    assert pieces[-1].choices == [] and pieces[-1].usage == whole.usage  # the usage chunk, last


def test_a_streamed_reply_is_the_reply_in_pieces() -> None:
    content = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
    completion = {
        "id": "c1",
        "created": 0,
        "model": "plan",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 17, "total_tokens": 27},
    }
    events = chunks(completion, include_usage=True)
    assert events[-1] == b"data: [DONE]\n\n"
    data = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    text = "".join(d["choices"][0]["delta"].get("content") or "" for d in data if d["choices"])
    assert text == content and len(data) > 4
    assert data[-1]["usage"] == completion["usage"] and data[-1]["choices"] == []
    assert b"usage" not in b"".join(chunks(completion, include_usage=False))


# -- deltas for the whole tree --------------------------------------------------------


async def test_handle_events_carry_every_run_s_deltas_with_depth(sandbox, autojump_clock) -> None:
    runner = runner_over(ScriptedTransport(chunk_s=0.05))
    seen: list[Event] = []
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, demo_agent("research", sandbox), demo_task("research"))
        async for event in handle.events():
            seen.append(event)
        result = await handle.wait()
    deltas = [e for e in seen if e.type == "text_delta"]
    runs = {e.run_id: e.data["depth"] for e in deltas}
    assert runs[result.run_id] == 0 and len(runs) == 1 + len(result.children)
    assert {runs[c.run_id] for c in result.children} == {1}
    for run in result.walk():  # what streamed is what the run answered
        said = "".join(e.data["text"] for e in deltas if e.run_id == run.run_id)
        assert said.endswith(run.answer)
    assert seen[-1].type == "run_stopped" and seen[-1].run_id == result.run_id


async def test_a_resumed_trees_events_have_each_runs_depth_from_the_first(
    sandbox, autojump_clock
) -> None:
    """Sinks (``--json-events``) get the depth the runner knows: a child's first
    event after a resume is at depth 1 though its parent's start was never seen."""
    seen: list[Event] = []
    runner = Runner(provider=runner_over(ScriptedTransport()).provider, sink=seen.append)
    agent = demo_agent("slow_tree", sandbox)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("slow_tree", 3))
        await trio.sleep(1.0)  # the children are inside their scans
        handle.cancel("pause")
    seen.clear()
    result = await runner.resume(handle.run_id, agent)
    depths = {e.run_id: e.depth for e in seen}
    assert depths.pop(result.run_id) == 0 and len(result.children) == 3
    assert depths == {c.run_id: 1 for c in result.children}
    assert all("depth" not in e.to_dict() for e in seen)  # the trace lines are as they were


def test_a_slow_reader_gets_deltas_coalesced_and_nothing_dropped() -> None:
    feed = EventFeed()

    def event(kind: str, run: str, **data: Any) -> Event:
        return Event(type=kind, run_id=run, root_id="r", parent_id=None, at=0.0, data=data)

    for piece in ("a", "b", "c"):
        feed.put(event("text_delta", "r", text=piece, tokens=1))
    feed.put(event("text_delta", "child", text="x", tokens=1))
    feed.put(event("turn", "r"))
    feed.put(event("text_delta", "r", text="d", tokens=1))
    feed.close()

    async def read() -> list[Event]:
        return [e async for e in feed]

    got = trio.run(read)
    assert [(e.type, e.run_id, e.data.get("text")) for e in got] == [
        ("text_delta", "r", "abc"),
        ("text_delta", "child", "x"),
        ("turn", "r", None),
        ("text_delta", "r", "d"),
    ]
    assert got[0].data["tokens"] == 3 and feed.coalesced == 2


# -- every token that arrived is charged, once -----------------------------------------


async def test_a_stream_cut_midway_is_charged_and_asked_again(sandbox) -> None:
    events: list[Event] = []
    runner = runner_over(ScriptedTransport(), sink=events.append)
    result = await runner.run(demo_agent("plan+cut3", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    assert cut["tokens"] > 0 and cut["turn"] == 1
    turns = [e.data for e in events if e.type == "turn"]
    assert len(turns) == 3 and result.state.own.model_calls == 4  # the cut call is billed
    billed = sum(SCRIPTED_PRICE.cost(t["prompt_tokens"], t["completion_tokens"]) for t in turns)
    assert result.state.own.cost_pico > billed  # plus what arrived of the cut one
    assert all(m.get("content") != cut["text"] for m in result.state.messages)  # never a reply


async def test_a_stop_midstream_charges_what_arrived_and_a_resume_keeps_it(
    sandbox, autojump_clock
) -> None:
    store = MemoryStore()  # a SQLite store saves on threads: the mock clock would jump
    events: list[Event] = []
    runner = runner_over(ScriptedTransport(chunk_s=1.0), store=store, sink=events.append)
    agent = demo_agent("plan", sandbox)
    async with trio.open_nursery() as nursery:
        handle = await runner.start(nursery, agent, demo_task("plan"))
        await trio.sleep(2.5)  # the first reply is streaming: a few pieces have come
        handle.cancel("Stop")
        stopped = await handle.wait()
    assert stopped.status is Status.INTERRUPTED
    assert [m["role"] for m in stopped.state.messages] == ["system", "user"]  # no partial reply
    (cut,) = [e.data for e in events if e.type == "reply_cut"]
    own = stopped.state.own
    assert own.model_calls == 1 and own.completion_tokens == cut["tokens"] > 0
    assert own.cost_pico == SCRIPTED_PRICE.cost(own.prompt_tokens, own.completion_tokens)
    saved = store.load(stopped.run_id).own
    assert saved == own  # kept with the run, not only in memory

    later = runner_over(ScriptedTransport(), store=store)  # a new runner: only the store carries
    done = await later.resume(stopped.run_id, agent)
    assert done.status is Status.COMPLETED and done.state.own.model_calls == 1 + 3
    fresh = await runner_over(ScriptedTransport()).run(agent, demo_task("plan"))
    assert done.state.own.cost_pico == own.cost_pico + fresh.state.own.cost_pico  # once each


class Runaway(httpx.AsyncBaseTransport):
    """A server that ignores max_tokens: it streams a long text whatever the cap."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        completion = {
            "id": "c",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "word " * 2000},
                    "finish_reason": "stop",
                }
            ],
        }
        stream = httpx.ByteStream(b"".join(chunks(completion, include_usage=False)))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


async def test_a_stream_past_its_cap_is_cut_there_and_the_budget_holds(sandbox) -> None:
    runner = runner_over(Runaway())
    agent = demo_agent("plan", sandbox, limits=Limits(max_turns=5, max_budget_usd=0.01))
    result = await runner.run(agent, demo_task("plan"))
    own = result.state.own
    assert own.model_calls >= 1 and own.completion_tokens <= 1024 * own.model_calls
    assert result.state.tree.cost_pico <= from_usd(0.01)
    assert result.state.messages[-1]["role"] == "assistant"


class NotingStore(MemoryStore):
    """A memory store that keeps stream notes, as the shared stores do: every write noted."""

    def __init__(self) -> None:
        super().__init__()
        self.noted: list[tuple[str, StreamNote | None]] = []

    @property
    def stream_notes(self) -> NotingStore:  # type: ignore[override]
        return self

    def note_stream(self, run_id: str, root_id: str, stream: StreamNote | None) -> None:
        self.noted.append((run_id, stream))

    def stream_note(self, run_id: str) -> StreamNote | None:
        return None


async def test_a_streaming_run_notes_each_piece_before_it_is_shown(sandbox) -> None:
    store = NotingStore()
    seen: list[tuple[int, str]] = []
    runner = runner_over(
        ScriptedTransport(),
        store=store,
        sink=lambda e: (
            seen.append((len(store.noted), e.data["text"])) if e.type == "text_delta" else None
        ),
    )
    result = await runner.run(demo_agent("plan", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    notes = [s for _, s in store.noted if s is not None]
    assert notes and all(n.prompt > 0 and n.cap == 1024 and n.tokens > 0 for n in notes)
    said = "".join(text for _, text in seen)
    assert said.endswith(result.answer) and notes[-1].text == result.answer
    for noted, _ in seen:  # every piece of text was noted before the reader saw it
        assert noted >= 1 and store.noted[noted - 1][1] is not None


def test_the_console_shows_a_running_run_s_streaming_text() -> None:
    from orchestra._result import RunResult
    from orchestra._state import RunState
    from orchestra.console._tree_view import tree_html

    state = RunState(run_id="r1", root_id="r1", agent="assistant", model="plan")
    html = str(tree_html(RunResult(state=state), "r1", {}, {"r1": "errors.log mentions a time"}))
    assert "errors.log mentions a time" in html and "streaming" in html
    assert "errors.log" not in str(tree_html(RunResult(state=state), "r1", {}))


def test_a_process_killed_midstream_has_what_arrived_charged_by_the_resume(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "orchestra"]
    server = subprocess.Popen(
        [*cli, "serve-scripted", "--port", "0", "--chunk-ms", "300"],
        stderr=subprocess.PIPE,
        text=True,
    )
    store_path = tmp_path / "runs.db"
    prices = ["--price-in", "2", "--price-out", "12"]
    try:
        assert server.stderr is not None
        url = server.stderr.readline().split(" at ")[1].strip()
        base = ["--store", str(store_path)]
        run = subprocess.Popen(
            [*cli, "run", "Why?", "--base-url", url, "--model", "plan", *prices, *base, "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert run.stderr is not None
        line = run.stderr.readline()
        while not line.endswith(" started\n"):  # "sandbox: …" comes first
            line = run.stderr.readline()
        run_id = line.split()[1]
        deadline = time.monotonic() + 30
        noted = None
        while noted is None or noted.tokens == 0:
            assert time.monotonic() < deadline, "the stream was never noted"
            time.sleep(0.05)
            with SQLiteStore(store_path) as store:
                noted = store.stream_note(run_id)
        run.kill()  # SIGKILL, midstream
        run.communicate()
        with SQLiteStore(store_path) as store:
            before = store.load(run_id).own
            noted = store.stream_note(run_id) or noted  # more may have come before the kill
        resumed = subprocess.run(
            [*cli, "resume", run_id, *base, "--json"], capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
    finally:
        server.kill()
        server.communicate()
    with SQLiteStore(store_path) as store:
        state = store.load(run_id)
        cuts = [e for e in store.events(run_id=run_id) if e["type"] == "reply_cut"]
        assert store.stream_note(run_id) is None
    assert state.status is Status.COMPLETED
    (cut,) = cuts
    assert cut["tokens"] == noted.tokens and "the process reading it stopped" in cut["reason"]
    assert state.own.model_calls == before.model_calls + 1 + 3  # the lost call, then three
    lost = Price(input_per_million=2, output_per_million=12)
    assert state.own.cost_pico >= before.cost_pico + lost.cost(noted.prompt, noted.tokens)


async def test_a_stream_kept_alive_past_the_request_timeout_is_charged_and_asked_again(
    sandbox, autojump_clock
) -> None:
    """``: keep-alive`` every 0.5 s after the first event: the request timeout (3 s)
    ends the call all the same; what arrived is charged, the call asked again."""
    events: list[Event] = []
    provider = OpenAIProvider(
        base_url="http://s/v1", api_key="k", transport=ScriptedTransport(), timeout=3.0
    )
    runner = Runner(provider=provider, prices=PRICES, sink=events.append)
    start = trio.current_time()
    with trio.fail_after(60):
        result = await runner.run(demo_agent("plan+keepalive", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED
    (retry,) = [e.data for e in events if e.type == "model_retry"]
    assert "request timeout (3 s)" in retry["error"]
    assert trio.current_time() - start == pytest.approx(3.0 + retry["wait_s"], abs=0.01)
