"""JSON schemas of Python types: one derivation for tool parameters and outputs;
and one check of a schema given (:func:`check_schema`), when a tool or an agent
is built rather than when a run first uses it."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import attrs

from ._exceptions import ConfigError
from ._storable import problem

__all__ = ["check_schema", "schema_of"]

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


_ROOT = "urn:orchestra:schema"
"""The base URI of a schema that declares no ``$id``."""


def check_schema(schema: Mapping[str, Any], what: str) -> None:
    """Refuse a schema no run could use: one that is not JSON (a Python set inside
    it), not a valid JSON schema, or with a ``$ref`` that cannot be resolved (a
    missing ``$defs`` entry, a remote document: nothing is fetched).

    Raises:
        ConfigError: one line naming ``what`` (``output_type``, ``tool x``) and why.
    """
    import jsonschema  # on first use: the command line starts without it

    found = problem(schema)
    if found is not None:
        raise ConfigError(f"{what}: the schema is not JSON: {found}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{what}: not a valid JSON schema: {exc.message}") from None
    ref = _unresolved_ref(schema)
    if ref is not None:
        raise ConfigError(f"{what}: the schema's $ref {ref!r} cannot be resolved")


def _unresolved_ref(schema: Mapping[str, Any]) -> str | None:
    """The first ``$ref`` of ``schema`` that does not resolve from its root, if any
    (refs under a nested ``$id``, which moves their base, are left to the validator)."""
    refs = _refs(schema)
    if not refs:
        return None
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]
    from referencing import Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    base = resource.id() or _ROOT
    resolver = REGISTRY.with_resource(base, resource).resolver(base_uri=base)
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return ref
    return None


def _refs(schema: Any) -> list[str]:
    """Every ``$ref`` string in ``schema``, outside subschemas with an ``$id`` of
    their own (the schema is JSON, at most 64 levels deep: see :func:`check_schema`)."""
    found: list[str] = []
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get("$ref"), str):
                found.append(item["$ref"])
            stack.extend(
                v
                for k, v in item.items()
                if isinstance(v, Mapping | list) and not (isinstance(v, Mapping) and "$id" in v)
            )
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, Mapping | list))
    return found
