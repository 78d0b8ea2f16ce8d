"""Secrets out of what Orchestra writes: reasons, errors, events, spans, saved state.

Two layers. The provider that holds an API key redacts it, and anything shaped
like a credential, from every error text it raises, at the boundary, so a
server that echoes the ``Authorization`` header back (in a 401 body, a 500
page) leaks nothing into a run. And the places that write text out (event
data, saved reasons and errors, span attributes, CLI lines, tool error texts)
pass it through :func:`redact` again, which knows every secret registered in
this process (:func:`register`; ``OpenAIProvider`` registers its key) and
these shapes:

* ``Authorization: ...``, ``x-api-key: ...``, ``api_key=...`` as a header, a
  JSON or Python mapping entry, or a query parameter (the name and any
  ``Bearer``/``Basic`` scheme are kept);
* ``Bearer <token>`` anywhere (a token of 8 or more characters with a digit
  or symbol, so "Bearer authentication" is left alone);
* API key shapes: ``sk-...`` (OpenAI, Anthropic...), ``gsk_``, ``xai-``,
  ``hf_``, ``ghp_``, ``github_pat_``, ``AIza``;
* the password of a URL (``https://user:[REDACTED]@host``).

Each becomes ``[REDACTED]``. Strings only; secrets are found by plain
substring search and each precompiled pattern runs only over text holding a
word it needs, so text without any costs a few substring tests. Redacting
twice changes nothing more. Registered secrets shorter than
:data:`MIN_SECRET` characters are ignored (``api_key="k"`` for a local server
is no secret, and replacing every "k" would garble every text).
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

__all__ = ["MIN_SECRET", "REDACTED", "excerpt", "redact", "redact_data", "register"]

REDACTED = "[REDACTED]"
MIN_SECRET = 8
"""The shortest string :func:`register` and :func:`redact` treat as a secret."""

_HEADER = re.compile(
    r"(?i:\b((?:proxy-)?authorization|x-api-key|x-goog-api-key|api[-_]?key|access[-_]?token)"
    r"""(["']?\s*[:=]\s*["']?(?:(?:bearer|basic|token)\s+)?+))"""
    r"""[^\s"'&,;{}\[\]]+"""
)
_BEARER = re.compile(r"(?i:\b(bearer\s+))(?=[A-Za-z]*[0-9._~+/=\-])[A-Za-z0-9._~+/=\-]{8,}")
_KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{6,}|\b(?:gsk_|xai-|hf_|ghp_|github_pat_|AIza)[A-Za-z0-9_\-]{16,}"
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+(?=@)")

_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (
        ("authorization", "api-key", "api_key", "apikey", "access-token", "access_token"),
        _HEADER,
    ),
    (("bearer",), _BEARER),
    (("sk-", "gsk_", "xai-", "hf_", "ghp_", "github_pat_", "aiza"), _KEY_SHAPES),
    (("://",), _URL_PASSWORD),
)
"""Each pattern, and the lowercase words without which it cannot match: a
pattern runs only over text that has one (most text has none)."""
_ANY_WORD = re.compile("|".join(re.escape(w) for words, _ in _RULES for w in words))
"""One quick test for all the words, before the patterns (a few µs for short text)."""

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()


def register(secret: str) -> None:
    """Redact ``secret`` from everything this process writes from now on.

    Thread-safe; registering the same secret again (or one shorter than
    :data:`MIN_SECRET`) does nothing.
    """
    global _secrets
    secret = secret.strip()
    if len(secret) < MIN_SECRET or secret in _secrets:
        return
    with _lock:  # longest first, so a secret containing another goes whole
        _secrets = tuple(sorted({*_secrets, secret}, key=len, reverse=True))
        _redact_short.cache_clear()


def _replace(match: re.Match[str]) -> str:
    """``[REDACTED]``, after the part of the match worth keeping (a header's name)."""
    kept = "".join(g for g in match.groups() if g)
    return kept + REDACTED


_CACHED_UP_TO = 256
"""Short texts (statuses, reasons, names: most of an event's strings) are
redacted once and remembered until the next :func:`register`."""


def redact(text: str, *secrets: str) -> str:
    """``text`` without registered secrets, extra ``secrets`` or credential shapes."""
    if not secrets and len(text) <= _CACHED_UP_TO:
        return _redact_short(text)
    return _redact(text, secrets)


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str) -> str:
    return _redact(text, ())


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in (*secrets, *_secrets):
        if len(secret) >= MIN_SECRET and secret in text:
            text = text.replace(secret, REDACTED)
    lowered = text.lower()
    if _ANY_WORD.search(lowered) is None:
        return text
    for words, pattern in _RULES:
        if any(word in lowered for word in words):
            text = pattern.sub(_replace, text)
    return text


def excerpt(text: str, limit: int = 300, *secrets: str) -> str:
    """The redacted start of ``text``, at most ``limit`` characters.

    Redacted before it is cut, so a secret cut in two cannot slip through.
    """
    return redact(text[: limit * 8], *secrets)[:limit]


_PLAIN = frozenset({int, float, bool, type(None)})
"""Types that hold no text: passed through without a call."""


def redact_data(value: Any) -> Any:
    """``value`` with every string inside it redacted (dicts, lists and tuples walked)."""
    if type(value) is dict:  # an event's data: walked without a call per number
        out = {}
        for key, item in value.items():
            kind = type(item)
            plain = kind in _PLAIN
            out[key] = item if plain else redact(item) if kind is str else redact_data(item)
        return out
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(v if type(v) in _PLAIN else redact_data(v) for v in value)
    return value
