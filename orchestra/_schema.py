"""JSON schemas of Python types: one derivation for tool parameters and outputs."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import attrs

from ._exceptions import ConfigError

__all__ = ["schema_of"]

_SIMPLE: Mapping[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    list: {"type": "array"},
    dict: {"type": "object"},
    Any: {},
}


def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON schema of a Python type: str, int, float, bool, None, Literal,
    enums, lists, tuples, dicts with str keys, unions, attrs classes, TypedDicts.

    Raises:
        ConfigError: a type with no JSON form (or a class that contains itself).
    """
    return _schema(tp, ())


def _schema(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if isinstance(tp, type) and (attrs.has(tp) or is_typeddict(tp)):
        if tp in seen:
            raise ConfigError(f"cannot derive a JSON schema for {tp.__name__}: it contains itself")
        return _object(tp, (*seen, tp))
    return _generic(tp, seen)


def _generic(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema(arg, seen) for arg in args]}
    if origin in (list, set, frozenset, Sequence) and len(args) == 1:
        return {"type": "array", "items": _schema(args[0], seen)}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _schema(args[0], seen)}
    if origin is tuple and args:
        items = [_schema(arg, seen) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(args), "maxItems": len(args)}
    if origin in (dict, Mapping) and len(args) == 2 and args[0] is str:
        values = _schema(args[1], seen)
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    raise ConfigError(f"cannot derive a JSON schema for annotation {tp!r}")


def _object(cls: type, seen: tuple[type, ...]) -> dict[str, Any]:
    """The schema of an attrs class or a TypedDict: its fields, in order."""
    hints = get_type_hints(cls)
    if attrs.has(cls):
        fields = [f for f in attrs.fields(cls) if f.init]
        names = [f.alias or f.name for f in fields]
        types_ = [hints.get(f.name, f.type) for f in fields]
        required = [n for n, f in zip(names, fields, strict=True) if f.default is attrs.NOTHING]
    else:
        names, types_ = list(hints), list(hints.values())
        required = [n for n in names if n in typing.cast(Any, cls).__required_keys__]
    properties = {n: _schema(t, seen) for n, t in zip(names, types_, strict=True)}
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    schema["additionalProperties"] = False
    return schema
