"""Values that fit (or, on purpose, do not fit) a JSON schema, taken from a text.

The ``extract`` scenarios answer in the shape a request asks for: each string
is the text's most telling line (the first that says ``ERROR``, else its
first), each number the next one the line states (parts of timestamps left
out), each array one item, each choice its first. A pure function of the
schema and the text, as every scripted reply is of its request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["fill", "spoil", "telling_line"]

_NUMBER = re.compile(r"(?<![\w:.-])(\d+(?:\.\d+)?)(?![\w:.-])")
"""A number standing alone (not part of a timestamp, an id or a word)."""


def telling_line(text: str) -> str:
    """The line of ``text`` an answer quotes: the first with ``ERROR``, else the first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "ERROR" in line), lines[0] if lines else "")


def fill(schema: Mapping[str, Any], text: str) -> Any:
    """A value that fits ``schema``, from ``text``."""
    line = telling_line(text)
    return _fill(schema, line, iter([float(n) for n in _NUMBER.findall(line)]))


def _fill(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        chosen = next((o for o in options if o.get("type") != "null"), options[0])
        return _fill(chosen, line, numbers)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _FILLERS.get(kind, _string)(schema, line, numbers)


def _object(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    properties = schema.get("properties", {})
    return {name: _fill(sub, line, numbers) for name, sub in properties.items()}


def _array(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    items = schema.get("items", {"type": "string"})
    return [_fill(items, line, numbers) for _ in range(max(1, schema.get("minItems", 1)))]


def _string(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    longest = schema.get("maxLength")
    return line if longest is None else line[:longest]


def _number(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    value = next(numbers, 0.0)
    low, high = schema.get("minimum", value), schema.get("maximum", value)
    value = min(max(value, low), high)
    return int(value) if schema.get("type") == "integer" else value


def _true(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    return True


def _null(schema: Mapping[str, Any], line: str, numbers: Iterator[float]) -> Any:
    return None


_FILLERS: dict[str, Callable[[Mapping[str, Any], str, Iterator[float]], Any]] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _number,
    "number": _number,
    "boolean": _true,
    "null": _null,
}


def spoil(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` made not to fit ``schema``: an object without its first required
    property, or a value of the wrong type."""
    required = schema.get("required") or ()
    if isinstance(value, dict) and required:
        return {k: v for k, v in value.items() if k != required[0]}
    return 0 if schema.get("type") == "string" else f"not {value!r}"
