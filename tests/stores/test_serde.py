"""Run state: lossless JSON round trip and schema versions."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestra import (
    Approval,
    Interruption,
    InterruptionKind,
    Limits,
    ModelSettings,
    RunState,
    SchemaVersionError,
    StateError,
    Status,
    Usage,
    state_from_json,
    state_to_dict,
    state_to_json,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"

json_scalars = st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.text(max_size=20)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=40)}
    ),
    max_size=5,
)


@given(
    messages=messages,
    status=st.sampled_from(list(Status)),
    cost=st.integers(0, 10**15),
    args=st.dictionaries(st.text(max_size=8), json_scalars, max_size=4),
    max_budget=st.none() | st.floats(0, 100, allow_nan=False),
)
def test_round_trip_is_lossless(messages, status, cost, args, max_budget):
    state = RunState(
        run_id="r1",
        root_id="r0",
        parent_id="r0",
        agent="a",
        model="m",
        messages=messages,
        status=status,
        own=Usage(cost_pico=cost, model_calls=2),
        tree=Usage(cost_pico=cost * 2),
        interruption=Interruption(kind=InterruptionKind.APPROVAL, call_id="c", arguments=args),
        approvals=[Approval(call_id="c", arguments=args)],
        rejections={"d": "no"},
        limits=Limits(max_turns=3, max_budget_usd=max_budget),
        children={"c": "r2"},
    )
    assert state_from_json(state_to_json(state)) == state


def test_unknown_schema_version_is_refused_clearly():
    data = json.loads((FIXTURES / "state-v1.json").read_text())
    data["schema_version"] = 99
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        state_from_json(json.dumps(data))


def test_stored_v1_fixture_still_loads():
    state = state_from_json((FIXTURES / "state-v1.json").read_text())
    assert state.status is Status.COMPLETED and state.turns == 3


@pytest.mark.parametrize("text", ["not json", "[]", '{"schema_version": 1, "run_id": 5}'])
def test_garbage_is_a_state_error(text):
    with pytest.raises(StateError):
        state_from_json(text)


@given(
    status=st.sampled_from(list(Status)),
    cost=st.integers(0, 10**15),
    args=st.dictionaries(st.text(max_size=8), json_scalars, max_size=4),
    max_budget=st.none() | st.floats(0, 100, allow_nan=False),
    reason=st.text(max_size=60) | st.just("Authorization: Bearer sk-abcdefghijklmnop"),
    raised=st.booleans(),
    settings=st.sampled_from(
        [None, ModelSettings(seed=3, stop=("x",), extra_body={"u": [1]}), ModelSettings(top_p=1)]
    ),
)
def test_the_saved_head_is_the_state_without_its_transcript(
    status, cost, args, max_budget, reason, raised, settings
):
    from orchestra._state import LimitRaise
    from orchestra._stores.transcripts import head_json, joined

    limits = Limits(max_turns=3, max_budget_usd=max_budget)
    state = RunState(
        run_id="r1",
        root_id="r0",
        parent_id="r0",
        agent="a",
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        status=status,
        reason=reason,
        error=reason or None,
        own=Usage(cost_pico=cost, model_calls=2),
        tree=Usage(cost_pico=cost * 2),
        interruption=Interruption(
            kind=InterruptionKind.APPROVAL, reason=reason, call_id="c", arguments=args
        ),
        approvals=[Approval(call_id="c", arguments=args)],
        rejections={"d": "no"},
        limits=limits,
        limit_raises=[LimitRaise(at=1.0, before=limits, after=limits, note="n")] if raised else [],
        children={"c": "r2"},
        started=["c"],
        metadata={"k": "v"},
        settings=settings,
    )
    expected = state_to_dict(state)
    expected.pop("messages")
    assert orjson.loads(head_json(state)) == expected
    assert joined(head_json(state), state.messages) == state_from_json(state_to_json(state))


def test_limits_and_usage_to_dict_name_every_field():
    import attrs

    from orchestra import Limits, Usage

    limits = Limits(max_turns=3, max_budget_usd=0.5, timeout_s=9.0, max_tokens_total=7)
    usage = Usage(model_calls=1, prompt_tokens=2, completion_tokens=3, cost_pico=4, tool_runs=5)
    assert limits.to_dict() == attrs.asdict(limits)
    written = attrs.evolve(usage, cache_write_tokens=6)
    assert written.to_dict() == attrs.asdict(written)
    # cache writes are said only when there are some: older versions read the state
    assert usage.to_dict() == {
        k: v for k, v in attrs.asdict(usage).items() if k != "cache_write_tokens"
    }
    assert Usage(**usage.to_dict()) == usage
