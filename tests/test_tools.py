"""Tool schemas derived from typed functions, and argument validation."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestra import ConfigError, Tool, ToolContext, ToolPolicy, tool
from orchestra._tools import NOTE_BYTES, ToolInputError, bound_result, plain_object_check

DEEP = "[" * 100_000 + "]" * 100_000


def test_schema_from_a_typed_function():
    @tool(read_only=True)
    def search(
        query: str,
        ctx: ToolContext,
        limit: int = 5,
        mode: Literal["a", "b"] = "a",
        tags: list[str] | None = None,
    ) -> str:
        """Search things.

        Args:
            query: what to look for.
            limit: at most this many.
        """
        return query

    spec = search.spec()["function"]
    assert spec["description"] == "Search things."
    props = spec["parameters"]["properties"]
    assert set(props) == {"query", "limit", "mode", "tags"}  # ctx is not a parameter
    assert props["query"] == {"type": "string", "description": "what to look for."}
    assert props["mode"]["enum"] == ["a", "b"]
    assert spec["parameters"]["required"] == ["query"]
    assert search.takes_context and search.read_only and not search.needs_approval


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ("{}", "'path' is a required property"),
        ('{"path": "a", "x": 1}', "'x' was unexpected"),
    ],
)
def test_bad_arguments_are_explained(raw, message):
    @tool
    def read(path: str) -> str:
        """Read."""
        return path

    with pytest.raises(ToolInputError, match=message):
        read.parse_arguments(raw)


def test_bad_tool_definitions_are_refused():
    with pytest.raises(ConfigError, match="must match"):
        Tool(name="has space", description="", parameters={"type": "object"}, function=print)
    with pytest.raises(ConfigError, match="parameters: not a valid JSON schema"):
        Tool(name="t", description="", parameters={"type": 5}, function=print)


def test_unsupported_annotation_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot derive"):

        @tool
        def f(x: object) -> str:
            return ""


@tool
def read(path: str) -> str:
    """Read."""
    return path


nested = Tool(
    name="nested",
    description="Takes nested lists.",
    parameters={
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    },
    function=lambda tree: "ok",
)


@pytest.mark.parametrize("raw", [DEEP, '{"path": ' + DEEP + "}", '{"tree": ' + DEEP + "}"])
def test_deeply_nested_arguments_are_refused_not_a_recursion_error(raw):
    for target in (read, nested):
        with pytest.raises(ToolInputError, match="arguments are nested too deeply"):
            target.parse_arguments(raw)


def test_nesting_within_the_bound_is_accepted():
    ok = '{"tree": ' + "[" * 60 + "]" * 60 + "}"
    assert nested.parse_arguments(ok)["tree"] == json.loads(ok)["tree"]
    with pytest.raises(ToolInputError, match="nested too deeply"):
        nested.parse_arguments('{"tree": ' + "[" * 70 + "]" * 70 + "}")


def test_brackets_inside_strings_do_not_count_as_nesting():
    raw = json.dumps({"path": '[{"\\' * 500})
    assert read.parse_arguments(raw) == json.loads(raw)


@pytest.mark.parametrize("depth", [100_000, 500])  # json.loads fails / jsonschema fails
def test_recursion_errors_are_caught_even_past_the_depth_check(monkeypatch, depth):
    monkeypatch.setattr("orchestra._storable.MAX_DEPTH", 10**9)
    with pytest.raises(ToolInputError, match="nested too deeply"):
        nested.parse_arguments('{"tree": ' + "[" * depth + "]" * depth + "}")


@pytest.mark.parametrize("text", ["a" * 1_000_000, "é" * 500_000])
def test_oversized_arguments_are_refused(text):
    with pytest.raises(ToolInputError, match=r"too large \(more than 1,000,000 bytes\)"):
        read.parse_arguments(json.dumps({"path": text}, ensure_ascii=False))
    assert read.parse_arguments(json.dumps({"path": text[:-100]}, ensure_ascii=False))


def test_a_small_result_is_unchanged():
    assert bound_result("héllo", 1024) == "héllo"
    assert bound_result("x" * 1024, 1024) == "x" * 1024


def test_a_large_result_is_cut_with_a_note_giving_its_size():
    text = bound_result("€" * 1000, 1024)  # 3,000 bytes
    head, note = text.split("\n")
    assert head == "€" * len(head) and len(head) == (1024 - NOTE_BYTES) // 3
    assert (
        note == f"[truncated: the result was 3,000 bytes; showing the first {3 * len(head)} bytes]"
    )


long_text = st.builds(
    lambda piece, n: piece * n, st.text(min_size=1, max_size=8), st.integers(0, 900)
)


@given(long_text, st.integers(1024, 4096))
def test_bounded_results_fit_keep_their_start_and_are_stable(text, limit):
    bounded = bound_result(text, limit)
    assert len(bounded.encode()) <= limit
    if len(text.encode()) <= limit:
        assert bounded == text
    else:
        head, _, note = bounded.rpartition("\n")
        assert text.startswith(head)
        assert f"the result was {len(text.encode()):,} bytes" in note
    assert bound_result(bounded, limit) == bounded


def test_lone_surrogates_are_bounded_not_an_error():
    assert bound_result("\ud800" * 2000, 1024).endswith("showing the first 822 bytes]")


def context(limit: int) -> ToolContext:
    return ToolContext(
        run_id="r", call_id="c", tool="t", idempotency_key="r:c", max_result_bytes=limit
    )


@pytest.mark.parametrize("value", ["x" * 100_000, ["x" * 10] * 10_000])
async def test_run_bounds_any_result(value):
    @tool
    def big() -> object:
        """Big."""
        return value

    text = await big.run({}, context(2048))
    assert len(text.encode()) <= 2048
    assert "[truncated: the result was" in text


def test_policy_result_bound():
    assert ToolPolicy().max_result_bytes == 64 * 1024
    assert ToolPolicy(max_result_bytes=1024).max_result_bytes == 1024
    for bad in (1023, 0, -5, True, "4096", 4096.0):
        with pytest.raises(ConfigError, match="max_result_bytes"):
            ToolPolicy(max_result_bytes=bad)


# -- the plain-schema fast path: never more lenient than jsonschema --------------------------

SCALAR_TYPES = st.sampled_from(["string", "integer", "number", "boolean"])
NAMES = st.sampled_from(["a", "b", "path", "n"])
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def plain_schemas(draw: Any) -> dict[str, Any]:
    props = draw(st.dictionaries(NAMES, SCALAR_TYPES, max_size=4))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {k: {"type": t, "description": "x"} for k, t in props.items()},
        "required": draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else [],
    }
    extra = draw(st.sampled_from([None, True, False]))
    if extra is not None:
        schema["additionalProperties"] = extra
    return schema


@given(plain_schemas(), st.dictionaries(NAMES, VALUES, max_size=4))
def test_the_plain_check_passes_only_what_jsonschema_passes(schema, args):
    check = plain_object_check(schema)
    assert check is not None
    valid = jsonschema.Draft202012Validator(schema).is_valid(args)
    if check(args):
        assert valid
    elif valid:  # stricter only where Python and JSON Schema disagree on a number
        assert any(isinstance(v, float) and v.is_integer() for v in args.values())


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
        {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}},
        {"type": "object", "properties": {"xs": {"type": "array"}}},
        {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        {"type": "object", "minProperties": 1},
        {"anyOf": [{"type": "object"}]},
    ],
)
def test_a_schema_with_anything_more_than_plain_types_gets_no_plain_check(schema):
    assert plain_object_check(schema) is None


def test_a_derived_scalar_schema_takes_the_plain_path_and_errors_still_come_from_jsonschema():
    @tool(read_only=True)
    def read(path: str, limit: int = 10) -> str:
        """Reads."""
        return path

    assert plain_object_check(read.parameters) is not None
    assert read.parse_arguments('{"path": "x", "limit": 3}') == {"path": "x", "limit": 3}
    assert read.parse_arguments('{"path": "x", "limit": 3.0}') == {"path": "x", "limit": 3.0}
    with pytest.raises(ToolInputError, match="'path' is a required property"):
        read.parse_arguments('{"limit": 3}')
    with pytest.raises(ToolInputError, match="True is not of type 'integer'"):
        read.parse_arguments('{"path": "x", "limit": true}')
