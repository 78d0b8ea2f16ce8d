"""Server-sent events as the standard reads them, and which of them are chunks (issue 43.4)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from orchestra import OpenAIProvider, ProviderHTTPError, ProviderReplyError, RetryPolicy
from orchestra._model.provider import ChatRequest
from orchestra._model.sse import EventParser, ServerEvent
from orchestra._model.stream import Assembly, Reading
from orchestra._scripted.stream import chunks
from orchestra.testing import reply

PLAN = {"model": "plan", "messages": [{"role": "user", "content": "What went wrong?"}]}


def parsed(*pieces: str) -> list[ServerEvent]:
    parser = EventParser()
    return [event for piece in pieces for event in parser.feed(piece)]


@pytest.mark.parametrize(
    ("stream", "events"),
    [
        ("data: a\n\n", [ServerEvent("a")]),
        ("data:a\r\n\r\ndata: b\r\rdata: c\n\n", [ServerEvent(x) for x in "abc"]),
        ("data: {\ndata: 1}\n\n", [ServerEvent("{\n1}")]),  # data lines joined with LF
        ("id: 7\n\nretry: 3000\n\n: keep-alive\n\n", []),  # nothing to dispatch
        ("data\n\ndata:\n\n", []),  # empty data: not dispatched
        ("data\ndata\n\n", [ServerEvent("\n")]),
        ("event: ping\ndata: {}\n\ndata: x\n\n", [ServerEvent("{}", "ping"), ServerEvent("x")]),
        ("id: 1\nretry: 10\ndata: x\nfoo: bar\n\n", [ServerEvent("x")]),
        ("\ufeffdata: x\n\n", [ServerEvent("x")]),  # a byte-order mark first is dropped
        ("data: x\n", []),  # the stream ended before the event did
        ("data:  two spaces\n\n", [ServerEvent(" two spaces")]),
    ],
)
def test_events_are_read_as_the_standard_says(stream: str, events: list[ServerEvent]):
    assert parsed(stream) == events
    for cut in range(1, len(stream)):  # cut anywhere: the same events
        assert parsed(stream[:cut], stream[cut:]) == events, cut
    assert parsed(*stream) == events  # a character at a time


def test_only_chunks_are_read_into_the_reply():
    assembly = Assembly()
    for event in (ServerEvent("{}", "ping"), ServerEvent('{"x": 1}', "other")):
        assert assembly.take(event) is Reading.ON
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    assert assembly.take(ServerEvent(json.dumps(chunk))) is Reading.ON
    assert assembly.take(ServerEvent("[DONE]")) is Reading.DONE
    assert assembly.body()["choices"][0]["message"]["content"] == "hi"


def test_a_stream_past_its_cap_is_cut():
    assembly = Assembly(limit=3)
    piece = {"choices": [{"index": 0, "delta": {"content": " word word"}}]}
    assert assembly.take(ServerEvent(json.dumps(piece))) is Reading.ON
    assert assembly.take(ServerEvent(json.dumps(piece))) is Reading.CUT


def test_visible_reasoning_is_counted_as_it_arrives_but_is_not_the_answer():
    heard: list[tuple[str, str, int]] = []

    class Ear:
        def text(self, piece: str, tokens: int) -> None:
            heard.append(("text", piece, tokens))

        def arguments(self, piece: str, tokens: int) -> None:
            heard.append(("thought", piece, tokens))

    assembly = Assembly(limit=1000, listener=Ear())
    for delta in ({"reasoning_content": "Let me think about it."}, {"content": "Yes."}):
        assembly.take(ServerEvent(json.dumps({"choices": [{"index": 0, "delta": delta}]})))
    assert [kind for kind, _, _ in heard] == ["thought", "text"]
    assert assembly.counted == sum(tokens for _, _, tokens in heard) > 2  # both are charged
    assert assembly.body()["choices"][0]["message"]["content"] == "Yes."


@pytest.mark.parametrize(
    ("event", "status"),
    [
        (ServerEvent('{"error": {"message": "overloaded", "code": 503}}'), 503),
        (ServerEvent('{"error": {"message": "overloaded", "type": "server_error"}}'), None),
        (ServerEvent("overloaded", "error"), None),
        (ServerEvent('{"error": {"message": "overloaded", "code": 429}}', "error"), 429),
    ],
)
def test_an_error_mid_stream_is_the_server_s_failure(event: ServerEvent, status: int | None):
    with pytest.raises(ProviderHTTPError, match="failed mid-stream: overloaded") as caught:
        Assembly().take(event)
    assert caught.value.status_code == status


@pytest.mark.parametrize("data", ["[1, 2]", "nope", '"text"'])
def test_a_message_that_is_not_a_chunk_is_a_reply_error(data: str):
    with pytest.raises(ProviderReplyError, match="not a chat-completion chunk"):
        Assembly().take(ServerEvent(data))


class Raw(httpx.AsyncBaseTransport):
    """Answers every request with ``body`` as an event stream, ``size`` bytes at a time."""

    def __init__(self, body: bytes, size: int) -> None:
        self.body, self.size = body, size

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        return httpx.Response(200, headers=headers, stream=Pieces(self.body, self.size))


class Pieces(httpx.AsyncByteStream):
    def __init__(self, body: bytes, size: int) -> None:
        self.body, self.size = body, size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.size):
            yield self.body[start : start + self.size]


def spec_stream(events: list[bytes]) -> bytes:
    """``events`` written with everything else the standard allows around them."""
    out = [b"\xef\xbb\xbfretry: 3000\r\n\r\n", b": keep-alive\r\n\r\n"]
    for n, event in enumerate(events):
        data = event.removeprefix(b"data: ").removesuffix(b"\n\n")
        if data.startswith(b"{"):  # one JSON text over two data lines, cut between tokens
            cut = data.index(b",") + 1
            data = data[:cut] + b"\r\ndata:" + data[cut:]
        out.append(b"id: %d\r\n\r\nid: %d\r\ndata: " % (n, n) + data + b"\r\n\r\n")
    return b"".join(out)


@pytest.mark.parametrize("size", [1, 7, 1 << 20])
async def test_a_stream_with_ids_retries_comments_and_long_data_is_read_whole(size: int):
    completion = reply(PLAN)
    body = spec_stream(chunks(completion, include_usage=True))
    provider = OpenAIProvider(base_url="http://s/v1", api_key="k", transport=Raw(body, size))
    got = await provider.complete(ChatRequest(model="plan", messages=PLAN["messages"]))
    assert got.message == completion["choices"][0]["message"]
    assert got.completion_tokens == completion["usage"]["completion_tokens"]


def _answering(status: int, content_type: str, body: bytes) -> OpenAIProvider:
    """A provider whose server answers every request with ``body`` as ``content_type``."""
    transport = httpx.MockTransport(
        lambda _: httpx.Response(
            status, headers={"content-type": content_type, "retry-after": "3"}, content=body
        )
    )
    return OpenAIProvider(base_url="http://s/v1", api_key="k", transport=transport)


async def test_a_stream_s_media_type_is_read_in_any_case():
    """Found by tests/model/test_fuzz_replies.py: ``Text/Event-Stream`` was read as JSON."""
    completion = reply(PLAN)
    body = b"".join(chunks(completion, include_usage=True))
    provider = _answering(200, "Text/Event-Stream; charset=UTF-8", body)
    got = await provider.complete(ChatRequest(model="plan", messages=PLAN["messages"]))
    assert got.streamed and got.message == completion["choices"][0]["message"]


@pytest.mark.parametrize(("status", "retried"), [(429, True), (400, False)])
async def test_an_error_status_sent_as_an_event_stream_is_the_server_s_error(
    status: int, retried: bool
):
    """Found by tests/model/test_fuzz_replies.py: such an answer was a stream that
    "ended before [DONE]", its status (which decides a retry), its Retry-After
    and its message lost."""
    body = b'{"error": {"message": "slow down"}}'
    provider = _answering(status, "text/event-stream", body)
    with pytest.raises(ProviderHTTPError, match=f"answered {status}: slow down") as caught:
        await provider.complete(ChatRequest(model="plan", messages=PLAN["messages"]))
    assert caught.value.status_code == status and caught.value.retry_after == 3.0
    assert RetryPolicy().transient(caught.value) is retried
