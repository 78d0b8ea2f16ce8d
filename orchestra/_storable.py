"""What can be kept: the limits on values that come from outside a run.

A run keeps what a model, a server or a tool sends it (replies, tool
arguments, structured answers, tool results) in its saved state and events,
as JSON (orjson). Not every value Python holds can be kept so, and a value
from outside is checked here, once, where it enters:

- **text** must be valid Unicode: a *lone surrogate* (``"\\ud83d"`` written
  in a JSON string without its pair, or a file name decoded with
  ``surrogateescape``) is not. In prose (a reply's text, a tool's result) it
  becomes U+FFFD, as any UTF-8 decoder does with a broken character
  (:func:`valid_text`; a reply body or stream chunk orjson refuses for it is
  read by ``json``: :func:`loads`); in a value the model must give exactly
  (tool arguments, a structured answer) the value is refused (:func:`decoded`).
- **integers** from ``-2**63`` to ``2**64 - 1`` (orjson's range), and
  **numbers** that are finite (``NaN``, ``Infinity`` and ``1e400`` are refused).
- **nesting** of arrays and objects at most :data:`MAX_DEPTH` levels deep,
  checked by a linear scan before anything recursive reads it.
- **size**: a JSON document (tool arguments, a structured answer) at most
  :data:`MAX_JSON_BYTES` of UTF-8.

A refused value is the model's error to correct (a tool result or a
correction in words, naming the place and the rule: :class:`NotStorable`'s
message); a reply that cannot be kept at all is a :class:`ProviderReplyError`
(see :func:`storable_message`).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import orjson

__all__ = [
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_JSON_BYTES",
    "MIN_INT",
    "NotStorable",
    "cleaned",
    "decoded",
    "json_depth",
    "loads",
    "problem",
    "storable_message",
    "too_deep",
    "valid_text",
]

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a value from outside may have."""
MAX_JSON_BYTES = 1_000_000
"""The largest JSON document (UTF-8 bytes) a tool call's arguments or an answer may be."""
MIN_INT = -(2**63)
"""The smallest integer a saved value may hold (orjson's limit)."""
MAX_INT = 2**64 - 1
"""The largest integer a saved value may hold (orjson's limit)."""

_LONE = re.compile("[\ud800-\udfff]")
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class NotStorable(ValueError):
    """A value from outside that cannot be kept; the message says where and why,
    in words a model can act on (``at $.path: ...``)."""


def valid_text(text: str) -> str:
    """``text`` with surrogate pairs joined into their character (two code points
    ``\\ud83d`` ``\\ude00`` side by side make one emoji) and every lone
    surrogate replaced by U+FFFD; ``text`` itself when it has none (checked at
    C speed)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def loads(data: str | bytes) -> Any:
    """JSON ``data`` as orjson reads it; when its strings hold a lone surrogate
    escape (which orjson refuses), as ``json`` reads it, with each lone
    surrogate made U+FFFD (:func:`cleaned`).

    Raises:
        ValueError: ``data`` is not JSON, or (read by ``json``) is nested too
            deeply (orjson's own limit raises ``orjson.JSONDecodeError``).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in str(exc):
            raise
    try:
        return cleaned(json.loads(data))
    except RecursionError:
        raise ValueError("nested too deeply to decode") from None


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON ``text`` (brackets in strings ignored).

    A linear scan without recursion, so any input is safe to measure.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def decoded(text: str, subject: str = "it is") -> Any:
    """JSON ``text`` as a value that can be kept (see the module docstring);
    ``subject`` begins the refusals of the text as a whole (``arguments are``).

    Raises:
        NotStorable: ``text`` is too large, too deep, not JSON, or holds a lone
            surrogate, an integer out of range or a number that is not finite.
    """
    if len(text) > MAX_JSON_BYTES or _utf8_size(text) > MAX_JSON_BYTES:
        raise NotStorable(f"{subject} too large (more than {MAX_JSON_BYTES:,} bytes)")
    if text.count("[") + text.count("{") > MAX_DEPTH and json_depth(text) > MAX_DEPTH:
        raise too_deep(subject)
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except NotStorable:
        raise
    except json.JSONDecodeError as exc:
        raise NotStorable(f"{subject} not valid JSON ({exc.msg})") from None
    except ValueError:  # Python's own limit on the digits of an integer
        raise NotStorable(f"{subject} holding a number with too many digits") from None
    except RecursionError:
        raise too_deep(subject) from None
    found = problem(value)
    if found is not None:
        raise NotStorable(found)
    return value


def too_deep(subject: str = "it is") -> NotStorable:
    """The refusal of a value nested past :data:`MAX_DEPTH`."""
    return NotStorable(
        f"{subject} nested too deeply (at most {MAX_DEPTH} levels of arrays and objects)"
    )


def _no_constant(name: str) -> Any:
    raise NotStorable(f"{name} is not a JSON number")


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def problem(value: Any) -> str | None:
    """Why ``value`` cannot be kept as JSON (``at $.a[0]: ...``), or None if it can.

    Walks ``value`` without recursion; dicts need string keys, and only
    dicts, lists, tuples, strings, numbers, booleans and None are JSON.
    """
    for path, item, depth in _walk(value):
        found = _item_problem(item, depth)
        if found is not None:
            return f"at ${_short(path)}: {found}"
    return None


def _short(path: str, limit: int = 120) -> str:
    return path if len(path) <= limit else f"{path[: limit - 3]}..."


def _walk(value: Any) -> Iterator[tuple[str, Any, int]]:
    """``(path, item, depth)`` for ``value`` and everything inside it, depth first
    (containers nested past :data:`MAX_DEPTH` are not entered)."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        yield path, item, depth
        if depth >= MAX_DEPTH:
            continue
        if isinstance(item, dict):
            stack.extend((f"{path}.{k}", v, depth + 1) for k, v in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in reversed(list(enumerate(item))))


def _item_problem(item: Any, depth: int) -> str | None:
    """What is wrong with one item itself (its contents are walked apart)."""
    if isinstance(item, str):
        return _text_problem(item)
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int):
        return None if MIN_INT <= item <= MAX_INT else _int_problem(item)
    if isinstance(item, float):
        return None if math.isfinite(item) else f"{item} is not a JSON number"
    if isinstance(item, dict | list | tuple):
        return _container_problem(item, depth)
    return f"a {type(item).__name__} is not a JSON value"


def _container_problem(
    item: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int
) -> str | None:
    if depth >= MAX_DEPTH:
        return str(too_deep("it is")).removeprefix("it is ")
    if not isinstance(item, dict):
        return None
    for key in item:
        found = _text_problem(key) if isinstance(key, str) else f"the key {key!r} is not a string"
        if found is not None:
            return found
    return None


def _text_problem(text: str) -> str | None:
    if valid_text(text) is text:
        return None
    lone = _LONE.search(text)
    code = f"\\u{ord(lone.group()):04x}" if lone else "?"
    return (
        f"the text holds a lone surrogate ({code}, half of a UTF-16 pair), "
        "which is not valid Unicode: write the character itself"
    )


def _int_problem(value: int) -> str:
    digits = len(str(abs(value))) if abs(value) < 10**4000 else "over 4,000"
    return f"the integer ({digits} digits) is outside what can be kept ({MIN_INT:,} to {MAX_INT:,})"


def storable_message(message: dict[str, Any]) -> dict[str, Any]:
    """A model's message as it can be kept: lone surrogates in its strings replaced
    (U+FFFD); ``message`` itself when it needed nothing.

    Raises:
        NotStorable: something else in it cannot be kept (see :func:`problem`).
    """
    found = problem(message)
    if found is None:
        return message
    fixed = cleaned(message)
    found = problem(fixed)
    if found is not None:
        raise NotStorable(found)
    return dict(fixed)


def cleaned(value: Any, depth: int = 0) -> Any:
    """``value`` with lone surrogates replaced in every string (nesting is checked
    by :func:`problem` after: this stops at :data:`MAX_DEPTH`)."""
    if isinstance(value, str):
        return valid_text(value)
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {
            valid_text(k) if isinstance(k, str) else k: cleaned(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [cleaned(v, depth + 1) for v in value]
    return value
