"""check_schema: a schema that passed once is not checked again; a bad one always fails."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from orchestra import ConfigError, _schema
from orchestra._schema import check_schema


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every schema the JSON-schema validator is asked to check, from a fresh memory."""
    seen: list[Any] = []
    real = jsonschema.Draft202012Validator.check_schema

    def counted(schema: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(schema)
        real(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", counted)
    monkeypatch.setattr(_schema, "_PASSED", {})
    return seen


def test_a_schema_that_passed_is_not_checked_again(checks: list[Any]) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    check_schema(schema, "tool a: parameters")
    check_schema(dict(schema), "tool b: parameters")  # equal content, another dict
    assert len(checks) == 1


def test_a_bad_schema_fails_every_time(checks: list[Any]) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match="tool t: parameters: not a valid JSON schema"):
            check_schema({"type": 5}, "tool t: parameters")
    assert len(checks) == 2


def test_what_the_validator_tells_apart_is_not_taken_for_what_passed(checks: list[Any]) -> None:
    check_schema({"type": "object", "required": ["a"]}, "tool t: parameters")
    with pytest.raises(ConfigError, match="not a valid JSON schema"):  # a tuple is no array
        check_schema({"type": "object", "required": ("a",)}, "tool t: parameters")
    assert len(checks) == 2


def test_the_memory_is_bounded(checks: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_schema, "PASSED_KEPT", 2)
    for n in range(5):
        check_schema({"type": "string", "maxLength": n}, "output_type")
    assert len(_schema._PASSED) <= 2
    check_schema({"type": "string", "maxLength": 0}, "output_type")  # forgotten: checked again
    assert len(checks) == 6
