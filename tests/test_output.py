"""Structured output: schemas from types, the answer checked, fixed, built."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import attrs
import pydantic
import pytest

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    ConfigError,
    Limits,
    OpenAIProvider,
    Runner,
    SQLiteStore,
    Status,
    tool,
)
from orchestra._output import OUTPUT_TOOL, output_spec
from orchestra._schema import schema_of
from orchestra.testing import (
    DONE,
    FakeProvider,
    ScriptedTransport,
    demo_agent,
    demo_task,
    make_sandbox,
    tool_calls,
)


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


@attrs.frozen
class Source:
    name: str
    lines: list[int]


@attrs.frozen
class Finding:
    title: str
    year: int
    level: Level
    kind: Literal["bug", "outage"]
    sources: list[Source]
    note: str | None = None


class Movie(TypedDict):
    title: str
    rating: float


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["city", "people"],
    "additionalProperties": False,
}


def test_a_schema_is_derived_from_an_attrs_class_with_nested_types() -> None:
    schema = schema_of(Finding)
    assert schema["required"] == ["title", "year", "level", "kind", "sources"]
    assert schema["properties"]["level"] == {"enum": ["low", "high"]}
    assert schema["properties"]["kind"] == {"enum": ["bug", "outage"]}
    source = schema["properties"]["sources"]["items"]
    assert source["properties"]["lines"] == {"type": "array", "items": {"type": "integer"}}
    assert schema["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert schema["additionalProperties"] is False


def test_strict_only_when_every_property_is_required() -> None:
    assert output_spec(SCHEMA).strict
    assert output_spec(Movie).strict
    assert not output_spec(Finding).strict  # note has a default
    assert output_spec(Movie).response_format() == {
        "type": "json_schema",
        "json_schema": {"name": "Movie", "schema": schema_of(Movie), "strict": True},
    }


@pytest.mark.parametrize(
    "bad",
    [object, int, "a string", {"type": 5}],
    ids=["object", "int", "str", "bad-schema"],
)
def test_what_is_no_output_type_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="output_type"):
        Agent(name="a", model="m", output_type=bad)


def test_an_output_tool_cannot_shadow_a_tool_of_that_name() -> None:
    @tool(name=OUTPUT_TOOL)
    def final_answer() -> str:
        """Mine."""
        return ""

    with pytest.raises(ConfigError, match="a tool is named final_answer"):
        Agent(name="a", model="m", tools=(final_answer,), output_type=SCHEMA, output_via="tool")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"city": "Oslo"}', "'people' is a required property"),
        ('{"city": "Oslo", "people": "many"}', "at $.people: 'many' is not of type 'integer'"),
        ("Oslo, 700000 people", "it is not valid JSON"),
    ],
)
def test_an_answer_that_does_not_fit_says_where(text: str, error: str) -> None:
    assert error in str(output_spec(SCHEMA).check_text(text).error)


def test_an_answer_in_a_code_fence_is_read() -> None:
    checked = output_spec(SCHEMA).check_text('```json\n{"city": "Oslo", "people": 7}\n```')
    assert checked.value == {"city": "Oslo", "people": 7} and checked.error is None


class ByModel:
    """A fake provider per model name."""

    def __init__(self, **providers: FakeProvider) -> None:
        self.providers = providers

    async def complete(self, request: ChatRequest) -> ChatReply:
        return await self.providers[request.model].complete(request)


def _answers(*texts: str) -> FakeProvider:
    return FakeProvider(*({"role": "assistant", "content": t} for t in texts))


async def test_the_answer_is_built_into_the_class_and_sent_as_a_response_format() -> None:
    provider = _answers(json.dumps({"title": "Movie night", "rating": 4.5}))
    agent = Agent(name="a", model="m", output_type=Movie)
    result = await Runner(provider=provider).run(agent, "Pick a film.")
    assert result.status is Status.COMPLETED and result.output == {
        "title": "Movie night",
        "rating": 4.5,
    }
    [request] = provider.requests
    assert request.response_format == output_spec(Movie).response_format()


async def test_an_invalid_answer_is_sent_back_and_fixed_within_the_limits() -> None:
    provider = _answers('{"city": "Oslo"}', '{"city": "Oslo", "people": 700000}')
    agent = Agent(name="a", model="m", output_type=SCHEMA, limits=Limits(max_turns=3))
    result = await Runner(provider=provider).run(agent, "Where?")
    assert result.status is Status.COMPLETED and result.output == {"city": "Oslo", "people": 700000}
    note = provider.requests[1].messages[-1]
    assert note["role"] == "user" and "'people' is a required property" in note["content"]
    assert result.state.turns == 2


async def test_answers_that_never_fit_fail_the_run_after_the_retries() -> None:
    provider = _answers("no", "still no", "never")
    agent = Agent(name="a", model="m", output_type=SCHEMA, output_retries=2)
    result = await Runner(provider=provider).run(agent, "Where?")
    assert result.status is Status.FAILED and result.output is None
    assert "did not fit the required output (it is not valid JSON" in result.state.reason
    assert "after 2 correction(s)" in result.state.reason and result.state.turns == 3


async def test_a_turn_limit_stops_the_corrections_first() -> None:
    provider = _answers("no", "still no", "never")
    agent = Agent(name="a", model="m", output_type=SCHEMA, limits=Limits(max_turns=2))
    result = await Runner(provider=provider).run(agent, "Where?")
    assert result.status is Status.MAX_TURNS_EXCEEDED and result.state.turns == 2


async def test_through_the_output_tool_the_arguments_are_the_answer() -> None:
    bad = tool_calls((OUTPUT_TOOL, '{"city": "Oslo"}'))
    good = tool_calls((OUTPUT_TOOL, '{"city": "Oslo", "people": 7}'))
    provider = FakeProvider({"role": "assistant", "content": "Oslo."}, bad, good)
    agent = Agent(name="a", model="m", output_type=SCHEMA, output_via="tool")
    result = await Runner(provider=provider).run(agent, "Where?")
    assert result.status is Status.COMPLETED and result.output == {"city": "Oslo", "people": 7}
    first = provider.requests[0]
    assert first.response_format is None
    assert first.tools[-1]["function"]["name"] == OUTPUT_TOOL
    said = [m["content"] for m in result.state.messages if m["role"] in ("tool", "user")]
    assert "call final_answer to give it" in said[1]  # prose where the tool was due
    assert "'people' is a required property" in said[2]  # the call's arguments checked
    assert json.loads(result.answer or "") == {"city": "Oslo", "people": 7}


async def test_a_child_with_an_output_type_hands_its_parent_json() -> None:
    child = Agent(name="counter", model="child", output_type=SCHEMA)
    ask = child.as_tool()
    assert '"people"' in ask.description  # the parent sees the shape it gets back
    provider = ByModel(
        parent=FakeProvider(tool_calls(("counter", '{"question": "How many?"}')), DONE),
        child=_answers('{"city": "Oslo", "people": 7}'),
    )
    parent = Agent(name="parent", model="parent", tools=(ask,))
    result = await Runner(provider=provider).run(parent, "Count.")
    [answer] = [m["content"] for m in result.state.messages if m["role"] == "tool"]
    assert json.loads(answer) == {"city": "Oslo", "people": 7}
    assert result.children[0].output == {"city": "Oslo", "people": 7}


async def test_the_extract_demo_completes_with_an_incident(tmp_path: Any) -> None:
    provider = OpenAIProvider(base_url="http://scripted/v1", transport=ScriptedTransport())
    make_sandbox(tmp_path)
    agent = demo_agent("extract", tmp_path)
    result = await Runner(provider=provider).run(agent, demo_task("extract"))
    assert result.status is Status.COMPLETED
    assert attrs.asdict(result.output) == {
        "worker": 7,
        "timeout_ms": 30000,
        "evidence": "2026-11-30T04:12:09Z ERROR worker 7 timed out after 30000 ms",
    }


async def test_the_output_is_saved_with_the_run(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    provider = _answers('{"city": "Oslo", "people": 7}')
    agent = Agent(name="a", model="m", output_type=SCHEMA)
    result = await Runner(provider=provider, store=store).run(agent, "Where?")
    assert store.load(result.run_id).output == {"city": "Oslo", "people": 7}


# -- checked when the agent is built; built as the schema says ----------------------


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
            r"output_type: the schema's \$ref '#/\$defs/missing' cannot be resolved",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
            r"\$ref 'https://example.com/s.json' cannot be resolved",
        ),
        (
            {"type": "string", "examples": {"a", "b"}},
            r"output_type: the schema is not JSON: at \$\.examples: a set is not a JSON value",
        ),
    ],
)
def test_a_schema_no_run_could_use_is_refused_by_the_agent(schema: Any, said: str) -> None:
    for via in ("response_format", "tool"):
        with pytest.raises(ConfigError, match=said) as caught:
            Agent(name="a", model="m", output_type=schema, output_via=via)
        assert "\n" not in str(caught.value)


def test_a_schema_whose_refs_resolve_is_accepted() -> None:
    schema = {
        "$defs": {"n": {"type": "integer"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/n"}, "y": {"$ref": "#"}},
    }
    assert Agent(name="a", model="m", output_type=schema).output is not None


def _nonnegative(_instance: Any, attribute: Any, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


@attrs.frozen
class Private:
    _secret: str
    count: int = attrs.field(default=3, validator=_nonnegative)
    tags: list[str] = attrs.Factory(list)


def test_private_fields_are_named_as_the_schema_names_them() -> None:
    schema = schema_of(Private)
    assert list(schema["properties"]) == ["secret", "count", "tags"]
    assert schema["required"] == ["secret"]


@pytest.mark.parametrize("via", ["response_format", "tool"])
async def test_private_fields_and_defaults_round_trip(via: str) -> None:
    answer = {"secret": "s"}
    provider = (
        _answers(json.dumps(answer))
        if via == "response_format"
        else FakeProvider(tool_calls((OUTPUT_TOOL, answer)))
    )
    agent = Agent(name="a", model="m", output_type=Private, output_via=via)
    result = await Runner(provider=provider).run(agent, "Tell me.")
    assert result.status is Status.COMPLETED
    assert result.output == Private("s")
    assert result.state.output == answer


async def test_a_validators_refusal_is_corrected_within_the_retries(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    provider = _answers('{"secret": "s", "count": -1}', '{"secret": "s", "count": 2}')
    agent = Agent(name="a", model="m", output_type=Private)
    result = await Runner(provider=provider, store=store).run(agent, "Tell me.")
    assert result.status is Status.COMPLETED
    assert result.output == Private("s", 2)
    correction = provider.requests[1].messages[-1]["content"]
    assert "the value was refused: count must not be negative, got -1 at $" in correction


async def test_a_validator_that_always_refuses_fails_the_run_saved_so() -> None:
    provider = _answers('{"secret": "s", "count": -1}')
    agent = Agent(name="a", model="m", output_type=Private, output_retries=1)
    result = await Runner(provider=provider).run(agent, "Tell me.")
    assert result.status is Status.FAILED
    assert "count must not be negative" in (result.state.reason or "")
    assert result.output is None


async def test_through_the_tool_a_validators_refusal_is_a_bad_argument() -> None:
    provider = FakeProvider(
        tool_calls((OUTPUT_TOOL, {"secret": "s", "count": -5})),
        tool_calls((OUTPUT_TOOL, {"secret": "s", "count": 5})),
    )
    agent = Agent(name="a", model="m", output_type=Private, output_via="tool")
    result = await Runner(provider=provider).run(agent, "Tell me.")
    assert result.status is Status.COMPLETED
    assert result.output == Private("s", 5)
    said = provider.requests[1].messages[-1]["content"]
    assert said.startswith(f"Error: invalid arguments for {OUTPUT_TOOL}: the value was refused")


# -- pydantic models and dataclasses -----------------------------------------------


class Author(pydantic.BaseModel):
    name: str
    born: int | None = None


class Book(pydantic.BaseModel):
    title: str
    pages: int = pydantic.Field(ge=0)
    author: Author
    tags: list[str]


class Even(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def _even(cls, n: int) -> int:
        if n % 2:
            raise ValueError("must be even")
        return n


class Chapter(pydantic.BaseModel):
    title: str
    sections: list[Chapter] = []


class Shelf(pydantic.RootModel[list[Author]]):
    pass


@dataclasses.dataclass(frozen=True)
class Place:
    city: str
    level: Level = Level.LOW


@dataclasses.dataclass(frozen=True)
class Trip:
    name: str
    kind: Literal["work", "fun"]
    stops: list[Place]
    home: Place | None = None
    days: list[int] = dataclasses.field(default_factory=list)
    seen: int = dataclasses.field(default=0, init=False)


BOOK = {"title": "Dune", "pages": 412, "author": {"name": "Herbert"}, "tags": ["sf"]}
TRIP = {"name": "north", "kind": "fun", "stops": [{"city": "Oslo", "level": "high"}]}


def _replies(via: str, *answers: Any) -> FakeProvider:
    """A provider answering with each value: as JSON text, or as a call of the output tool."""
    if via == "response_format":
        return _answers(*(json.dumps(a) for a in answers))
    return FakeProvider(*(tool_calls((OUTPUT_TOOL, a)) for a in answers))


VIAS = pytest.mark.parametrize("via", ["response_format", "tool"])


@VIAS
async def test_a_pydantic_model_is_built_from_the_answer(via: str) -> None:
    provider = _replies(via, BOOK)
    agent = Agent(name="a", model="m", output_type=Book, output_via=via)
    result = await Runner(provider=provider).run(agent, "A book?")
    assert result.status is Status.COMPLETED
    assert result.output == Book(
        title="Dune", pages=412, author=Author(name="Herbert"), tags=["sf"]
    )
    assert isinstance(result.output, Book) and isinstance(result.output.author, Author)
    assert result.state.output == BOOK  # plain JSON, as saved
    [request] = provider.requests
    if via == "response_format":
        assert request.response_format == output_spec(Book).response_format()
    else:
        assert request.tools[-1]["function"]["parameters"] == output_spec(Book).schema


@VIAS
async def test_a_pydantic_field_constraint_is_corrected_naming_the_field(via: str) -> None:
    provider = _replies(via, {**BOOK, "pages": -1}, BOOK)
    agent = Agent(name="a", model="m", output_type=Book, output_via=via)
    result = await Runner(provider=provider).run(agent, "A book?")
    assert result.status is Status.COMPLETED and result.output is not None
    assert result.output.pages == 412
    said = provider.requests[1].messages[-1]["content"]
    assert "pages: -1 is less than the minimum of 0" in said  # at $.pages, or the argument
    assert result.state.turns == 2


@VIAS
async def test_a_pydantic_validators_refusal_is_corrected_naming_the_field(via: str) -> None:
    provider = _replies(via, {"n": 3}, {"n": 4})
    agent = Agent(name="a", model="m", output_type=Even, output_via=via)
    result = await Runner(provider=provider).run(agent, "An even number?")
    assert result.status is Status.COMPLETED and result.output == Even(n=4)
    said = provider.requests[1].messages[-1]["content"]
    assert "the value was refused: at $.n: Value error, must be even" in said


async def test_a_pydantic_refusal_every_time_fails_the_run_not_the_caller() -> None:
    provider = _replies("response_format", {"n": 1}, {"n": 3})
    agent = Agent(name="a", model="m", output_type=Even, output_retries=1)
    result = await Runner(provider=provider).run(agent, "An even number?")
    assert result.status is Status.FAILED and result.output is None
    assert "must be even" in (result.state.reason or "")


def test_a_pydantic_refusal_lists_the_first_errors_and_counts_the_rest() -> None:
    class Four(pydantic.BaseModel):
        a: int
        b: int
        c: int
        d: int

        @pydantic.model_validator(mode="before")
        @classmethod
        def _never(cls, value: Any) -> Any:
            return {k: "x" for k in value}

    checked = output_spec(Four).check({"a": 1, "b": 2, "c": 3, "d": 4})
    assert checked.error is not None
    assert checked.error.startswith("the value was refused: at $.a: Input should be a valid")
    assert "at $.c:" in checked.error and "at $.d:" not in checked.error
    assert checked.error.endswith("; and 1 more")


def test_a_pydantic_schema_is_closed_and_strict_when_all_fields_are_required() -> None:
    class Pair(pydantic.BaseModel):
        a: int
        b: Even

    class Loose(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        a: int

    pair = output_spec(Pair).schema
    assert pair["additionalProperties"] is False
    assert pair["$defs"]["Even"]["additionalProperties"] is False
    assert output_spec(Pair).strict and not output_spec(Book).strict  # born has a default
    assert output_spec(Loose).schema["additionalProperties"] is True
    assert not output_spec(Loose).strict
    assert not output_spec(Book).check({**BOOK, "extra": 1}).value


@VIAS
async def test_nested_pydantic_models_are_validated_at_their_place(via: str) -> None:
    bad = {**BOOK, "author": {"name": "Herbert", "born": "long ago"}}
    good = {**BOOK, "author": {"name": "Herbert", "born": 1920}}
    provider = _replies(via, bad, good)
    agent = Agent(name="a", model="m", output_type=Book, output_via=via)
    result = await Runner(provider=provider).run(agent, "A book?")
    assert result.status is Status.COMPLETED and result.output is not None
    assert result.output.author == Author(name="Herbert", born=1920)
    said = provider.requests[1].messages[-1]["content"]
    assert "author.born: 'long ago' is not valid" in said


@VIAS
async def test_a_recursive_pydantic_model_has_an_object_at_its_root(via: str) -> None:
    answer = {"title": "I", "sections": [{"title": "I.1", "sections": [{"title": "I.1.a"}]}]}
    spec = output_spec(Chapter, via)
    assert spec.schema["type"] == "object" and "$ref" not in spec.schema
    assert "Chapter" in spec.schema["$defs"]  # what the refs inside it name
    assert "1 is not of type 'string'" in str(
        spec.check({"title": "I", "sections": [{"title": 1}]}).error
    )
    agent = Agent(name="a", model="m", output_type=Chapter, output_via=via)
    result = await Runner(provider=_replies(via, answer)).run(agent, "Contents?")
    assert result.status is Status.COMPLETED and result.output is not None
    assert result.output.sections[0].sections[0].title == "I.1.a"


async def test_a_pydantic_root_model_through_the_tool_keeps_its_definitions_at_the_root() -> None:
    spec = output_spec(Shelf, "tool")
    assert spec.wrapped and "$defs" in spec.tool_parameters()
    assert "$defs" not in spec.tool_parameters()["properties"]["value"]
    provider = _replies("tool", {"value": [{"name": "Le Guin"}]})
    agent = Agent(name="a", model="m", output_type=Shelf, output_via="tool")
    result = await Runner(provider=provider).run(agent, "Who?")
    assert result.status is Status.COMPLETED
    assert result.output == Shelf([Author(name="Le Guin")])


def test_a_pydantic_model_with_no_json_schema_is_refused_saying_why() -> None:
    class Callback(pydantic.BaseModel):
        then: Callable[[], int]

    with pytest.raises(ConfigError, match="pydantic model Callback has no JSON schema: ") as caught:
        Agent(name="a", model="m", output_type=Callback)
    assert "CallableSchema" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("bad", [object, Book.model_validate(BOOK), Trip("t", "fun", [])], ids=repr)
def test_what_is_no_output_type_is_refused_naming_the_kinds(bad: Any) -> None:
    kinds = "an attrs class, a dataclass, a TypedDict or a pydantic model"
    with pytest.raises(
        ConfigError, match=rf"output_type must be a JSON schema \(a dict\), {kinds}"
    ):
        Agent(name="a", model="m", output_type=bad)


def test_a_schema_is_derived_from_a_dataclass_as_from_an_attrs_class() -> None:
    schema = schema_of(Trip)
    assert list(schema["properties"]) == ["name", "kind", "stops", "home", "days"]  # init only
    assert schema["required"] == ["name", "kind", "stops"]
    assert schema["properties"]["kind"] == {"enum": ["work", "fun"]}
    place = schema["properties"]["stops"]["items"]
    assert place["properties"]["level"] == {"enum": ["low", "high"]}
    assert place["required"] == ["city"] and place["additionalProperties"] is False
    assert schema["properties"]["home"]["anyOf"][1] == {"type": "null"}
    assert not output_spec(Trip).strict and output_spec(Place).name == "Place"


@VIAS
async def test_a_dataclass_is_built_from_the_answer_nested_ones_too(via: str) -> None:
    provider = _replies(via, {**TRIP, "kind": "rest"}, {**TRIP, "home": {"city": "Bergen"}})
    agent = Agent(name="a", model="m", output_type=Trip, output_via=via)
    result = await Runner(provider=provider).run(agent, "Where to?")
    assert result.status is Status.COMPLETED
    home = Place("Bergen")
    assert result.output == Trip("north", "fun", [Place("Oslo", Level.HIGH)], home=home)
    assert isinstance(result.output, Trip) and result.output.stops[0].level is Level.HIGH
    assert result.state.output == {**TRIP, "home": {"city": "Bergen"}}
    said = provider.requests[1].messages[-1]["content"]
    assert "kind: 'rest' is not one of ['work', 'fun']" in said


@dataclasses.dataclass
class Loop:
    next: Loop | None


def test_a_dataclass_that_contains_itself_is_refused() -> None:
    with pytest.raises(ConfigError, match="Loop: it contains itself"):
        Agent(name="a", model="m", output_type=Loop)


def test_a_dataclass_whose_annotations_do_not_resolve_is_refused() -> None:
    @dataclasses.dataclass
    class Local:
        place: Nowhere  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ConfigError, match=r"the annotations of Local do not resolve: .*Nowhere"):
        Agent(name="a", model="m", output_type=Local)


DATACLASS_ONLY = """
import dataclasses, json, sys
from orchestra import Agent

@dataclasses.dataclass
class Point:
    x: int
    y: int = 0

spec = Agent(name="a", model="m", output_type=Point).output
tool = Agent(name="b", model="m", output_type=Point, output_via="tool").output
refused = spec.check({"x": "3"}).error
built = spec.build(spec.check({"x": 3}).value)
seen = {"built": repr(built), "refused": refused, "pydantic": "pydantic" in sys.modules}
print(json.dumps(seen))
"""


def test_a_dataclass_output_does_not_import_pydantic() -> None:
    # a run's pricing (genai_prices) does import it: this checks the output's own path
    done = subprocess.run(
        [sys.executable, "-c", DATACLASS_ONLY], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "built": "Point(x=3, y=0)",
        "refused": "at $.x: '3' is not of type 'integer'",
        "pydantic": False,
    }
