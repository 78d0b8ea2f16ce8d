"""Offline o200k_base and incremental prompt counting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra._model.tokens import (
    PER_MESSAGE,
    MessageCounter,
    count_completion,
    count_message,
    count_prompt,
    count_text,
    count_tool_call,
    encoding,
)


def test_encoding_is_o200k_and_offline():
    assert encoding().name == "o200k_base"
    assert count_text("hello world") == 2


message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=30)}
)


@given(st.lists(st.lists(message, max_size=3), max_size=6))
def test_counter_agrees_with_a_full_count_as_the_transcript_grows(batches):
    counter, transcript = MessageCounter(), []
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    for batch in batches:
        transcript.extend(batch)
        assert counter.count(transcript, tools) == count_prompt(transcript, tools)


def test_counter_recounts_when_history_is_rewritten():
    counter = MessageCounter()
    a, b = {"role": "user", "content": "a"}, {"role": "user", "content": "bbbb bbb"}
    counter.count([a], None)
    assert counter.count([b], None) == count_prompt([b])


tool_call = st.builds(
    lambda call_id, name, arguments: {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    },
    st.text(max_size=10),
    st.text(max_size=20),
    st.text(max_size=60),
)
assistant_message = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": st.none() | st.text(max_size=60)},
    optional={"tool_calls": st.lists(tool_call, max_size=4)},
)


@settings(deadline=None)
@given(assistant_message)
def test_a_reply_costs_the_same_in_the_next_prompt(message):
    role = count_text("assistant")
    assert count_message(message) == PER_MESSAGE + role + count_completion(message)


def test_a_tool_call_has_framing_wherever_it_is_counted():
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    assert count_tool_call(call) == PER_MESSAGE + count_text("read_file") + count_text("{}")
    message = {"role": "assistant", "content": None, "tool_calls": [call, call]}
    assert count_completion(message) == 2 * count_tool_call(call)
    assert count_message(message) == PER_MESSAGE + count_text("assistant") + 2 * count_tool_call(
        call
    )
