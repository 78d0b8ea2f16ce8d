"""Offline o200k_base and incremental prompt counting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestra._tokens import MessageCounter, count_prompt, count_text, encoding


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
