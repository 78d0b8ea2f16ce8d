"""Fault injection for the scripted provider: scenario names with modifiers.

A request's ``model`` may add faults to its scenario:
``SCENARIO+FAULT[xN][+FAULT[xN]...][@LABEL]``, e.g. ``plan+429x3`` or
``plan+500x2+reset``. The faults:

``NNN`` (400-599)
    that HTTP status with an OpenAI-shaped error body; ``429`` adds
    ``Retry-After: 1``, and ``401``'s message echoes the request's
    ``Authorization`` header (to test that clients keep it out of logs).
``hang``
    no answer: the socket server waits until the client gives up and closes;
    the in-process transport raises ``httpx.ReadTimeout`` after the request's
    read timeout (never, without one).
``garbage``
    200 with a body that is not JSON.
``truncated``
    200 whose body stops halfway through its declared ``Content-Length``,
    then the connection closes.
``reset``
    the connection is reset (RST) without an answer.
``cutK`` (e.g. ``cut3``)
    a streamed reply stops after its first K events: the connection closes
    (a reply that is not streamed is cut like ``truncated``).
``stallK``
    a streamed reply stalls after its first K events: nothing more comes
    until the client gives up (a reply that is not streamed hangs).
``keepalive``, ``linger``, ``overlong``
    replies that do not end by themselves: SSE comments every 0.5 s for
    ever, a reply whose connection stays open after its ``data: [DONE]``,
    a stream that goes on past ``max_tokens`` for ever (see
    :mod:`~orchestra._scripted.endless`).
``nousage``
    the reply lacks its ``usage`` object. Not counted: every reply.
``promptPCT`` (e.g. ``prompt160``)
    the reply reports ``usage.prompt_tokens`` as PCT % of the o200k count
    (rounded up), as a server with another tokenizer or chat template would.
    Not counted: every reply.

Counting: a :class:`FaultCounter` belongs to one server or transport. The
``n``-th chat request (from 0) for a model name meets the fault covering ``n``
when the counted faults are laid end to end (``plan+429x2+500`` is two 429s,
a 500, then normal replies), so a client that retries gets through. Counters
are keyed by the whole model name; an ``@LABEL`` suffix only makes separate
counters (``plan+429@run7``). The scenario itself always sees the base name,
so a reply stays a pure function of the request with its faults removed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import attrs

from .endless import ENDLESS
from .scenarios import SCENARIOS, Answer, ScriptError, answer

__all__ = [
    "BROKEN",
    "KEYWORDS",
    "FaultCounter",
    "FaultSpec",
    "Modifier",
    "Prepared",
    "events_sent",
    "truncated",
]

KEYWORDS: Final = (
    "hang",
    "garbage",
    "truncated",
    "reset",
    "keepalive",
    "linger",
    "overlong",
    "nousage",
)
"""The faults named by a word; any HTTP status from 400 to 599 is one too."""
BROKEN: Final = frozenset({"hang", "truncated", "reset", "cut", "stall", *ENDLESS})
"""Faults that break the HTTP exchange itself: each side plays them its own way."""
GARBAGE: Final = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
CHAT_PATHS: Final = frozenset({"/v1/chat/completions", "/chat/completions"})

_MODIFIER = re.compile(r"(?P<name>[a-z]+|\d{3})(?:x(?P<count>\d{1,9}))?")


@attrs.frozen
class Modifier:
    """One fault of a model name: what it is and how many requests meet it."""

    name: str
    count: int = 1
    after: int = 0
    """For ``cut`` and ``stall``: how many events of a streamed reply get through."""

    @property
    def status(self) -> int | None:
        """The HTTP status this fault answers with, if it is one."""
        return int(self.name) if self.name.isdigit() else None

    def __str__(self) -> str:
        name = f"{self.name}{self.after}" if self.name in _STREAM_FAULTS else self.name
        return name if self.count == 1 else f"{name}x{self.count}"


def _unknown(model: str, part: str, why: str) -> ScriptError:
    known = ", ".join(("NNN (an HTTP status 400-599)", *KEYWORDS, "promptPCT", "cutK", "stallK"))
    message = f"bad fault modifier {part!r} in model {model!r}: {why} (known: {known}; xN repeats)"
    return ScriptError(404, "model_not_found", message)


_PROMPT = re.compile(r"prompt(?P<percent>\d{1,4})")
_STREAM_FAULTS: Final = ("cut", "stall")
_STREAM = re.compile(r"(?P<name>cut|stall)(?P<after>\d{1,4})(?:x(?P<count>\d{1,9}))?")
UNCOUNTED: Final = frozenset({"nousage", "prompt"})
"""Modifiers that shape every reply instead of failing some requests."""


def _modifier(model: str, part: str) -> Modifier:
    if (scaled := _PROMPT.fullmatch(part)) is not None:
        return Modifier("prompt", int(scaled["percent"]))
    if (streamed := _STREAM.fullmatch(part)) is not None:
        count = int(streamed["count"] or 1)
        if count < 1:
            raise _unknown(model, part, "the count must be >= 1")
        return Modifier(streamed["name"], count, int(streamed["after"]))
    match = _MODIFIER.fullmatch(part)
    if match is None:
        raise _unknown(model, part, "not FAULT or FAULTxN")
    name, count = match["name"], int(match["count"] or 1)
    if name.isdigit() and not 400 <= int(name) <= 599:
        raise _unknown(model, part, "a status must be from 400 to 599")
    if not name.isdigit() and name not in KEYWORDS:
        raise _unknown(model, part, "no such fault")
    if count < 1 or (name == "nousage" and match["count"]):
        raise _unknown(model, part, "the count must be >= 1 (nousage takes none)")
    return Modifier(name, count)


@attrs.frozen
class FaultSpec:
    """A model name taken apart: base scenario, faults in order, and label."""

    model: str
    base: str
    modifiers: tuple[Modifier, ...] = ()
    label: str = ""

    @classmethod
    def parse(cls, model: str) -> FaultSpec:
        """The spec of ``model``.

        Raises:
            ScriptError: (404 ``model_not_found``) a modifier is malformed or unknown.
        """
        name, _, label = model.partition("@")
        base, *parts = name.split("+")
        if not base:
            raise ScriptError(404, "model_not_found", f"no scenario before the + in {model!r}")
        return cls(model, base, tuple(_modifier(model, p) for p in parts), label)

    @property
    def usage(self) -> bool:
        """Whether replies carry ``usage`` (False with ``nousage``)."""
        return all(m.name != "nousage" for m in self.modifiers)

    @property
    def prompt_percent(self) -> int:
        """The share of our prompt count the replies report (``promptPCT``), in %."""
        return next((m.count for m in self.modifiers if m.name == "prompt"), 100)

    def fault(self, n: int) -> Modifier | None:
        """The fault the ``n``-th request (from 0) for this model meets, if any."""
        for modifier in self.modifiers:
            if modifier.name in UNCOUNTED:
                continue
            if n < modifier.count:
                return modifier
            n -= modifier.count
        return None


class FaultCounter:
    """How many chat requests each model name has had: one per server or transport.

    With ``enabled=False`` (the outage is over) modifiers are only stripped:
    every request is answered by its base scenario, with usage.
    """

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requests: dict[str, int] = {}

    def prepare(self, method: str, target: str, body: bytes) -> Prepared:
        """Count a request and decide what it meets; not a checkpoint."""
        request = _chat_request(method, target, body)
        if request is None:
            return Prepared(body=body)
        try:
            spec = _known(FaultSpec.parse(request["model"]))
        except ScriptError as exc:
            return Prepared(body=body, error=exc)
        return Prepared(
            body=json.dumps({**request, "model": spec.base}).encode(),
            fault=self._take(spec),
            usage=spec.usage or not self.enabled,
            prompt_percent=spec.prompt_percent if self.enabled else 100,
        )

    def _take(self, spec: FaultSpec) -> Modifier | None:
        if not self.enabled:
            return None
        n = self.requests.get(spec.model, 0)
        self.requests[spec.model] = n + 1
        return spec.fault(n)


def _known(spec: FaultSpec) -> FaultSpec:
    if spec.base not in SCENARIOS:
        raise ScriptError(404, "model_not_found", f"The model `{spec.base}` does not exist.")
    return spec


def _chat_request(method: str, target: str, body: bytes) -> dict[str, Any] | None:
    """The decoded chat request if its model carries modifiers, else None."""
    if method.upper() != "POST" or target.split("?", 1)[0] not in CHAT_PATHS:
        return None
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None  # answer() explains what is wrong with it
    if not isinstance(request, dict) or not isinstance(request.get("model"), str):
        return None
    return request if any(c in request["model"] for c in "+@") else None


@attrs.frozen(kw_only=True)
class Prepared:
    """A chat request after fault counting: the body to answer and the fault it meets."""

    body: bytes
    fault: Modifier | None = None
    usage: bool = True
    prompt_percent: int = 100
    error: ScriptError | None = None

    @property
    def broken(self) -> str | None:
        """The fault that breaks the exchange (``hang``, ``truncated``, ``reset``,
        ``cut``, ``stall``, ``keepalive``, ``linger``, ``overlong``), if any."""
        return self.fault.name if self.fault and self.fault.name in BROKEN else None

    @property
    def events_before_break(self) -> int:
        """How many events of a streamed reply a ``cut`` or ``stall`` lets through."""
        return self.fault.after if self.fault else 0

    def respond(
        self, method: str, target: str, *, latency: float, latency_ms: str | None, auth: str
    ) -> Answer:
        """The answer as data (for a broken fault: the one it breaks). Not a checkpoint."""
        if self.error is not None:
            return Answer(self.error.status, self.error.body())
        status = self.fault.status if self.fault else None
        if status is not None:
            return status_answer(status, auth)
        result = answer(method, target, self.body, latency=latency, latency_ms=latency_ms)
        if self.fault and self.fault.name == "garbage" and result.status == 200:
            return RawAnswer(200, {}, result.delay, raw=GARBAGE)
        if not self.usage:
            return _without_usage(result)
        return _scaled(result, self.prompt_percent) if self.prompt_percent != 100 else result


@attrs.frozen
class RawAnswer(Answer):
    """An answer whose body is sent as these bytes, JSON or not."""

    raw: bytes = b""

    @property
    def content(self) -> bytes:
        return self.raw


def _scaled(result: Answer, percent: int) -> Answer:
    usage = result.body.get("usage")
    if result.status != 200 or not isinstance(usage, dict):
        return result
    prompt = -(-usage["prompt_tokens"] * percent // 100)
    scaled = {**usage, "prompt_tokens": prompt, "total_tokens": prompt + usage["completion_tokens"]}
    return attrs.evolve(result, body={**result.body, "usage": scaled})


def _without_usage(result: Answer) -> Answer:
    body = {k: v for k, v in result.body.items() if k != "usage"}
    return attrs.evolve(result, body=body)


def status_answer(status: int, auth: str) -> Answer:
    """The error answer of a status fault (``auth``: the request's Authorization header)."""
    if status == 401:
        message = f"Incorrect API key provided: {auth or '(none)'}."
        return Answer(401, _error(message, "invalid_request_error", "invalid_api_key"))
    if status == 429:
        body = _error("Rate limit reached (scripted fault).", "requests", "rate_limit_exceeded")
        return Answer(429, body, headers=(("retry-after", "1"),))
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return Answer(status, _error(f"scripted fault: HTTP {status}", kind, f"fault_{status}"))


def _error(message: str, kind: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def events_sent(prepared: Prepared, events: int) -> int:
    """How many of a streamed answer's ``events`` get through ``prepared``'s fault:
    ``cutK``/``stallK`` K of them, ``truncated`` half, otherwise all."""
    if prepared.broken in ("cut", "stall"):
        return min(prepared.events_before_break, events)
    return events // 2 if prepared.broken == "truncated" else events


def truncated(content: bytes) -> bytes:
    """The part of ``content`` a ``truncated`` fault sends: its first half."""
    return content[: len(content) // 2]
