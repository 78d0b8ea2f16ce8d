"""Structured output: a run's answer in a declared shape.

``Agent(output_type=...)`` takes a JSON schema (a mapping), an attrs class, a
dataclass, a TypedDict or a pydantic (v2) model. From an attrs class, a
dataclass or a TypedDict the schema is derived from its typed fields
(:func:`schema_of`); a pydantic model's is its ``model_json_schema()``, its
objects closed to other properties unless the model allows extras
(:func:`model_schema`; nested models stay as ``$defs`` and ``$ref``). pydantic
is not a dependency: it is never imported here, only recognised once the user
has. The shape reaches the model one of two ways (``Agent(output_via=...)``):

- ``"response_format"`` (the default): each request carries
  ``response_format: {"type": "json_schema", ...}`` (``strict`` when the
  schema allows it: every property required, no others). Servers that
  support it (OpenAI, llama.cpp) make the reply fit; the answer is the
  reply's text.
- ``"tool"``: for endpoints without ``response_format``, a tool
  (:data:`OUTPUT_TOOL`) whose parameters are the schema; the run answers by
  calling it, and its arguments are checked as any call's.

Either way the answer is parsed and validated (jsonschema), then built into
the class given (cattrs for attrs classes and dataclasses, ``model_validate``
for a pydantic model), whose validators may refuse it still; one that does
not fit goes back to the model as a user message saying what is wrong (at
which field), for it to fix within the run's limits, at most
``Agent.output_retries`` times before the run fails. The value is kept in
``RunState.output`` (plain JSON); ``RunResult.output`` holds it built into
the class given, if one was (for a schema or a TypedDict: the JSON value).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast, is_typeddict

import attrs
import cattrs

from ._exceptions import ConfigError
from ._schema import check_schema, is_pydantic_model, model_schema, schema_of
from ._storable import NotStorable, decoded
from ._tools import Tool, ToolInputError

if TYPE_CHECKING:
    import jsonschema
    from typing_extensions import TypeVar

    OutputT = TypeVar("OutputT", default=Any)
else:  # typing's TypeVar takes a default from Python 3.13; only type checkers use it
    from typing import TypeVar

    OutputT = TypeVar("OutputT")

__all__ = [
    "OUTPUT_TAKEN",
    "OUTPUT_TOOL",
    "Checked",
    "FinalOutput",
    "OutputSpec",
    "OutputT",
    "correction",
    "is_correction",
    "output_spec",
    "output_tool",
]

OUTPUT_TOOL = "final_answer"
"""The tool a run answers through when its output goes ``via="tool"``."""
OUTPUT_TAKEN = "Taken as the final answer."
"""The output tool's result, once its arguments fit."""
ERRORS_SHOWN = 3
"""Most schema errors one correction lists."""
_CORRECTION = "Your answer does not fit the required output"
_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_DEFS = ("$defs", "definitions")
"""The keys under which a schema keeps the definitions its refs name."""
_KINDS = "a JSON schema (a dict), an attrs class, a dataclass, a TypedDict or a pydantic model"


Via = Literal["response_format", "tool"]
"""How an output type reaches the model."""


@attrs.frozen(kw_only=True)
class Checked:
    """An answer checked against the output schema: its value, or what is wrong."""

    value: Any = None
    error: str | None = None


class FinalOutput(Exception):
    """Raised by the output tool with a value that fits: the run's answer."""

    def __init__(self, value: Any) -> None:
        super().__init__("the run's output")
        self.value = value


@attrs.frozen(kw_only=True)
class OutputSpec:
    """The declared shape of an agent's answer and how to build its value."""

    name: str
    schema: Mapping[str, Any]
    strict: bool
    via: Via = "response_format"
    build: Callable[[Any], Any] = attrs.field(default=lambda value: value, eq=False, repr=False)
    tool: Tool | None = attrs.field(default=None, eq=False, repr=False)
    """The tool the run answers through (``via="tool"``; see :func:`output_tool`)."""
    _validator: jsonschema.Draft202012Validator | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )
    """Made on the first check, then kept (as a tool keeps its own)."""

    def response_format(self) -> dict[str, Any] | None:
        """The request's ``response_format`` (None when the output goes through a tool)."""
        if self.via != "response_format":
            return None
        spec = {"name": self.name, "schema": dict(self.schema), "strict": self.strict}
        return {"type": "json_schema", "json_schema": spec}

    @property
    def wrapped(self) -> bool:
        """The schema is not an object: the output tool takes it as ``value``."""
        return self.schema.get("type") != "object"

    def tool_parameters(self) -> dict[str, Any]:
        """The output tool's parameters: the schema, or ``{"value": schema}`` (its
        definitions left at the root, where its refs look for them)."""
        if not self.wrapped:
            return dict(self.schema)
        value = {k: v for k, v in self.schema.items() if k not in _DEFS}
        return {
            "type": "object",
            "properties": {"value": value},
            "required": ["value"],
            "additionalProperties": False,
            **{k: v for k, v in self.schema.items() if k in _DEFS},
        }

    def describe(self, limit: int = 400) -> str:
        """The schema as compact JSON, cut at ``limit`` characters (for a description)."""
        text = json.dumps(self.schema, separators=(",", ":"))
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def in_prose(self) -> Checked:
        """An answer in prose where the output tool should have been called."""
        return Checked(error=f"it was written as text; call {OUTPUT_TOOL} to give it")

    def check_text(self, text: str) -> Checked:
        """Parse ``text`` (a JSON document, perhaps in a code fence) and validate it."""
        try:
            value = decoded(_unfenced(text))
        except NotStorable as exc:
            return Checked(error=str(exc))
        return self.check(value)

    def check(self, value: Any) -> Checked:
        """Validate ``value`` against the schema, then build it (the output class's
        validators may refuse a value the schema allows)."""
        validator = self._validator
        if validator is None:
            import jsonschema  # on first use: ``import orchestra`` stays lean

            validator = jsonschema.Draft202012Validator(self.schema)
            object.__setattr__(self, "_validator", validator)  # frozen: a cache, not state
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if not errors:
            return Checked(value=value, error=self.refusal(value))
        return Checked(error=_listed([_said(e) for e in errors]))

    def refusal(self, value: Any) -> str | None:
        """Why the output class refuses ``value`` (its validators), or None if it builds."""
        try:
            self.build(value)
        except Exception as exc:  # the class's own code: whatever it raises is a refusal
            return _refused(exc)
        return None


def output_spec(output_type: object, via: str = "response_format") -> OutputSpec:
    """The spec of ``output_type``: a JSON schema, an attrs class, a dataclass, a
    TypedDict or a pydantic model.

    Raises:
        ConfigError: not one of those, a type no schema can be derived from,
            or a schema that is not a valid JSON schema.
    """
    if via not in ("response_format", "tool"):
        raise ConfigError(f"output_via must be 'response_format' or 'tool', got {via!r}")
    schema, name, build = _shape(output_type)
    check_schema(schema, "output_type")
    how: Via = "tool" if via == "tool" else "response_format"
    spec = OutputSpec(
        name=_NAME.sub("_", name)[:64], schema=schema, strict=_strict(schema), via=how, build=build
    )
    return attrs.evolve(spec, tool=output_tool(spec)) if how == "tool" else spec


def _shape(output_type: object) -> tuple[dict[str, Any], str, Callable[[Any], Any]]:
    """The schema of ``output_type``, its name and how its value is built.

    Raises:
        ConfigError: none of the kinds accepted, or a class with no JSON schema.
    """
    if isinstance(output_type, Mapping):
        return dict(output_type), "output", _identity
    if not isinstance(output_type, type):
        raise ConfigError(f"output_type must be {_KINDS}, got {output_type!r}")
    name = output_type.__name__
    if is_pydantic_model(output_type):
        return model_schema(output_type), name, _validator_of(output_type)
    if attrs.has(output_type) or dataclasses.is_dataclass(output_type):
        return schema_of(output_type), name, _structurer(output_type)
    if is_typeddict(output_type):
        return schema_of(output_type), name, _identity
    raise ConfigError(f"output_type must be {_KINDS}, got {output_type!r}")


def _strict(schema: Any) -> bool:
    """Whether ``schema`` meets strict structured outputs: every object lists all
    its properties as required and admits no others (recursively)."""
    if isinstance(schema, list):
        return all(_strict(item) for item in schema)
    if not isinstance(schema, Mapping):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", ())) != set(properties):
            return False
    return all(_strict(v) for k, v in schema.items() if k not in ("enum", "const", "required"))


def _identity(value: Any) -> Any:
    return value


def _structurer(cls: type) -> Callable[[Any], Any]:
    """Build ``cls`` (an attrs class or a dataclass) from its JSON value: fields by
    their ``__init__`` names, as the schema has them (attrs names ``_secret``
    ``secret``), defaults for those left out."""
    converter = cattrs.Converter(use_alias=True)
    return lambda value: converter.structure(value, cls)


def _validator_of(model: type) -> Callable[[Any], Any]:
    """Build a pydantic ``model`` from its JSON value: its ``model_validate``."""
    validate: Callable[[Any], Any] = cast(Any, model).model_validate
    return validate


def _refused(exc: Exception) -> str:
    """What an output class's refusal says, at its place (``'n' must be >= 0: -1 at $``)."""
    if isinstance(exc, cattrs.BaseValidationError):
        said = cattrs.transform_error(exc, path="$", format_exception=_why)
        return "the value was refused: " + "; ".join(s.replace(" @ $", " at $") for s in said)
    invalid = _pydantic_errors(exc)
    if invalid is not None:
        return "the value was refused: " + _listed(invalid)
    return f"the value was refused: {_why(exc, None)}"


def _pydantic_errors(exc: Exception) -> list[str] | None:
    """A pydantic ValidationError's errors, each at its field (``at $.n: Input should
    be ...``); None for any other exception (pydantic is not imported for it)."""
    core = sys.modules.get("pydantic_core")
    if core is None or not isinstance(exc, core.ValidationError):
        return None
    return [f"at ${_path(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]


def _listed(errors: list[str]) -> str:
    """The first :data:`ERRORS_SHOWN` of ``errors``, and how many more there are."""
    more = len(errors) - ERRORS_SHOWN
    return "; ".join(errors[:ERRORS_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _why(exc: BaseException, _type: Any) -> str:
    return str(exc) or type(exc).__name__


def _unfenced(text: str) -> str:
    """``text`` without a Markdown code fence around it (```json ... ```)."""
    stripped = text.strip()
    match = re.fullmatch(r"```[a-zA-Z]*\s*\n?(.*?)\n?```", stripped, flags=re.DOTALL)
    return match.group(1) if match else stripped


def _said(error: jsonschema.ValidationError) -> str:
    return f"at ${_path(error.absolute_path)}: {error.message}"


def _path(parts: Sequence[str | int]) -> str:
    """A place in a JSON value, after ``$``: ``.sources[0].name``."""
    return "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in parts)


def correction(spec: OutputSpec, error: str) -> dict[str, Any]:
    """The message that sends an answer that does not fit back to the model."""
    how = (
        "Answer again with only the JSON"
        if spec.via == "response_format"
        else f"Call {OUTPUT_TOOL} again with arguments"
    )
    return {
        "role": "user",
        "content": f"{_CORRECTION}: {error}. {how} that fits this schema: {spec.describe()}",
    }


def is_correction(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a :func:`correction`."""
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and (content.startswith(_CORRECTION))
    )


def output_tool(spec: OutputSpec) -> Tool:
    """The tool a run answers through (``via="tool"``): its arguments, once they
    fit the schema (checked as any call's), are the run's output."""

    def answer(**arguments: Any) -> str:
        raise FinalOutput(arguments["value"] if spec.wrapped else arguments)

    return _OutputTool(
        output=spec,
        name=OUTPUT_TOOL,
        description="Give your final answer: call this, with arguments that fit the "
        "required output, once you have it.",
        parameters=spec.tool_parameters(),
        function=answer,
        read_only=True,
    )


@attrs.frozen(kw_only=True)
class _OutputTool(Tool):
    """The output tool: its arguments are refused, as any call's that do not fit,
    when the output class refuses them too (a validator stricter than the schema)."""

    output: OutputSpec = attrs.field(eq=False, repr=False)

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        """Decode and validate the arguments, then build the answer from them.

        Raises:
            ToolInputError: with a message the model can act on.
        """
        arguments = super().parse_arguments(raw)
        spec = self.output
        refused = spec.refusal(arguments["value"] if spec.wrapped else arguments)
        if refused is not None:
            raise ToolInputError(refused)
        return arguments
