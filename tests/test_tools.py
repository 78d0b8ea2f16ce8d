"""Tool schemas derived from typed functions, and argument validation."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestra import ConfigError, Tool, ToolContext, ToolPolicy, tool
from orchestra._tools import NOTE_BYTES, ToolInputError, bound_result

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
    with pytest.raises(ConfigError, match="invalid parameters schema"):
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
    monkeypatch.setattr("orchestra._tools.MAX_ARGUMENT_DEPTH", 10**9)
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
