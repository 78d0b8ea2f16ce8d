"""Fuzz: whatever a server sends, a run ends with one exit as data (issue 43.7).

Hypothesis writes what an OpenAI-compatible server can send, as bytes:
whole JSON replies and server-sent event streams, cut into pieces anywhere
(inside an escape, a UTF-8 character, a CR LF), with arbitrary Unicode and
escapes (lone surrogates, ``\\u0000``, U+2028), numbers (integers past 64
bits, 5,000 digits, ``1e400``, ``NaN``, ``Infinity``), nesting up to 3,000
deep, every SSE field (``id:``, ``retry:``, ``event:``, comments, multi-line
``data:``, CR, LF and CR LF, a byte-order mark), error statuses, bodies with
bytes that are not UTF-8, and usage present, absent or wrong (negative,
past the plausible, strings, fractions). :class:`Server` plays them to
``Runner.run`` through an in-process httpx transport, for agents with tools
and an agent tool (a child run), with a structured answer through
``response_format`` (a JSON schema) or through ``final_answer`` (an attrs
class with a validator and a private field), over a MemoryStore or an
SQLiteStore, under MockClock. Each example asserts (:func:`check`):

- one exit as data: ``Runner.run`` returns a RunResult (never raises, never
  hangs), every run of its tree has a terminal status, a reason unless it
  completed, and exactly one ``run_stopped`` event;
- nothing ``running`` after the call returns, in the result or the store;
- no traceback: no internal error, no stack trace in a reason, an error or
  an event;
- spend within the limits: a tree whose server reported usage honestly (or
  none) spends at most ``max_budget_usd`` and ``max_tokens_total``; one whose
  server reported more than it was asked for never ends ``completed`` over
  its budget (the budget gate's guarantee, see ``orchestra._core.budget``).

The examples are derandomized (the same ones on every run: CI is
repeatable); ``ORCHESTRA_FUZZ=N`` runs N fresh random examples per property
instead, for a longer hunt.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import orjson
import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestra import (
    Agent,
    Limits,
    MemoryStore,
    OpenAIProvider,
    PriceTable,
    ProviderError,
    RetryPolicy,
    Runner,
    RunResult,
    SQLiteStore,
    Status,
    tool,
)
from orchestra._model.provider import ChatRequest
from orchestra._model.tokens import count_prompt, declarations
from orchestra._money import from_usd
from orchestra._recipes.money import SCRIPTED_PRICE
from orchestra._stores.contract import Store

Draw = Callable[[st.SearchStrategy[Any]], Any]

_HUNT = int(os.environ.get("ORCHESTRA_FUZZ", "0"))
FUZZ: Final = settings(
    max_examples=_HUNT or 200,
    derandomize=not _HUNT,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""200 examples per property, the same on every run (``ORCHESTRA_FUZZ=N``: N random ones)."""

# -- JSON as a server writes it: bytes, escapes and numbers of any kind ------------

ESCAPES: Final = (
    b'\\"',
    b"\\\\",
    b"\\/",
    b"\\b",
    b"\\f",
    b"\\n",
    b"\\r",
    b"\\t",
    b"\\u0000",
    b"\\ud83d",  # a lone high surrogate
    b"\\ude00",  # a lone low surrogate
    b"\\ud83d\\ude00",  # a pair: one emoji
    b"\\udbff\\udbff",
    b"\\uffff",
    b"\\ufeff",
    b"\\u2028",
    b"\\u0085",
)
NUMBER_WORDS: Final = (
    b"18446744073709551615",  # 2**64 - 1: the largest that can be kept
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b"9" * 5000,  # past Python's digit limit for int()
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"-0",
    b"0.0",
    b"1E+2",
    b"1.5",
    b"0",
    b"7",
)
DEPTHS: Final = (0, 0, 0, 0, 1, 63, 64, 65, 1023, 1024, 1025, 3000)
"""How deep a value is wrapped in arrays (64: the deepest kept; 1,024: orjson's limit)."""
JUNK: Final = (b"\xff", b"\xed\xa0\xbd", b"\xc3", b"\x00", b"\n", b"\r\n", b"\\", b'"', b"}")
"""Bytes no JSON text holds there: damage somewhere in a body."""

_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters='"\\', min_codepoint=0x20)
string_tokens: st.SearchStrategy[tuple[bytes, ...]] = st.lists(
    st.one_of(
        _CHARS.map(str.encode),
        _CHARS.map(str.encode),
        st.sampled_from(ESCAPES),
        st.integers(0, 0xFFFF).map(lambda n: b"\\u%04x" % n),
    ),
    max_size=12,
).map(tuple)
"""The inside of a JSON string, token by token (a character or an escape)."""
strings = string_tokens.map(lambda tokens: b'"' + b"".join(tokens) + b'"')
numbers = st.one_of(
    st.integers().map(lambda n: str(n).encode()),
    st.integers(2**62, 2**70).map(lambda n: str(n).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode()),
    st.sampled_from(NUMBER_WORDS),
)
scalars = st.one_of(strings, numbers, st.sampled_from((b"true", b"false", b"null")))


def array(items: Sequence[bytes]) -> bytes:
    """A JSON array of ``items`` (each JSON already)."""
    return b"[" + b",".join(items) + b"]"


def obj(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A JSON object of ``pairs`` (keys and values JSON already; repeated keys kept)."""
    return b"{" + b",".join(key + b":" + value for key, value in pairs) + b"}"


def nested(depth: int, value: bytes) -> bytes:
    """``value`` inside ``depth`` arrays."""
    return b"[" * depth + value + b"]" * depth


shallow = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(array),
        st.lists(st.tuples(strings, inner), max_size=4).map(obj),
    ),
    max_leaves=8,
)
values = st.builds(nested, st.sampled_from(DEPTHS), shallow)
"""Any JSON value, sometimes nested past every limit."""


def fitting(**fields: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """An object with ``fields`` (each a fuzzed value): the shape a tool or answer
    asks for, so what is inside its fields is what is fuzzed."""
    pairs = [st.tuples(st.just(b'"%s"' % name.encode()), value) for name, value in fields.items()]
    return st.tuples(*pairs).map(obj)


ARGUMENTS: Final = {  # each tool's arguments: the right fields, fuzzed values
    b'"read_file"': fitting(path=st.one_of(strings, strings, scalars)),
    b'"add"': fitting(a=numbers, b=numbers),
    b'"helper"': fitting(question=strings),
    b'"final_answer"': fitting(n=numbers, s=strings, note=st.one_of(strings, scalars)),
}
ANSWER: Final = fitting(n=numbers, s=strings)
"""A structured answer of :data:`SCHEMA`'s fields."""
SHAPES: Final = (*ARGUMENTS.values(), ANSWER)
documents = st.one_of(
    *SHAPES,
    values,
    st.builds(
        lambda shape, cut: shape[: cut % (len(shape) + 1)], st.one_of(*SHAPES), st.integers()
    ),
    st.just(b""),
)
"""JSON text a model writes where JSON is asked for: mostly the right shape."""

_UTF8_CHAR = re.compile(rb"[\x00-\x7f]|[\xc0-\xff][\x80-\xbf]*|[\x80-\xbf]")


def embedded(text: bytes) -> tuple[bytes, ...]:
    """``text`` as the inside of a JSON string, token by token (``"``, ``\\`` and
    control characters escaped; one token per UTF-8 character)."""
    tokens = []
    for char in _UTF8_CHAR.findall(text):
        if char in (b'"', b"\\"):
            tokens.append(b"\\" + char)
        elif len(char) == 1 and char[0] < 0x20:
            tokens.append(b"\\u%04x" % char[0])
        else:
            tokens.append(char)
    return tuple(tokens)


# -- a reply: what the model said, before it is written as a body or a stream -------


@attrs.frozen
class Call:
    """One tool call, its parts as JSON: ``arguments`` a string's tokens or a raw value."""

    index: bytes
    id: bytes | None
    name: bytes
    arguments: tuple[bytes, ...] | bytes


@attrs.frozen
class Said:
    """An assistant message: its content's tokens (None: ``null``), calls, finish."""

    content: tuple[bytes, ...] | None
    calls: tuple[Call, ...] | None
    finish: bytes
    id: bytes
    model: bytes


NAMES: Final = (b'"read_file"', b'"add"', b'"helper"', b'"final_answer"', b'"nope"')
FINISHES: Final = (b'"stop"', b'"tool_calls"', b'"length"', b'"content_filter"', b"null", b"7")


@st.composite
def calls(draw: Draw) -> Call:
    """A tool call; most name a tool and give it arguments of its fields."""
    name = draw(st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES), strings))
    shape = ARGUMENTS.get(name, documents) if draw(st.integers(0, 3)) else documents
    arguments = draw(st.one_of(shape.map(embedded), shape.map(embedded), shape, values))
    return Call(
        index=draw(st.one_of(st.sampled_from((b"0", b"1", b"2")), scalars)),
        id=draw(st.one_of(st.none(), strings, st.sampled_from((b'"c1"', b'"c1"', b"null", b"3")))),
        name=name,
        arguments=arguments,
    )


said = st.builds(
    Said,
    content=st.one_of(st.none(), string_tokens, ANSWER.map(embedded), documents.map(embedded)),
    calls=st.one_of(st.none(), st.lists(calls(), max_size=3).map(tuple)),
    finish=st.one_of(st.sampled_from(FINISHES), strings),
    id=st.one_of(strings, scalars),
    model=st.one_of(st.just(b'"fuzz"'), strings, scalars),
)

# -- usage: honest, absent or wrong ------------------------------------------------

USAGE: Final = b"\x00usage\x00"
"""Where a body's usage goes (``,"usage": ...`` or nothing), written per request."""


@attrs.frozen
class Usage:
    """The usage a reply reports: ``absent``; ``honest``, ``share`` of half our count
    of the request's prompt and ``share`` of its ``max_tokens`` (so within
    what the run reserved); or ``raw``, its ``json`` anything at all."""

    kind: str
    share: float = 0.0
    json: bytes = b""

    def written(self, request: dict[str, Any]) -> bytes:
        """The body's ``,"usage": ...`` for ``request`` (nothing when absent)."""
        if self.kind == "absent":
            return b""
        if self.kind == "raw":
            return b',"usage":' + self.json
        prompt = count_prompt(
            request["messages"],
            declarations(request.get("tools") or (), request.get("response_format")),
        )
        counts = {
            "prompt_tokens": int(prompt * self.share / 2),
            "completion_tokens": int(request.get("max_tokens", 0) * self.share),
        }
        counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
        return b',"usage":' + orjson.dumps(counts)


COUNTS: Final = (b"-1", b"10000001", b"9999999", b"2000", b'"12"', b"1.5", b"null", b"true")
usages = st.one_of(
    st.just(Usage("absent")),
    st.builds(Usage, kind=st.just("honest"), share=st.floats(0, 1)),
    st.builds(Usage, kind=st.just("honest"), share=st.floats(0, 1)),
    st.builds(
        Usage,
        kind=st.just("raw"),
        json=st.one_of(
            fitting(
                prompt_tokens=st.one_of(st.sampled_from(COUNTS), numbers),
                completion_tokens=st.one_of(st.sampled_from(COUNTS), numbers),
            ),
            fitting(
                prompt_tokens=st.sampled_from((b"5", b"2000")),
                completion_tokens=st.sampled_from((b"5", b"2000")),
                prompt_tokens_details=fitting(cached_tokens=st.sampled_from(COUNTS)),
                completion_tokens_details=st.one_of(
                    fitting(reasoning_tokens=st.sampled_from(COUNTS)), scalars
                ),
            ),
            values,
        ),
    ),
)

# -- whole replies ------------------------------------------------------------------


@attrs.frozen
class Reply:
    """One response: status, headers, body (with :data:`USAGE` to fill in), where the
    body is cut into pieces (at ``cuts``, taken modulo its length, and every
    ``every`` bytes if not 0), and where it is damaged."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    usage: Usage
    cuts: tuple[int, ...] = ()
    every: int = 0
    damage: tuple[int, bytes] | None = None

    def response(self, request: dict[str, Any]) -> httpx.Response:
        """This reply to ``request`` (its JSON), the body in pieces."""
        body = self.body.replace(USAGE, self.usage.written(request))
        if self.damage is not None:
            at, junk = self.damage
            at %= len(body) + 1
            body = body[:at] + junk + body[at:]
        return httpx.Response(
            self.status, headers=self.headers, stream=Pieces(body, self.cuts, self.every)
        )


class Pieces(httpx.AsyncByteStream):
    """``body`` sent in pieces, cut at ``cuts`` (taken modulo its length) and every
    ``every`` bytes (0: nowhere else)."""

    def __init__(self, body: bytes, cuts: Sequence[int], every: int = 0) -> None:
        self.body = body
        regular = range(0, len(body), every) if every else ()
        self.cuts = sorted({cut % (len(body) + 1) for cut in cuts} | {*regular, 0, len(body)})

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start, end in zip(self.cuts, self.cuts[1:], strict=False):
            await trio.lowlevel.checkpoint()
            yield self.body[start:end]


def text(tokens: tuple[bytes, ...] | None) -> bytes:
    """A JSON string of ``tokens``, or ``null``."""
    return b"null" if tokens is None else b'"' + b"".join(tokens) + b'"'


def whole_call(call: Call) -> bytes:
    """A tool call as a whole message has it."""
    arguments = call.arguments if isinstance(call.arguments, bytes) else text(call.arguments)
    fields = [
        (b'"type"', b'"function"'),
        (b'"function"', obj([(b'"name"', call.name), (b'"arguments"', arguments)])),
    ]
    if call.id is not None:
        fields.insert(0, (b'"id"', call.id))
    return obj(fields)


def whole_body(message: Said) -> bytes:
    """A chat completion with ``message``; usage where :data:`USAGE` is."""
    fields = [(b'"role"', b'"assistant"'), (b'"content"', text(message.content))]
    if message.calls is not None:
        fields.append((b'"tool_calls"', array([whole_call(c) for c in message.calls])))
    choice = obj(
        [(b'"index"', b"0"), (b'"message"', obj(fields)), (b'"finish_reason"', message.finish)]
    )
    head = obj(
        [(b'"id"', message.id), (b'"model"', message.model), (b'"choices"', array([choice]))]
    )
    return head[:-1] + USAGE + b"}"


STATUSES: Final = (*[200] * 12, 400, 404, 429, 500, 503)
JSON_TYPES: Final = ("application/json", "application/json; charset=utf-8", "text/plain", "")
RETRY_AFTER: Final = ("0", "1", "2.5", "-3", "abc", "86400", "Wed, 21 Oct 2015 07:28:00 GMT")


@st.composite
def headers(draw: Draw, types: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """A content type of ``types`` (none when empty), sometimes a ``Retry-After``."""
    found = [("content-type", kind)] if (kind := draw(st.sampled_from(types))) else []
    if draw(st.booleans()):
        found.append(("retry-after", draw(st.sampled_from(RETRY_AFTER))))
    return tuple(found)


damages = st.one_of(
    st.none(), st.none(), st.none(), st.tuples(st.integers(0, 2**16), st.sampled_from(JUNK))
)
cuts = st.lists(st.integers(0, 2**16), max_size=8).map(tuple)
EVERY: Final = (0, 0, 0, 0, 1, 2, 3, 5)
"""Cut a body every that many bytes too (1: a byte at a time), or 0: only at ``cuts``."""
whole_replies = st.builds(
    Reply,
    status=st.sampled_from(STATUSES),
    headers=headers(JSON_TYPES),
    body=st.one_of(said.map(whole_body), said.map(whole_body), values),
    usage=usages,
    cuts=cuts,
    every=st.sampled_from(EVERY),
    damage=damages,
)

# -- streams ----------------------------------------------------------------------

EOLS: Final = (b"\n", b"\r\n", b"\r")
EXTRAS: Final = (
    b": keep-alive",
    b":",
    b"id: 7",
    b"id",
    b"retry: 3000",
    b"retry: x",
    b"foo: bar",
    b"event: message",
    b"event: ping",
)
ENDS: Final = (
    b"data: [DONE]",
    b"data: [DONE]",
    b"data: [DONE]",
    b"",  # the stream ends without [DONE]
    b"event: error\ndata: overloaded",
    b'data: {"error": {"message": "overloaded", "code": 503}}',
    b'data: {"error": {"message": "bad", "code": 400}}',
    b"data: [DONE]\n\ndata: {nope",  # anything after [DONE] is not read
)
STREAM_TYPES: Final = ("text/event-stream", "text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM")


def pieces(tokens: tuple[bytes, ...], sizes: Sequence[int]) -> list[tuple[bytes, ...]]:
    """``tokens`` split into pieces of ``sizes`` in turn (at least one piece)."""
    found, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= len(tokens):
            break
        found.append(tokens[start : start + size])
        start += size
    return found or [()]


def choice(delta: bytes, finish: bytes | None = None) -> list[bytes]:
    """A chunk's fragments (JSON cut between tokens) with one choice of ``delta``."""
    end = [b',"finish_reason":', finish] if finish is not None else []
    return [b'{"choices":', b'[{"index":0,', b'"delta":', delta, *end, b"}]", b"}"]


def call_chunks(call: Call, sizes: Sequence[int]) -> list[list[bytes]]:
    """The chunks of one tool call: its id and name first, then its arguments in pieces."""
    head = [
        (b'"index"', call.index),
        (b'"type"', b'"function"'),
        (b'"function"', obj([(b'"name"', call.name)])),
    ]
    if call.id is not None:
        head.insert(1, (b'"id"', call.id))
    chunks = [choice(obj([(b'"tool_calls"', array([obj(head)]))]))]
    if isinstance(call.arguments, bytes):
        parts = [call.arguments]
    else:
        parts = [text(piece) for piece in pieces(call.arguments, sizes)]
    for part in parts:
        delta = obj([(b'"index"', call.index), (b'"function"', obj([(b'"arguments"', part)]))])
        chunks.append(choice(obj([(b'"tool_calls"', array([delta]))])))
    return chunks


@attrs.frozen
class Stream:
    """How a message is written as a stream: the sizes of its pieces (in tokens,
    in turn), whether a first chunk has its role, whether the usage rides on
    the finish chunk or comes alone, the events' styles (in turn), the end."""

    sizes: tuple[int, ...]
    role: bool
    usage_alone: bool
    styles: tuple[Style, ...]
    bom: bool
    end: bytes

    def chunks(self, message: Said) -> list[list[bytes]]:
        """The chunks of ``message``, usage where :data:`USAGE` is."""
        first = [
            b'{"id":',
            message.id,
            b',"model":',
            message.model,
            b',"choices":[{"index":0,"delta":{"role":"assistant"}}]}',
        ]
        found = [first] if self.role else []
        if message.content is not None:
            for piece in pieces(message.content, self.sizes):
                found.append(choice(obj([(b'"content"', text(piece))])))
        for call in message.calls or ():
            found += call_chunks(call, self.sizes)
        finish = choice(b"{}", message.finish)
        if self.usage_alone:
            return [*found, finish, [b'{"choices":[]', USAGE, b"}"]]
        return [*found, [*finish[:-1], USAGE, b"}"]]

    def body(self, message: Said) -> bytes:
        """``message`` as the body of an event stream."""
        written = [b"\xef\xbb\xbf"] if self.bom else []
        chunks = self.chunks(message)
        for fragments, style in zip(chunks, itertools.cycle(self.styles), strict=False):
            written.append(style.event(fragments))
        return b"".join(written) + self.end


@attrs.frozen
class Style:
    """How an event is written: what comes before it (a keep-alive, an event
    without data), its line end, the fields before its data, the ``data:``
    prefix, and where its data is cut into more lines (between JSON tokens)."""

    between: bytes
    eol: bytes
    fields: tuple[bytes, ...]
    prefix: bytes
    breaks: frozenset[int]

    def event(self, fragments: Sequence[bytes]) -> bytes:
        """One event whose data is ``fragments`` joined."""
        lines, data = list(self.fields), b""
        for n, fragment in enumerate(fragments):
            if data and n in self.breaks:
                lines.append(self.prefix + data)
                data = b""
            data += fragment
        lines.append(self.prefix + data)
        return self.between + self.eol.join(lines) + self.eol * 2


BETWEEN: Final = (
    b"",
    b"",
    b": keep-alive\n\n",
    b"id: 3\r\n\r\n",
    b"event: ping\ndata: {}\n\n",
    b"retry: 10\r\r",
)
styles = st.builds(
    Style,
    between=st.sampled_from(BETWEEN),
    eol=st.sampled_from(EOLS),
    fields=st.lists(st.sampled_from(EXTRAS), max_size=2).map(tuple),
    prefix=st.sampled_from((b"data: ", b"data:")),
    breaks=st.frozensets(st.integers(1, 7), max_size=3),
)
streams = st.builds(
    Stream,
    sizes=st.lists(st.integers(1, 24), min_size=1, max_size=3).map(tuple),
    role=st.booleans(),
    usage_alone=st.booleans(),
    styles=st.lists(styles, min_size=1, max_size=3).map(tuple),
    bom=st.booleans(),
    end=st.builds(
        lambda end, eol: end + eol * 2 if end else end, st.sampled_from(ENDS), st.sampled_from(EOLS)
    ),
)

stream_replies = st.builds(
    Reply,
    status=st.sampled_from((200, 200, 200, 200, 500)),
    headers=headers(STREAM_TYPES),
    body=st.builds(Stream.body, streams, said),
    usage=usages,
    cuts=st.lists(st.integers(0, 2**16), max_size=24).map(tuple),
    every=st.sampled_from(EVERY),
    damage=st.one_of(st.none(), st.none(), st.none(), st.none(), damages),
)

# -- the server, the agents, the runs ---------------------------------------------


class Server(httpx.AsyncBaseTransport):
    """Plays ``replies`` in order, the last again and again; notes whether all the
    usage it reported was honest (or absent)."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = replies
        self.served = 0
        self.honest = True

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The next reply to ``request``. A checkpoint."""
        asked = orjson.loads(await request.aread())
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        self.honest = self.honest and reply.usage.kind != "raw"
        await trio.lowlevel.checkpoint()
        return reply.response(asked)


@tool
def read_file(path: str) -> str:
    """Read a file (here: say which)."""
    return f"read {path}"


@tool
def add(a: int, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


@attrs.frozen
class Finding:
    """A structured answer: an attrs class with a validator and a private field."""

    n: int = attrs.field(validator=attrs.validators.ge(0))
    s: str = ""
    _note: str = ""


SCHEMA: Final = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
    "required": ["n", "s"],
    "additionalProperties": False,
}


@functools.cache
def agents(max_tokens: int) -> dict[str, Agent]:
    """The agents under test, each replying in at most ``max_tokens``: with tools and
    an agent tool, with an answer of :data:`SCHEMA`, with a :class:`Finding`."""
    helper = Agent(
        name="helper",
        model="fuzz",
        tools=[read_file],
        max_tokens=max_tokens,
        limits=Limits(max_turns=2),
    )
    tools = [read_file, add, helper.as_tool()]
    return {
        "tools": Agent(name="fuzz", model="fuzz", tools=tools, max_tokens=max_tokens),
        "schema": Agent(
            name="fuzz",
            model="fuzz",
            tools=[read_file, add],
            output_type=SCHEMA,
            max_tokens=max_tokens,
        ),
        "attrs": Agent(
            name="fuzz",
            model="fuzz",
            tools=[read_file, add],
            output_type=Finding,
            output_via="tool",
            max_tokens=max_tokens,
        ),
    }


@attrs.frozen
class Case:
    """One run to make: the agent, its limits, the store, the server's replies."""

    agent: str
    max_tokens: int
    limits: Limits
    sqlite: bool
    replies: tuple[Reply, ...]


limits = st.builds(
    Limits,
    max_turns=st.integers(1, 4),
    max_budget_usd=st.sampled_from((None, None, 0.003, 0.01, 0.05)),
    max_tokens_total=st.sampled_from((None, None, None, 1500, 10000)),
    timeout_s=st.sampled_from((30.0, 300.0)),
)


def cases(replies: st.SearchStrategy[Reply]) -> st.SearchStrategy[Case]:
    """Runs whose server answers with ``replies``."""
    return st.builds(
        Case,
        agent=st.sampled_from(("tools", "schema", "attrs")),
        max_tokens=st.sampled_from((16, 64, 1024)),
        limits=limits,
        sqlite=st.booleans(),
        replies=st.lists(replies, min_size=1, max_size=5).map(tuple),
    )


HANG_S: Final = 10_000.0
"""Seconds (MockClock's) after which a run is taken to hang: every deadline is shorter."""


def run(case: Case, store: Store, server: Server) -> RunResult:
    """``case`` run to its end under MockClock; fails the test if it hangs."""
    provider = OpenAIProvider(
        base_url="http://fuzz.test/v1", api_key="k", transport=server, timeout=20.0
    )
    runner = Runner(
        provider=provider,
        store=store,
        prices=PriceTable(default=SCRIPTED_PRICE, published=False),
        retry=RetryPolicy(attempts=3, wait_initial=0.1, wait_max=1.0, wait_jitter=0.1),
        poll_interval=1.0,
    )
    agent = agents(case.max_tokens)[case.agent]

    async def main() -> RunResult | None:
        with trio.move_on_after(HANG_S):
            try:
                return await runner.run(agent, "What went wrong?", limits=case.limits)
            finally:
                await provider.aclose()
        return None

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result is not None, "the run hung"
    return result


def check(result: RunResult, store: Store, case: Case, server: Server) -> None:
    """The promises of the module docstring, for one run's result and store."""
    assert isinstance(result, RunResult)
    runs = result.walk()
    for node in runs:
        state = node.state
        assert state.status.terminal, state.run_id
        assert state.reason.strip(), state
        assert not state.reason.startswith("internal error"), state.reason
        assert "Traceback" not in state.reason + (state.error or "")
    saved = store.list_runs(limit=1000, roots_only=False)
    assert {s.run_id for s in saved} == {node.run_id for node in runs}
    assert all(s.status.terminal for s in saved), [s.status for s in saved]
    events = store.events(root_id=result.run_id)
    assert "Traceback" not in orjson.dumps(events).decode()
    stops = [e["run_id"] for e in events if e["type"] == "run_stopped"]
    assert sorted(stops) == sorted(node.run_id for node in runs)
    check_spend(result, case.limits, honest=server.honest)
    event(result.status.value)  # their spread: pytest --hypothesis-show-statistics


def check_spend(result: RunResult, limits: Limits, *, honest: bool) -> None:
    """Spend within ``limits``; past them only when the server reported more than
    was asked for, and then never ``completed`` (see the module docstring)."""
    tree = result.state.tree
    within = (
        limits.max_budget_usd is None or tree.cost_pico <= from_usd(limits.max_budget_usd)
    ) and (
        limits.max_tokens_total is None
        or tree.prompt_tokens + tree.completion_tokens <= limits.max_tokens_total
    )
    if honest:
        assert within, (tree, limits)
    elif not within:
        assert result.status is Status.BUDGET_EXCEEDED, (result.status, result.state.reason)


def play(case: Case) -> None:
    """Run ``case`` over its store and check everything."""
    server = Server(case.replies)
    if not case.sqlite:
        store = MemoryStore()
        check(run(case, store, server), store, case, server)
        return
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SQLiteStore(Path(folder) / "runs.db")
        try:
            check(run(case, sqlite, server), sqlite, case, server)
        finally:
            sqlite.close()


@FUZZ
@given(cases(whole_replies))
def test_whole_replies_end_every_run_as_data(case: Case) -> None:
    play(case)


@FUZZ
@given(cases(stream_replies))
def test_streams_end_every_run_as_data(case: Case) -> None:
    play(case)


@FUZZ
@given(st.lists(st.one_of(whole_replies, stream_replies), min_size=1, max_size=4).map(tuple))
def test_any_reply_is_a_chat_reply_or_a_provider_error(replies: tuple[Reply, ...]) -> None:
    """The provider alone: whatever it reads is a reply or a :class:`ProviderError`."""

    async def main() -> None:
        server = Server(replies)
        provider = OpenAIProvider(base_url="http://fuzz.test/v1", api_key="k", transport=server)
        request = ChatRequest(
            model="fuzz", messages=[{"role": "user", "content": "hi"}], max_tokens=64
        )
        try:
            for _ in replies:
                with contextlib.suppress(ProviderError):
                    await provider.complete(request)
        finally:
            await provider.aclose()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
