"""The extract scenarios: answers in the shape asked, fitting or, on purpose, not."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from orchestra import OpenAIProvider, Runner, RunResult, Status
from orchestra._recipes.demo import Incident
from orchestra._scripted.extract import fill, spoil, telling_line
from orchestra.testing import ScriptedTransport, demo_agent, demo_task, make_sandbox

LINE = "2026-11-30T04:12:09Z ERROR worker 7 timed out after 30000 ms"


def test_values_come_from_the_telling_line_without_timestamp_parts() -> None:
    assert telling_line(f"INFO started\n{LINE}\n") == LINE
    schema = {
        "type": "object",
        "properties": {
            "worker": {"type": "integer"},
            "ms": {"type": "integer", "maximum": 1000},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 5}]},
        },
        "required": ["worker"],
    }
    assert fill(schema, LINE) == {"worker": 7, "ms": 1000, "tags": ["a"], "note": "2026-"}
    assert spoil(fill(schema, LINE), schema) == {"ms": 1000, "tags": ["a"], "note": "2026-"}


async def _extract(scenario: str, box: Path, via: str = "response_format") -> RunResult:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    agent = attrs.evolve(demo_agent(scenario, make_sandbox(box)), output_via=via)
    return await Runner(provider=provider).run(agent, demo_task(scenario))


@pytest.mark.parametrize("via", ["response_format", "tool"])
async def test_extract_answers_an_incident_either_way(tmp_path: Path, via: str) -> None:
    result = await _extract("extract", tmp_path, via)
    assert result.status is Status.COMPLETED
    assert result.output == Incident(worker=7, timeout_ms=30000, evidence=LINE)


async def test_an_answer_invalid_once_completes_after_one_correction(tmp_path: Path) -> None:
    result = await _extract("extract_invalid_once", tmp_path)
    assert result.status is Status.COMPLETED
    assert result.state.turns == 3  # read, invalid, fixed


async def test_answers_never_valid_fail_saying_why(tmp_path: Path) -> None:
    result = await _extract("extract_never_valid", tmp_path)
    assert result.status is Status.FAILED
    assert "did not fit the required output" in result.state.reason
