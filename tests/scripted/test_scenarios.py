"""The scripted provider's pure logic: replies, scenarios, limits and refusals."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra._model.tokens import count_completion, count_prompt, count_text
from orchestra._scripted.scenarios import CACHE_BLOCK, REASONING_TOKENS
from orchestra.testing import SANDBOX_FILES, SCENARIOS, ScriptError, make_sandbox, reply

PLAN_ANSWER = "errors.log mentions a timeout: worker 7 timed out after 30000 ms."
STOPPED = "research stopped: budget_exceeded after 4 turns, spent $0.0031"
SYSTEM = (
    "You are an operations assistant working in a small sandbox directory. "
    "Use the tools to look at the files before you answer, and answer in one or two sentences."
)


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    properties = {p: {"type": kind} for p, kind in params.items()}
    schema = {"type": "object", "properties": properties, "required": list(params)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


TOOLS = [
    _tool("list_files", "List the files in the working directory, one name per line."),
    _tool("read_file", "Read a text file from the working directory.", path="string"),
    _tool(
        "delete_file",
        "Delete a file from the working directory (a human must approve).",
        path="string",
    ),
    _tool(
        "scan_archive",
        "Scan the log archive for a pattern (slow).",
        query="string",
        seconds="number",
    ),
    _tool("research", "Ask a researcher agent a question; returns its answer.", question="string"),
]

ToolFn = Callable[[str, Mapping[str, Any]], str]


class Sandbox:
    """Fake tools over SANDBOX_FILES; ``research`` runs the researcher scenario recursively."""

    def __init__(self, *, deleted: str = "Deleted access.log.", depth: int = 0) -> None:
        self.deleted = deleted
        self.depth = depth
        self.deepest = depth
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, args: Mapping[str, Any]) -> str:
        self.calls.append((name, dict(args)))
        if name == "list_files":
            return "\n".join(sorted(SANDBOX_FILES))
        if name == "read_file":
            return self._read(args["path"])
        if name == "delete_file":
            return self.deleted
        if name == "scan_archive":
            return f"Scanned 3000 archived files for {args['query']!r}: 1 match in errors.log."
        return self._research(args["question"])

    def _read(self, path: str) -> str:
        if path in SANDBOX_FILES:
            return SANDBOX_FILES[path]
        return f"error: no such file: {path}. Call list_files to see what exists."

    def _research(self, question: str) -> str:
        if "[runaway]" in question:
            return STOPPED
        child = Sandbox(depth=self.depth + 1)
        messages = drive("researcher", question, child)
        self.deepest = max(self.deepest, child.deepest)
        return str(messages[-1]["content"])


def drive(
    model: str, question: str, tools: ToolFn | None = None, turns: int = 10
) -> list[dict[str, Any]]:
    """Run a conversation as a client would, until prose or ``turns`` replies."""
    tools = tools or Sandbox()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(turns):
        message = reply({"model": model, "messages": messages, "tools": TOOLS})["choices"][0][
            "message"
        ]
        messages.append(message)
        if not message.get("tool_calls"):
            break
        messages.extend(_run_calls(message["tool_calls"], tools))
    return messages


def _run_calls(calls: list[dict[str, Any]], tools: ToolFn) -> list[dict[str, Any]]:
    return [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": tools(call["function"]["name"], json.loads(call["function"]["arguments"])),
        }
        for call in calls
    ]


def tool_calls(messages: list[dict[str, Any]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """Each assistant message's tool calls, as (name, arguments) pairs."""
    return [
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
        for m in messages
        if m["role"] == "assistant" and m.get("tool_calls")
    ]


def final(messages: list[dict[str, Any]]) -> str:
    assert messages[-1]["role"] == "assistant"
    assert messages[-1].get("tool_calls") is None
    return str(messages[-1]["content"])


def request(model: str = "plan", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


# -- shape ---------------------------------------------------------------------------------


PLAIN = sorted(name for name, scenario in SCENARIOS.items() if not scenario.reasoning)
"""The scenarios of a model that does not reason (``reasoning`` is tested on its own)."""


@pytest.mark.parametrize("model", PLAIN)
def test_every_scenario_replies_with_a_chat_completion(model: str) -> None:
    messages = drive("plan", "go", turns=0)
    response = reply({"model": model, "messages": messages, "tools": TOOLS})
    (choice,) = response["choices"]
    message = choice["message"]
    assert response["id"].startswith("chatcmpl-")
    assert (response["object"], response["created"], response["model"]) == (
        "chat.completion",
        0,
        model,
    )
    assert choice["index"] == 0
    assert message["role"] == "assistant"
    assert choice["finish_reason"] == ("tool_calls" if message.get("tool_calls") else "stop")
    assert response["usage"] == {
        "prompt_tokens": count_prompt(messages, TOOLS),
        "completion_tokens": count_completion(message),
        "total_tokens": count_prompt(messages, TOOLS) + count_completion(message),
    }


@pytest.mark.parametrize("model", sorted(SCENARIOS))
def test_scenarios_have_a_one_line_description(model: str) -> None:
    scenario = SCENARIOS[model]
    assert scenario.name == model
    assert scenario.description.strip()
    assert "\n" not in scenario.description


def test_tool_call_ids_are_turn_and_index_and_arguments_are_compact() -> None:
    messages = drive("research", "go")
    (first,) = (m for m in messages if m.get("tool_calls"))
    assert [c["id"] for c in first["tool_calls"]] == ["call_0_0", "call_0_1", "call_0_2"]
    assert all(c["type"] == "function" for c in first["tool_calls"])
    arguments = first["tool_calls"][0]["function"]["arguments"]
    assert arguments == json.dumps(json.loads(arguments), separators=(",", ":"))
    assert first["content"] is None
    later = drive("plan", "go")[4]
    assert later["tool_calls"][0]["id"] == "call_1_0"


def test_reply_is_a_pure_function_of_the_request() -> None:
    messages = drive("plan", "go", turns=2)
    assert reply({"model": "plan", "messages": messages}) == reply(
        {"model": "plan", "messages": [dict(m) for m in messages]}
    )
    ids = {reply(request(m))["id"] for m in SCENARIOS} | {reply(request(max_tokens=5))["id"]}
    assert len(ids) == len(SCENARIOS) + 1


# -- scenarios ---------------------------------------------------------------------------


def test_plan_lists_then_reads_errors_log_then_answers() -> None:
    messages = drive("plan", "What went wrong last night?")
    assert tool_calls(messages) == [[("list_files", {})], [("read_file", {"path": "errors.log"})]]
    assert final(messages) == PLAN_ANSWER


def test_every_script_keeps_its_final_answer_after_it_ends() -> None:
    messages = drive("plan", "go")
    messages += [{"role": "user", "content": "and?"}, {"role": "assistant", "content": "..."}]
    assert reply({"model": "plan", "messages": messages})["choices"][0]["message"] == {
        "role": "assistant",
        "content": PLAN_ANSWER,
    }


CYCLE = [[("read_file", {"path": name})] for name in ("access.log", "errors.log", "notes.txt")]


def test_runaway_reads_a_file_every_turn_never_the_same_twice_and_never_answers() -> None:
    messages = drive("runaway", "Summarise the notes.", turns=30)
    assert tool_calls(messages) == CYCLE * 10


def test_stuck_reads_notes_every_turn_and_never_answers() -> None:
    messages = drive("stuck", "Summarise the notes.", turns=30)
    assert tool_calls(messages) == [[("read_file", {"path": "notes.txt"})]] * 30


def input_tokens(turns: int) -> int:
    """Total prompt tokens of a runaway run of ``turns`` model calls, as a client sends them."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summarise the notes in notes.txt."},
    ]
    total = 0
    for _ in range(turns):
        response = reply({"model": "runaway", "messages": messages, "tools": TOOLS})
        total += response["usage"]["prompt_tokens"]
        messages.append(response["choices"][0]["message"])
        messages.extend(_run_calls(messages[-1]["tool_calls"], Sandbox()))
    return total


def test_runaway_prompts_keep_growing_superlinearly() -> None:
    ratio = input_tokens(100) / input_tokens(50)
    assert ratio > 3


def test_recover_follows_the_hint_to_list_files() -> None:
    messages = drive("recover", "What went wrong?")
    assert tool_calls(messages) == [
        [("read_file", {"path": "timeout.log"})],
        [("list_files", {})],
        [("read_file", {"path": "errors.log"})],
    ]
    assert final(messages) == PLAN_ANSWER


def test_recover_gives_up_politely_without_a_hint() -> None:
    def opaque(name: str, args: Mapping[str, Any]) -> str:
        return "error: the tool failed"

    messages = drive("recover", "What went wrong?", opaque)
    assert tool_calls(messages) == [[("read_file", {"path": "timeout.log"})]]
    assert final(messages) == (
        "I could not find the log I needed, so I cannot tell what went wrong."
    )


def test_permanent_asks_for_the_forbidden_file_every_turn() -> None:
    messages = drive("permanent", "Read the payroll.", turns=5)
    assert tool_calls(messages) == [[("read_file", {"path": "../../var/secrets/payroll.db"})]] * 5


def test_repeat_makes_the_same_call_twice_in_a_row() -> None:
    messages = drive("repeat", "What went wrong?")
    assert tool_calls(messages) == [[("read_file", {"path": "errors.log"})]] * 2
    assert final(messages) == PLAN_ANSWER


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ("Deleted access.log.", "Deleted access.log to free space."),
        ("", "Deleted access.log to free space."),
        (
            "rejected by a human: keep the logs until the review",
            "I did not delete access.log; nothing was deleted. "
            "(rejected by a human: keep the logs until the review)",
        ),
    ],
)
def test_destructive_reports_what_the_delete_said(outcome: str, expected: str) -> None:
    messages = drive("destructive", "Free some space.", Sandbox(deleted=outcome))
    assert tool_calls(messages) == [[("list_files", {})], [("delete_file", {"path": "access.log"})]]
    assert final(messages) == expected


def test_slow_scans_the_archive_then_quotes_it() -> None:
    messages = drive("slow", "Search the archive.")
    assert tool_calls(messages) == [[("scan_archive", {"query": "timeout", "seconds": 3.0})]]
    assert "1 match in errors.log" in final(messages)


def test_research_asks_three_questions_at_once_and_combines_the_answers() -> None:
    sandbox = Sandbox()
    messages = drive("research", "Investigate.", sandbox)
    (calls,) = tool_calls(messages)
    questions = [args["question"] for name, args in calls]
    assert [name for name, _ in calls] == ["research"] * 3
    files = ["errors.log", "access.log", "notes.txt"]
    assert all(f in q for f, q in zip(files, questions, strict=True))
    answer = final(messages)
    assert answer.startswith("Findings: 1) errors.log says: ")
    assert "worker 7 timed out" in answer
    assert "2) access.log says: " in answer
    assert "504" in answer
    assert "3) notes.txt says: " in answer


def test_research_runaway_combines_a_stopped_child_with_a_normal_one() -> None:
    messages = drive("research_runaway", "Investigate.")
    (calls,) = tool_calls(messages)
    assert len(calls) == 2
    assert "[runaway]" in calls[0][1]["question"]
    assert "[runaway]" not in calls[1][1]["question"]
    assert final(messages).startswith(f"Findings: 1) {STOPPED} 2) errors.log says: ")


def test_deep_delegates_three_levels_below_the_root() -> None:
    sandbox = Sandbox()
    messages = drive("deep", "Investigate deeply.", sandbox)
    assert sandbox.deepest == 3
    assert final(messages).startswith("Deep findings: depth 1: depth 2: errors.log says:")


@pytest.mark.parametrize(("question", "children"), [("Scan.", 3), ("Scan, children=5.", 5)])
def test_slow_tree_starts_n_slow_researchers(question: str, children: int) -> None:
    messages = drive("slow_tree", question)
    (calls,) = tool_calls(messages)
    expected = [("research", {"question": f"[slow] archive {i}"}) for i in range(1, children + 1)]
    assert calls == expected
    assert final(messages).count("Scanned 3000 archived files") == children


def test_researcher_reads_the_file_its_question_names() -> None:
    messages = drive("researcher", "Which requests in access.log failed?")
    assert tool_calls(messages)[1] == [("read_file", {"path": "access.log"})]
    assert final(messages) == "access.log says: 10.0.0.9 GET /jobs/7 504 30001ms."


def test_researcher_defaults_to_errors_log() -> None:
    messages = drive("researcher", "What happened?")
    assert final(messages) == (
        "errors.log says: 2026-11-30T04:12:09Z ERROR worker 7 timed out after 30000 ms."
    )


def test_researcher_runaway_and_slow_modes() -> None:
    runaway = drive("researcher", "[runaway] Summarise.", turns=9)
    assert tool_calls(runaway) == CYCLE * 3
    slow = drive("researcher", "[slow] archive 2")
    assert tool_calls(slow) == [[("scan_archive", {"query": "[slow] archive 2", "seconds": 3.0})]]
    assert final(slow).startswith("The archive scan found: Scanned 3000")


def test_researcher_at_depth_three_does_the_work_itself() -> None:
    messages = drive("researcher", "[depth 3] What does errors.log say?")
    assert [c[0][0] for c in tool_calls(messages)] == ["list_files", "read_file"]


# -- totality ----------------------------------------------------------------------------

_text = st.text(max_size=40)
_call = st.fixed_dictionaries(
    {
        "id": _text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": _text, "arguments": _text}),
    }
)
_message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "developer"]),
            "content": st.one_of(_text, st.none()),
        }
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.one_of(_text, st.none())},
        optional={"tool_calls": st.lists(_call, max_size=3)},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "content": _text,
            "tool_call_id": st.one_of(st.sampled_from(["call_0_0", "call_1_0"]), _text),
        }
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": _text}), max_size=2
            ),
        }
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(sorted(SCENARIOS)), messages=st.lists(_message, min_size=1, max_size=8)
)
def test_any_conversation_gets_a_reply(model: str, messages: list[dict[str, Any]]) -> None:
    message = reply({"model": model, "messages": messages})["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str) or message["tool_calls"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_field = st.sampled_from(
    ["model", "messages", "tools", "max_tokens", "max_completion_tokens", "stream"]
)


@settings(max_examples=500, deadline=None)
@given(body=st.dictionaries(_field, _json) | _json, model=st.sampled_from([*SCENARIOS, "x"]))
def test_any_json_body_is_a_reply_or_a_script_error(body: Any, model: str) -> None:
    if isinstance(body, dict) and "model" not in body:
        body["model"] = model
    try:
        response = reply(body)
    except ScriptError as exc:
        error = exc
    else:
        assert response["object"] == "chat.completion"
        return
    assert error.status in {400, 404}
    assert error.body() == {
        "error": {"message": error.message, "type": "invalid_request_error", "code": error.code}
    }


# -- refusals ----------------------------------------------------------------------------


def _refusal(body: Any) -> tuple[int, str]:
    with pytest.raises(ScriptError) as info:
        reply(body)
    return info.value.status, info.value.code


def test_unknown_model_is_a_404_model_not_found() -> None:
    assert _refusal(request("gpt-7")) == (404, "model_not_found")


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"messages": [{"role": "user", "content": "go"}]},
        {"model": "plan"},
        {"model": "plan", "messages": []},
        {"model": "plan", "messages": "hello"},
        {"model": "plan", "messages": ["hello"]},
        {"model": "plan", "messages": [{"content": "hello"}]},
        {"model": "plan", "messages": [{"role": "robot", "content": "hello"}]},
        {"model": "plan", "messages": [{"role": ["user"], "content": "hello"}]},
        {"model": "plan", "messages": [{"role": "user", "content": 5}]},
        {"model": "plan", "messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]},
        {"model": "plan", "messages": [{"role": "assistant", "tool_calls": "x"}]},
        request(tools={"name": "x"}),
        request(stream="yes"),
    ],
)
def test_malformed_requests_are_400s(body: Any) -> None:
    assert _refusal(body)[0] == 400


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "5"])
@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_below_one_or_not_an_integer_is_a_400(key: str, limit: Any) -> None:
    assert _refusal(request(**{key: limit})) == (400, "invalid_max_tokens")


# -- max_tokens --------------------------------------------------------------------------


def test_max_tokens_truncates_prose_to_exactly_the_limit() -> None:
    messages = drive("plan", "go", turns=2)
    response = reply({"model": "plan", "messages": messages, "max_tokens": 7})
    (choice,) = response["choices"]
    assert choice["finish_reason"] == "length"
    assert count_text(choice["message"]["content"]) == 7
    assert PLAN_ANSWER.startswith(choice["message"]["content"])
    assert response["usage"]["completion_tokens"] == 7


def test_max_tokens_drops_tool_calls_and_renders_them_as_text() -> None:
    response = reply(request("research", max_completion_tokens=12))
    (choice,) = response["choices"]
    assert choice["finish_reason"] == "length"
    assert "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith('[{"name":"research","arguments":{')
    assert response["usage"]["completion_tokens"] == 12


def test_the_smaller_of_both_limits_applies() -> None:
    response = reply(request("research", max_tokens=30, max_completion_tokens=5))
    assert response["usage"]["completion_tokens"] == 5


def test_a_reply_within_the_limit_is_untouched() -> None:
    assert reply(request(max_tokens=1000))["choices"][0]["finish_reason"] == "tool_calls"


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(PLAIN), turns=st.integers(0, 3), limit=st.integers(1, 60))
def test_completion_tokens_never_exceed_max_tokens(model: str, turns: int, limit: int) -> None:
    messages = drive(model, "go [depth 1] children=2", turns=turns)
    response = reply({"model": model, "messages": messages, "max_tokens": limit})
    (choice,) = response["choices"]
    usage = response["usage"]["completion_tokens"]
    assert usage == count_completion(choice["message"]) <= limit
    unclipped = reply({"model": model, "messages": messages})["usage"]["completion_tokens"]
    assert (choice["finish_reason"] == "length") == (unclipped > limit)


# -- the sandbox -------------------------------------------------------------------------


def test_sandbox_files_are_small_and_say_what_the_scenarios_expect() -> None:
    assert set(SANDBOX_FILES) == {"errors.log", "access.log", "notes.txt"}
    assert all(count_text(text) < 80 for text in SANDBOX_FILES.values())
    assert "ERROR worker 7 timed out after 30000 ms" in SANDBOX_FILES["errors.log"]
    assert 40 <= len(SANDBOX_FILES["notes.txt"].split()) <= 60


def test_make_sandbox_writes_the_files(tmp_path: Path) -> None:
    root = make_sandbox(tmp_path / "box")
    assert root == tmp_path / "box"
    assert {p.name: p.read_text(encoding="utf-8") for p in root.iterdir()} == dict(SANDBOX_FILES)


# -- a reasoning model ---------------------------------------------------------------------


def test_the_reasoning_model_refuses_max_tokens_as_openai_s_do() -> None:
    with pytest.raises(ScriptError) as caught:
        reply(request("reasoning", max_tokens=100))
    assert caught.value.status == 400
    assert "Use 'max_completion_tokens' instead" in str(caught.value)


@settings(max_examples=100, deadline=None)
@given(turns=st.integers(0, 3), limit=st.integers(1, 700))
def test_reasoning_counts_against_max_completion_tokens(turns: int, limit: int) -> None:
    messages = drive("reasoning", "go", turns=turns)
    response = reply({"model": "reasoning", "messages": messages, "max_completion_tokens": limit})
    usage, (choice,) = response["usage"], response["choices"]
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert reasoning == min(REASONING_TOKENS, limit)
    assert reasoning <= usage["completion_tokens"] <= limit  # thinking is output, within the cap
    if limit <= REASONING_TOKENS:  # thinking filled the cap: nothing left to say
        assert choice["message"]["content"] == "" and choice["finish_reason"] == "length"
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached % CACHE_BLOCK == 0 and cached <= usage["prompt_tokens"]
