"""The scripted provider's logic: a chat completion as a pure function of its request.

Each scenario is a small script: given a :class:`Conversation` (a read-only
view of the request's messages) it picks the next assistant message, either
prose or tool calls. :func:`reply` wraps that message in a full
``chat.completion`` object, counting usage with :mod:`orchestra._model.tokens` so the
numbers agree exactly with what our client reserves.

The bottom of the module describes the HTTP surface as data
(:func:`answer`), shared by the socket server and the in-process transport,
so both give the same routes, bodies and errors.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import attrs

from .._model.tokens import count_completion, count_prompt, count_text, declarations, encoding
from .extract import fill, spoil
from .request import Request, ScriptError, error_body, invalid, parse

__all__ = [
    "CHUNK_HEADER",
    "LATENCY_HEADER",
    "SANDBOX_FILES",
    "SCENARIOS",
    "Answer",
    "Conversation",
    "Scenario",
    "ScriptError",
    "Streamed",
    "answer",
    "chunk_delay",
    "reply",
]

Call: TypeAlias = tuple[str, Mapping[str, Any]]
"""One tool call a script makes: the tool's name and its arguments."""
Step: TypeAlias = str | tuple[Call, ...]
"""What a script says next: prose, or one message of tool calls."""

SANDBOX_FILES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "errors.log": (
            "2026-11-30T04:11:58Z INFO scheduler started 8 workers\n"
            "2026-11-30T04:12:09Z ERROR worker 7 timed out after 30000 ms\n"
            "2026-11-30T04:12:10Z INFO worker 7 restarted\n"
        ),
        "access.log": (
            "10.0.0.4 GET /health 200 2ms\n"
            "10.0.0.9 POST /jobs 202 41ms\n"
            "10.0.0.9 GET /jobs/7 504 30001ms\n"
            "10.0.0.4 GET /health 200 3ms\n"
        ),
        "notes.txt": (
            "When a worker times out, restart it once and then read errors.log. "
            "The scheduler runs eight workers with a thirty second deadline each. "
            "Slow requests show up in access.log with status 504. "
            "Page the on-call engineer only if restarts do not help, "
            "and never delete logs before the incident review."
        ),
    }
)
"""The files of the scenarios' sandbox directory, by name (each well under 80 tokens)."""

PLAN_ANSWER: Final = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
FOLLOW_UP_ANSWER: Final = (
    "Restart worker 7 once, as notes.txt advises; if it times out again, page the on-call engineer."
)
GIVE_UP_ANSWER: Final = "I could not find the log I needed, so I cannot tell what went wrong."
DELETED_ANSWER: Final = "Deleted access.log to free space."
ROTATED_LOG: Final = "10.0.0.4 GET /health 200 2ms\n"
ROTATED_ANSWER: Final = "Rotated access.log twice: it is deleted."
MAX_DEPTH: Final = 3
"""The ``researcher`` stops delegating at ``[depth 3]``: three levels below the root."""
MAX_CHILDREN: Final = 100


# -- the conversation, as scripts see it --------------------------------------------------


def _text(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text") for p in content if isinstance(p, Mapping))
        return "".join(t for t in parts if isinstance(t, str))
    return ""


def _as_tuple(messages: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(messages)


@attrs.frozen
class Conversation:
    """A read-only view of a request's messages, with the few facts scripts need."""

    messages: tuple[Mapping[str, Any], ...] = attrs.field(converter=_as_tuple)
    schema: Mapping[str, Any] | None = None
    """The JSON schema the request's ``response_format`` asks the answer to fit."""
    tools: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_as_tuple)
    """The tools the request declares."""

    def parameters(self, name: str) -> Mapping[str, Any] | None:
        """The parameters schema of the declared tool ``name`` (None if not declared)."""
        functions = (t.get("function") or {} for t in self.tools)
        return next((f.get("parameters") for f in functions if f.get("name") == name), None)

    @property
    def followed_up(self) -> bool:
        """The last message is the user's, after an answer in prose: a continued
        conversation's next question."""
        if not self.messages or self.messages[-1].get("role") != "user":
            return False
        earlier = self.messages[:-1]
        return any(m.get("role") == "assistant" and _text(m.get("content")) for m in earlier)

    @property
    def corrected(self) -> bool:
        """A user message came after the first: the script was told to fix something."""
        return sum(1 for m in self.messages if m.get("role") == "user") > 1

    @property
    def turn(self) -> int:
        """The number of assistant messages so far: 0 on the first request."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tool_messages(self) -> tuple[Mapping[str, Any], ...]:
        """The tool messages so far, in order."""
        return tuple(m for m in self.messages if m.get("role") == "tool")

    @property
    def question(self) -> str:
        """The text of the first user message ("" if there is none)."""
        users = (m for m in self.messages if m.get("role") == "user")
        return _text(next(users, {}).get("content"))

    @property
    def last_tool(self) -> str:
        """The content of the last tool message ("" if there is none)."""
        tools = self.tool_messages
        return _text(tools[-1].get("content")) if tools else ""

    def result(self, turn: int, index: int) -> str:
        """The answer to tool call ``index`` of assistant message ``turn`` ("" if missing).

        Matched by ``tool_call_id``; failing that, by position among the tool
        messages that follow that assistant message.
        """
        call_id = f"call_{turn}_{index}"
        for message in self.tool_messages:
            if message.get("tool_call_id") == call_id:
                return _text(message.get("content"))
        after = self._replies_to(turn)
        return _text(after[index].get("content")) if index < len(after) else ""

    def results(self, turn: int, count: int) -> list[str]:
        """The answers to the first ``count`` tool calls of assistant message ``turn``."""
        return [self.result(turn, i) for i in range(count)]

    def _replies_to(self, turn: int) -> list[Mapping[str, Any]]:
        seen, replies = -1, []
        for message in self.messages:
            if message.get("role") == "assistant":
                seen += 1
            elif seen == turn and message.get("role") == "tool":
                replies.append(message)
        return replies


# -- scenarios -----------------------------------------------------------------------------


@attrs.frozen
class Scenario:
    """A named script: which assistant message to send at each point of a conversation."""

    name: str
    description: str
    script: Callable[[Conversation], Step]
    reasoning: int = 0
    """Tokens a reasoning model spends thinking before each reply (0: not one)."""

    def __call__(self, conversation: Conversation) -> dict[str, Any]:
        """The assistant message this scenario sends next in ``conversation``."""
        return _render(self.script(conversation), conversation.turn)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _render(step: Step, turn: int) -> dict[str, Any]:
    if isinstance(step, str):
        return {"role": "assistant", "content": step}
    calls = [
        {"id": f"call_{turn}_{i}", "type": "function", "function": _function(name, args)}
        for i, (name, args) in enumerate(step)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _function(name: str, arguments: Mapping[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": _compact(dict(arguments))}


_REGISTRY: dict[str, Scenario] = {}
SCENARIOS: Final[Mapping[str, Scenario]] = MappingProxyType(_REGISTRY)
"""Every scenario by name; a request's ``model`` picks one."""

_Script: TypeAlias = Callable[[Conversation], Step]


def _scenario(name: str, description: str, reasoning: int = 0) -> Callable[[_Script], _Script]:
    def register(script: _Script) -> _Script:
        _REGISTRY[name] = Scenario(name, description, script, reasoning)
        return script

    return register


def _at(turn: int, *steps: Step) -> Step:
    """Step ``turn`` of a fixed script; past its end, the last step again."""
    return steps[min(max(turn, 0), len(steps) - 1)]


def _call(name: str, **arguments: Any) -> Call:
    return (name, arguments)


def _read(path: str) -> Call:
    return _call("read_file", path=path)


def _research(*questions: str) -> tuple[Call, ...]:
    return tuple(_call("research", question=q) for q in questions)


def _findings(results: Sequence[str]) -> str:
    items = (f"{i}) {r.strip() or '(no answer)'}" for i, r in enumerate(results, 1))
    return "Findings: " + " ".join(items)


_LIST: Final = (_call("list_files"),)
_READ_ERRORS: Final = (_read("errors.log"),)
_READ_NOTES: Final = (_read("notes.txt"),)
_QUESTIONS: Final = (
    "What does errors.log say went wrong?",
    "Which requests in access.log failed?",
    "What do the notes in notes.txt advise?",
)


@_scenario("plan", "list the files, read errors.log, then name the timeout it mentions")
def _plan(c: Conversation) -> Step:
    if c.followed_up:  # a conversation continued after the answer
        return FOLLOW_UP_ANSWER
    return _at(c.turn, _LIST, _READ_ERRORS, PLAN_ANSWER)


REASONING_TOKENS: Final = 300
"""What the ``reasoning`` scenario thinks before each step (billed as output)."""
CACHE_BLOCK: Final = 64
"""The ``reasoning`` scenario reports its cached prompt in blocks of this many tokens."""


@_scenario(
    "reasoning",
    "a reasoning model doing plan: thinks 300 tokens a step, wants max_completion_tokens, "
    "reports cached prompt tokens",
    reasoning=REASONING_TOKENS,
)
def _reasoning(c: Conversation) -> Step:
    return _plan(c)


@_scenario("runaway", "read the three files in turn, every turn, and never answer")
def _runaway(c: Conversation) -> Step:
    return _cycle(c)


@_scenario("stuck", "read notes.txt every turn and never answer (no progress)")
def _stuck(c: Conversation) -> Step:
    return _READ_NOTES


def _cycle(c: Conversation) -> Step:
    """A call every turn, never the same twice in a row: only a limit stops it."""
    names = sorted(SANDBOX_FILES)
    return (_read(names[c.turn % len(names)]),)


@_scenario("recover", "read a missing log; recover via list_files if the error says so")
def _recover(c: Conversation) -> Step:
    if c.turn == 0:
        return (_read("timeout.log"),)
    if "list_files" not in c.result(0, 0):
        return GIVE_UP_ANSWER
    return _at(c.turn - 1, _LIST, _READ_ERRORS, PLAN_ANSWER)


@_scenario("permanent", "read ../../var/secrets/payroll.db every turn, a read never allowed")
def _permanent(c: Conversation) -> Step:
    return (_read("../../var/secrets/payroll.db"),)


@_scenario("repeat", "read errors.log twice in a row, then answer as plan")
def _repeat(c: Conversation) -> Step:
    return _at(c.turn, _READ_ERRORS, _READ_ERRORS, PLAN_ANSWER)


@_scenario("destructive", "delete access.log, then report what the tool said (lies if silent)")
def _destructive(c: Conversation) -> Step:
    if c.turn < 2:
        return _at(c.turn, _LIST, (_call("delete_file", path="access.log"),))
    outcome = c.last_tool.strip()
    if not outcome or outcome.startswith("Deleted"):
        return DELETED_ANSWER
    return f"I did not delete access.log; nothing was deleted. ({outcome})"


@_scenario("slow", "scan the archive (a slow tool), then quote its result")
def _slow(c: Conversation) -> Step:
    scan = (_call("scan_archive", query="timeout", seconds=3.0),)
    return _at(c.turn, scan, f"The archive scan found: {c.result(0, 0)}")


@_scenario("survey", "list the files, read each one in turn, then name the timeout")
def _survey(c: Conversation) -> Step:
    reads = tuple((_read(name),) for name in sorted(SANDBOX_FILES))
    return _at(c.turn, _LIST, *reads, f"Read {len(reads)} files. {PLAN_ANSWER}")


@_scenario("rotate", "rotate access.log twice: read it twice, delete, write anew, delete again")
def _rotate(c: Conversation) -> Step:
    delete = (_call("delete_file", path="access.log"),)
    write = (_call("write_file", path="access.log", text=ROTATED_LOG),)
    steps = ((_read("access.log"),), (_read("access.log"),), delete, write, delete)
    if c.turn < len(steps):
        return steps[c.turn]
    outcome = c.last_tool.strip()
    if outcome.startswith("Deleted"):
        return ROTATED_ANSWER
    return f"The rotation went wrong: {outcome}"


@_scenario("research", "ask three research questions at once, then combine the answers")
def _research_parent(c: Conversation) -> Step:
    return _at(c.turn, _research(*_QUESTIONS), _findings(c.results(0, len(_QUESTIONS))))


@_scenario("research_runaway", "ask a runaway and a normal research question, then combine")
def _research_runaway(c: Conversation) -> Step:
    calls = _research("[runaway] Summarise notes.txt.", _QUESTIONS[0])
    return _at(c.turn, calls, _findings(c.results(0, len(calls))))


@_scenario("deep", "delegate to a researcher that delegates down to [depth 3]")
def _deep(c: Conversation) -> Step:
    calls = _research(f"[depth 1] {_QUESTIONS[0]}")
    return _at(c.turn, calls, f"Deep findings: {c.result(0, 0)}")


@_scenario("slow_tree", "start N slow researchers at once (children=N, default 3), combine")
def _slow_tree(c: Conversation) -> Step:
    match = re.search(r"children=(\d{1,6})", c.question)
    n = min(max(int(match[1]), 1), MAX_CHILDREN) if match else 3
    calls = _research(*(f"[slow] archive {i}" for i in range(1, n + 1)))
    return _at(c.turn, calls, _findings(c.results(0, n)))


TREE_BATCH: Final = 100
"""The ``tree`` scenario asks for at most this many children in one reply."""
MAX_TREE_CHILDREN: Final = 10_000
"""The most children one run of the ``tree`` scenario asks for."""


@_scenario(
    "extract",
    "read errors.log, then answer in the shape asked (response_format, or a final_answer tool)",
)
def _extract(c: Conversation) -> Step:
    return _extracted(c, fits=True)


@_scenario(
    "extract_invalid_once", "as extract; the first answer does not fit, the corrected one does"
)
def _extract_invalid_once(c: Conversation) -> Step:
    return _extracted(c, fits=c.corrected)


@_scenario("extract_never_valid", "as extract; no answer ever fits (prose, then a field missing)")
def _extract_never_valid(c: Conversation) -> Step:
    if c.corrected and c.turn % 2 == 0:
        return "Here is what I found: " + c.last_tool.strip()
    return _extracted(c, fits=False)


def _extracted(c: Conversation, fits: bool) -> Step:
    """Read errors.log first (if the request offers read_file), then answer from it:
    as JSON text with a response format, else by calling final_answer."""
    if not c.tool_messages and c.parameters("read_file") is not None:
        return _READ_ERRORS
    schema = c.schema or c.parameters("final_answer") or {"type": "object"}
    value = fill(schema, c.last_tool or c.question)
    value = value if fits else spoil(value, schema)
    if c.schema is None and c.parameters("final_answer") is not None:
        return (
            (
                _call("final_answer", **value)
                if isinstance(value, dict)
                else _call("final_answer", value=value)
            ),
        )
    return _compact(value)


@_scenario("tree", "a tree of any shape: [tree AxB] asks A children [tree B]; leaves answer")
def _tree(c: Conversation) -> Step:
    """``[tree 10x10x10]``: 10 ``research`` children (at most :data:`TREE_BATCH` per
    reply, one reply after another), each asked ``[tree 10x10]``, and so on; a
    question without sizes is a leaf, which answers at once, or, with ``[slow]``,
    first runs a 600 s ``scan_archive`` (a tree to cancel). Children inherit
    ``[slow]``."""
    question = c.question
    spec = re.search(r"\[tree ?([0-9x]{0,64})\]", question)
    sizes = [int(n) for n in spec[1].split("x") if n] if spec else []
    slow = "[slow]" in question
    if not sizes:
        if slow:
            scan = (_call("scan_archive", query="tree leaf", seconds=600.0),)
            return _at(c.turn, scan, f"The archive scan found: {c.result(0, 0)}")
        return "leaf: nothing to report."
    n = min(max(sizes[0], 1), MAX_TREE_CHILDREN)
    rest = "x".join(str(size) for size in sizes[1:])
    first = c.turn * TREE_BATCH
    if first >= n:
        return f"{n} children answered."
    asks = range(first, min(first + TREE_BATCH, n))
    return _research(*(f"[tree {rest}]{' [slow]' if slow else ''} part {i}" for i in asks))


@_scenario("researcher", "the child agent: [runaway], [depth N], [slow] or a short plan")
def _researcher(c: Conversation) -> Step:
    question = c.question
    if "[runaway]" in question:
        return _cycle(c)
    depth = re.search(r"\[depth (\d{1,6})\]", question)
    if depth and int(depth[1]) < MAX_DEPTH:
        return _delegate(c, int(depth[1]), (question[: depth.start()] + question[depth.end() :]))
    if "[slow]" in question:
        scan = (_call("scan_archive", query=question, seconds=3.0),)
        return _at(c.turn, scan, f"The archive scan found: {c.result(0, 0)}")
    return _look_up(c, _named_file(question))


def _delegate(c: Conversation, depth: int, rest: str) -> Step:
    calls = _research(f"[depth {depth + 1}] {rest.strip()}")
    return _at(c.turn, calls, f"depth {depth}: {c.result(0, 0)}")


def _named_file(question: str) -> str:
    named = [name for name in SANDBOX_FILES if name in question]
    return min(named, key=question.find, default="errors.log")


def _look_up(c: Conversation, name: str) -> Step:
    return _at(c.turn, _LIST, (_read(name),), _gist(name, c.result(1, 0)))


def _gist(name: str, content: str) -> str:
    """One sentence about a file, from its most telling line."""
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    if not lines:
        return f"{name} turned out to be empty."
    line = next((x for x in lines if "ERROR" in x or " 504" in x), lines[0])
    return f"{name} says: {line.split('. ')[0].rstrip('.')}."


# -- requests and replies --------------------------------------------------------------------


def reply(request: Mapping[str, Any]) -> dict[str, Any]:
    """The full ``chat.completion`` response to a decoded request body.

    Raises :class:`ScriptError` for a request the provider refuses.
    """
    req = parse(request, SCENARIOS)
    scenario = SCENARIOS[req.model]
    if scenario.reasoning:
        return _reasoned(req, scenario)
    scripted = final_answer(req.messages) if _last_call(req) else scenario(_conversation(req))
    message, finish = _clip_message(scripted, req.limit)
    prompt, completion = _prompt(req), count_completion(message)
    return _completion(
        req, message, finish, {"prompt_tokens": prompt, "completion_tokens": completion}
    )


def _conversation(req: Request) -> Conversation:
    return Conversation(req.messages, req.schema, tuple(req.tools or ()))


def _prompt(req: Request, messages: Sequence[Mapping[str, Any]] | None = None) -> int:
    """Prompt tokens: the messages, the tools and the response format, as our client counts."""
    extra = declarations(req.tools, req.response_format)
    return count_prompt(req.messages if messages is None else messages, extra)


def _last_call(req: Request) -> bool:
    """A wind-down's last call: no tools offered, a system note last, after tool
    results (the script's own turns never look like that)."""
    messages = req.messages
    if req.tools or not messages or messages[-1].get("role") != "system":
        return False
    return any(m.get("role") == "tool" for m in messages)


FINAL_FACTS = 5
"""Most tool results a final answer sums up."""


def final_answer(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answer to a last call without tools, from what the conversation holds:
    the first line of each distinct tool result (errors left out), at most
    :data:`FINAL_FACTS` of them, newest first."""
    facts: list[str] = []
    for message in reversed(messages):
        text = str(message.get("content") or "") if message.get("role") == "tool" else ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        line = lines[1] if len(lines) > 1 and lines[0].endswith(":") else (lines or [""])[0]
        if line and not line.startswith("Error") and line[:120] not in facts:
            facts.append(line[:120])
    found = "; ".join(facts[:FINAL_FACTS]) or "nothing I could use"
    return {"role": "assistant", "content": f"From what I found before my limit: {found}."}


def _completion(
    req: Request, message: dict[str, Any], finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": f"chatcmpl-{_digest(req)}",
        "object": "chat.completion",
        "created": 0,
        "model": req.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {**usage, "total_tokens": total},
    }


def _reasoned(req: Request, scenario: Scenario) -> dict[str, Any]:
    """A reasoning model's reply: it thinks first, within ``max_completion_tokens``
    (thinking that fills the cap leaves an empty answer, cut at ``length``), and
    reads the prompt it saw before (all but the last message) from its cache."""
    if req.legacy_cap:
        raise invalid(
            "unsupported_parameter",
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        )
    thinking = scenario.reasoning if req.limit is None else min(scenario.reasoning, req.limit)
    visible = None if req.limit is None else req.limit - thinking
    if visible is not None and visible < 1:
        message, finish = {"role": "assistant", "content": ""}, "length"
    else:
        message, finish = _clip_message(scenario(_conversation(req)), visible)
    prompt = _prompt(req)
    seen = _prompt(req, req.messages[:-1]) if len(req.messages) > 1 else 0
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": thinking + count_completion(message) * (message["content"] != ""),
        "prompt_tokens_details": {"cached_tokens": min(seen // CACHE_BLOCK * CACHE_BLOCK, prompt)},
        "completion_tokens_details": {"reasoning_tokens": thinking},
    }
    return _completion(req, message, finish, usage)


def _digest(req: Request) -> str:
    canonical = json.dumps(attrs.asdict(req), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()[:24]


def _clip_message(message: dict[str, Any], limit: int | None) -> tuple[dict[str, Any], str]:
    """Honour ``max_tokens``: over the limit, the text is cut and tool calls dropped."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    if limit is None or count_completion(message) <= limit:
        return message, finish
    text = message.get("content") or _calls_text(message["tool_calls"])
    return {"role": "assistant", "content": _clip(text, limit)}, "length"


def _calls_text(calls: Sequence[Mapping[str, Any]]) -> str:
    """Tool calls as JSON text: ``[{"name":...,"arguments":{...}}]``."""
    functions = (c["function"] for c in calls)
    rendered = [{"name": f["name"], "arguments": json.loads(f["arguments"])} for f in functions]
    return _compact(rendered)


def _clip(text: str, limit: int) -> str:
    """The longest prefix of ``text`` of at most ``limit`` tokens (exactly ``limit`` if it can)."""
    tokens = encoding().encode(text, disallowed_special=())
    for n in range(min(limit, len(tokens)), 0, -1):
        prefix = encoding().decode_bytes(tokens[:n]).decode("utf-8", errors="ignore")
        if count_text(prefix) <= limit:
            return prefix
    return ""


# -- the HTTP surface, as data -------------------------------------------------------------

LATENCY_HEADER: Final = "x-scripted-latency-ms"
"""Request header overriding the server's latency for one chat request, in milliseconds."""
CHUNK_HEADER: Final = "x-scripted-chunk-ms"
"""Request header setting the wait before each chunk of a streamed reply, in milliseconds."""


@attrs.frozen
class Answer:
    """An HTTP response as data: status, JSON body, extra headers, and how long to wait first."""

    status: int
    body: Mapping[str, Any]
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    stream: Streamed | None = None
    """For a request that asked ``stream: true`` and was answered 200: how to stream it."""

    @property
    def content(self) -> bytes:
        """The body, encoded as compact UTF-8 JSON."""
        return json.dumps(self.body, separators=(",", ":")).encode()

    def events(self) -> list[bytes]:
        """The server-sent events of a streamed answer (see :mod:`.stream`)."""
        from .stream import chunks

        assert self.stream is not None
        return chunks(self.body, include_usage=self.stream.include_usage)


@attrs.frozen
class Streamed:
    """How a streamed answer is sent: with a usage chunk or not."""

    include_usage: bool = False


_Handler: TypeAlias = Callable[[bytes, float, str | None], Answer]


def answer(
    method: str,
    target: str,
    body: bytes = b"",
    *,
    latency: float = 0.0,
    latency_ms: str | None = None,
) -> Answer:
    """The response to one HTTP request, as data.

    ``target`` is the request path (a query string is ignored), ``latency``
    the server's delay before chat replies and ``latency_ms`` the value of the
    :data:`LATENCY_HEADER` request header, if any.
    """
    path = target.split("?", 1)[0]
    route = _ROUTES.get(path)
    if route is None:
        return Answer(404, error_body(f"Invalid URL ({method} {path})", "unknown_url"))
    allowed, handler = route
    if method.upper() != allowed:
        body_ = error_body(f"Method {method} not allowed for {path}", "method_not_allowed")
        return Answer(405, body_, headers=(("allow", allowed),))
    return handler(body, latency, latency_ms)


def _chat(body: bytes, latency: float, latency_ms: str | None) -> Answer:
    try:
        delay = _delay(latency, latency_ms)
    except ScriptError as exc:
        return Answer(exc.status, exc.body())
    try:
        request = _decode(body)
        return Answer(200, reply(request), delay, stream=_streamed(request))
    except ScriptError as exc:
        return Answer(exc.status, exc.body(), delay)
    except RecursionError:
        return Answer(400, error_body("the request is nested too deeply", "invalid_json"), delay)


def _delay(latency: float, latency_ms: str | None) -> float:
    if latency_ms is None:
        return latency
    try:
        delay = float(latency_ms) / 1000
    except ValueError:
        delay = -1.0
    if not 0 <= delay < float("inf"):
        raise invalid("invalid_latency", f"{LATENCY_HEADER} must be a number >= 0")
    return delay


def chunk_delay(default: float, header: str | None) -> float:
    """Seconds to wait before each chunk of a streamed reply: the request's
    :data:`CHUNK_HEADER` (milliseconds) if it sent a valid one, else ``default``."""
    try:
        value = float(header) / 1000 if header is not None else default
    except ValueError:
        return default
    return value if 0 <= value <= 60 else default


def _streamed(request: Any) -> Streamed | None:
    """How to stream the answer to ``request`` (a valid chat request), if it asked to."""
    if not request.get("stream"):
        return None
    options = request.get("stream_options")
    include = isinstance(options, Mapping) and options.get("include_usage") is True
    return Streamed(include_usage=include)


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise invalid("invalid_json", f"the request body is not valid JSON: {exc}") from None


def _health(body: bytes, latency: float, latency_ms: str | None) -> Answer:
    return Answer(200, {"status": "ok"})


def _models(body: bytes, latency: float, latency_ms: str | None) -> Answer:
    data = [
        {
            "id": s.name,
            "object": "model",
            "created": 0,
            "owned_by": "orchestra-scripted",
            "description": s.description,
        }
        for s in SCENARIOS.values()
    ]
    return Answer(200, {"object": "list", "data": data})


_ROUTES: Final[Mapping[str, tuple[str, _Handler]]] = {
    "/v1/chat/completions": ("POST", _chat),
    "/chat/completions": ("POST", _chat),
    "/health": ("GET", _health),
    "/v1/models": ("GET", _models),
}
