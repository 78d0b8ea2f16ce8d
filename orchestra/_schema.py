"""JSON schemas of Python types: one derivation for tool parameters and outputs;
the schema of a pydantic model, taken from pydantic (:func:`model_schema`); and
one check of a schema given (:func:`check_schema`), when a tool or an agent is
built rather than when a run first uses it.

pydantic is not a dependency: it is looked for in ``sys.modules`` (a class
can only be a pydantic model once pydantic is imported), never imported here.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import attrs

from ._exceptions import ConfigError
from ._storable import problem

__all__ = ["check_schema", "is_pydantic_model", "model_schema", "schema_of"]

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
    enums, lists, tuples, dicts with str keys, unions, attrs classes, dataclasses,
    TypedDicts.

    Raises:
        ConfigError: a type with no JSON form (or a class that contains itself).
    """
    return _schema(tp, ())


def _schema(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if _has_fields(tp):
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


def _has_fields(tp: Any) -> bool:
    """Whether ``tp`` is a class whose schema lists its typed fields."""
    return isinstance(tp, type) and (
        attrs.has(tp) or dataclasses.is_dataclass(tp) or is_typeddict(tp)
    )


def _object(cls: type, seen: tuple[type, ...]) -> dict[str, Any]:
    """The schema of an attrs class, a dataclass or a TypedDict: its fields, in order."""
    names, types_, required = _fields(cls)
    properties = {n: _schema(t, seen) for n, t in zip(names, types_, strict=True)}
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    schema["additionalProperties"] = False
    return schema


_Fields = tuple[list[str], list[Any], list[str]]
"""A class's field names (as its ``__init__`` takes them), their types, the required ones."""


def _fields(cls: type) -> _Fields:
    hints = _hints(cls)
    if attrs.has(cls):
        fields = [f for f in attrs.fields(cls) if f.init]
        names = [f.alias or f.name for f in fields]
        required = [n for n, f in zip(names, fields, strict=True) if f.default is attrs.NOTHING]
        return names, [hints.get(f.name, f.type) for f in fields], required
    if dataclasses.is_dataclass(cls):
        return _dataclass_fields(cls, hints)
    names = list(hints)
    required = [n for n in names if n in typing.cast(Any, cls).__required_keys__]
    return names, list(hints.values()), required


def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s field annotations, evaluated.

    Raises:
        ConfigError: one names what is not defined where ``cls`` is (a class
            defined in a function, referring to itself).
    """
    try:
        return get_type_hints(cls)
    except NameError as exc:
        raise ConfigError(
            f"cannot derive a JSON schema: the annotations of {cls.__name__} do not resolve: {exc}"
        ) from None


def _dataclass_fields(cls: type, hints: Mapping[str, Any]) -> _Fields:
    """A dataclass's ``__init__`` fields; required: those with no default nor factory."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    missing = dataclasses.MISSING
    required = [f.name for f in fields if f.default is missing and f.default_factory is missing]
    return names, [hints.get(n, f.type) for n, f in zip(names, fields, strict=True)], required


# -- pydantic models ----------------------------------------------------------------


def is_pydantic_model(tp: object) -> bool:
    """Whether ``tp`` is a pydantic (v2) model class; pydantic is not imported for it."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


def model_schema(cls: type) -> dict[str, Any]:
    """The JSON schema of a pydantic model (``model_json_schema()``), closed as the
    schemas of other classes are: an object that does not say whether it admits
    other properties admits none. A root that is only a ``$ref`` (a recursive
    model) is replaced by the definition it names, its ``$defs`` kept for the refs.

    Raises:
        ConfigError: pydantic cannot express the model as a JSON schema (a field
            that holds a callable, an arbitrary class).
    """
    pydantic = sys.modules["pydantic"]
    try:
        schema = typing.cast(Any, cls).model_json_schema()
    except pydantic.PydanticUserError as exc:
        said = str(exc).strip().splitlines()[0]
        raise ConfigError(
            f"output_type: pydantic model {cls.__name__} has no JSON schema: {said}"
        ) from None
    closed: dict[str, Any] = _closed(_rooted(schema))
    return closed


def _rooted(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a root ``{"$ref": "#/$defs/X", "$defs": ...}`` made X itself."""
    ref, defs = schema.get("$ref"), schema.get("$defs", {})
    name = ref.removeprefix("#/$defs/") if isinstance(ref, str) else None
    if name is None or name not in defs or "type" in schema:
        return schema
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    return {**defs[name], **rest}


_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUBSCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def _closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on each object schema in it
    that does not set it (a model that allows extras says ``true``: kept)."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMAS:
        if key in out:
            out[key] = _closed(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_closed(item) for item in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _closed(item) for name, item in out[key].items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


_ROOT = "urn:orchestra:schema"
"""The base URI of a schema that declares no ``$id``."""

_PASSED: dict[str, None] = {}
"""The schemas that passed :func:`check_schema` (by ``repr``: a tuple is not a list
to the validator, nor 1.0 a 1, and ``repr`` tells them apart): the check depends
on a schema's content alone (nothing is fetched), and a worker builds its agents
again for every step it takes, so each schema is checked once per process."""

PASSED_KEPT = 1024
"""The most schemas :data:`_PASSED` remembers (then it starts again)."""


def check_schema(schema: Mapping[str, Any], what: str) -> None:
    """Refuse a schema no run could use: one that is not JSON (a Python set inside
    it), not a valid JSON schema, or with a ``$ref`` that cannot be resolved (a
    missing ``$defs`` entry, a remote document: nothing is fetched). A schema
    that passed once passes at once.

    Raises:
        ConfigError: one line naming ``what`` (``output_type``, ``tool x``) and why.
    """
    found = problem(schema)
    if found is not None:
        raise ConfigError(f"{what}: the schema is not JSON: {found}")
    key = repr(schema)
    if key in _PASSED:
        return
    _check_json_schema(schema, what)
    if len(_PASSED) >= PASSED_KEPT:
        _PASSED.clear()
    _PASSED[key] = None


def _check_json_schema(schema: Mapping[str, Any], what: str) -> None:
    """:func:`check_schema` of a schema that is JSON."""
    import jsonschema  # on first use: the command line starts without it

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
