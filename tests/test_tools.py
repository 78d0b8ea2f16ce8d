"""Tool schemas derived from typed functions, and argument validation."""

from __future__ import annotations

from typing import Literal

import pytest

from orchestra import ConfigError, Tool, ToolContext, tool
from orchestra._tools import ToolInputError


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
