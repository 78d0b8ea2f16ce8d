"""Model settings: checked values, sent in the request body, saved with the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestra import (
    Agent,
    ConfigError,
    Limits,
    ModelSettings,
    OpenAIProvider,
    Runner,
    SQLiteStore,
    Status,
    state_from_dict,
    state_to_dict,
)
from orchestra.testing import ScriptedTransport, demo_agent, demo_task


class Recording(ScriptedTransport):
    """The scripted transport, keeping the JSON body of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return await super().handle_async_request(request)


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[OpenAIProvider, Recording]]:
    transport = Recording()
    provider = OpenAIProvider(base_url="http://scripted.test/v1", api_key="k", transport=transport)
    yield provider, transport
    await provider.aclose()


SETTINGS = ModelSettings(
    temperature=0.2,
    top_p=0.9,
    seed=7,
    stop=("END",),
    parallel_tool_calls=False,
    extra_body={"user": "alice", "metadata": {"team": "research"}},
)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"temperature": 2.5}, "temperature must be in [0, 2]"),
        ({"temperature": float("nan")}, "temperature must be a number"),
        ({"top_p": 0}, "top_p must be in (0, 1]"),
        ({"seed": True}, "seed must be an integer"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1"),
        ({"stop": ("a", "b", "c", "d", "e")}, "stop takes at most 4"),
        ({"stop": ("",)}, "non-empty string"),
        ({"extra_body": {"max_tokens": 10**6}}, "extra_body cannot set max_tokens"),
        ({"extra_body": {"n": 3, "model": "x"}}, "extra_body cannot set model, n"),
        ({"extra_body": {"when": object()}}, "extra_body must be JSON"),
    ],
)
def test_a_setting_out_of_range_is_refused_in_words(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace("[", r"\[")):
        ModelSettings(**fields)


def test_run_settings_win_field_by_field_and_merge_extras() -> None:
    agent = ModelSettings(temperature=0.5, seed=1, extra_body={"user": "a", "x": 1})
    run = ModelSettings(seed=2, stop="STOP", extra_body={"user": "b"})
    merged = run.over(agent)
    assert merged == ModelSettings(
        temperature=0.5, seed=2, stop=("STOP",), extra_body={"user": "b", "x": 1}
    )
    assert merged.described() == (
        'temperature 0.5, seed 2, stop ["STOP"], extra_body {"user":"b","x":1}'
    )
    assert ModelSettings().described() == "defaults" and ModelSettings().empty


async def test_every_request_of_a_run_carries_its_settings(recorded, sandbox: Path) -> None:
    provider, transport = recorded
    agent = Agent(
        name="a", model="plan", tools=demo_agent("plan", sandbox).tools, settings=SETTINGS
    )
    result = await Runner(provider=provider).run(agent, demo_task("plan"))
    assert result.status is Status.COMPLETED
    assert len(transport.bodies) >= 2
    for body in transport.bodies:
        assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and body["seed"] == 7
        assert body["stop"] == ["END"] and body["parallel_tool_calls"] is False
        assert body["user"] == "alice" and body["metadata"] == {"team": "research"}
    assert result.state.settings == SETTINGS


async def test_unset_settings_send_nothing(recorded, sandbox: Path) -> None:
    provider, transport = recorded
    result = await Runner(provider=provider).run(demo_agent("plan", sandbox), demo_task("plan"))
    assert result.status is Status.COMPLETED and result.state.settings is None
    for body in transport.bodies:
        assert not {"temperature", "top_p", "seed", "stop", "parallel_tool_calls"} & set(body)


async def test_a_runs_own_settings_and_max_tokens_are_used(recorded, sandbox: Path) -> None:
    provider, transport = recorded
    agent = Agent(
        name="a",
        model="plan",
        tools=demo_agent("plan", sandbox).tools,
        max_tokens=900,
        settings=ModelSettings(temperature=1.0, seed=3),
    )
    own = ModelSettings(temperature=0.0, max_tokens=300)
    result = await Runner(provider=provider).run(agent, demo_task("plan"), settings=own)
    assert result.status is Status.COMPLETED
    assert {(b["temperature"], b["seed"]) for b in transport.bodies} == {(0.0, 3)}
    assert max(b["max_tokens"] for b in transport.bodies) == 300  # the run's cap, not 900


async def test_a_resume_asks_as_the_run_began(recorded, sandbox: Path, tmp_path: Path) -> None:
    provider, transport = recorded
    plan = demo_agent("plan", sandbox)
    agent = Agent(name="a", model="plan", tools=plan.tools, settings=ModelSettings(seed=11))
    with SQLiteStore(tmp_path / "runs.db") as store:
        runner = Runner(provider=provider, store=store)
        stopped = await runner.run(agent, demo_task("plan"), limits=Limits(max_turns=1))
        assert stopped.status is Status.MAX_TURNS_EXCEEDED
        changed = Agent(name="a", model="plan", tools=plan.tools, settings=ModelSettings(seed=99))
        transport.bodies.clear()
        resumed = await runner.resume(stopped.run_id, changed, limits=Limits(max_turns=10))
    assert resumed.status is Status.COMPLETED
    seeds = [body.get("seed") for body in transport.bodies]
    assert seeds and seeds == [11] * len(seeds)


def test_settings_are_saved_only_when_set_and_read_back() -> None:
    from orchestra._core.execute import new_state

    plain = new_state(Agent(name="a", model="m"), "go", Limits())
    assert "settings" not in state_to_dict(plain)  # older versions read it
    kept = new_state(Agent(name="a", model="m", settings=SETTINGS), "go", Limits())
    saved = state_to_dict(kept)
    assert saved["settings"]["stop"] == ["END"]
    assert state_from_dict(saved).settings == SETTINGS


async def test_children_ask_with_their_own_agents_settings(recorded, sandbox: Path) -> None:
    provider, transport = recorded
    root = demo_agent("research", sandbox, settings=ModelSettings(seed=5))
    own = ModelSettings(temperature=0.0)  # the root run's alone
    result = await Runner(provider=provider).run(root, demo_task("research"), settings=own)
    assert result.status is Status.COMPLETED
    seen = {(b["model"], b.get("seed"), b.get("temperature")) for b in transport.bodies}
    assert seen == {("research", 5, 0.0), ("researcher", 5, None)}
