"""The in-memory store: copies through JSON, transcripts appended, trees."""

from __future__ import annotations

import pytest

from orchestra import MemoryStore, RunNotFound
from orchestra._state import RunState


def state(run_id: str, root_id: str, created_at: float = 1.0) -> RunState:
    return RunState(
        run_id=run_id,
        root_id=root_id,
        agent="a",
        model="m",
        messages=[{"role": "user", "content": run_id}],
        created_at=created_at,
    )


def test_a_loaded_state_is_a_copy_of_what_was_saved() -> None:
    store, saved = MemoryStore(), state("r", "r")
    store.save(saved)
    saved.messages.append({"role": "assistant", "content": "later"})
    saved.messages[0]["content"] = "changed after the save"
    loaded = store.load("r")
    assert loaded.messages == [{"role": "user", "content": "r"}]
    loaded.messages.append({"role": "user", "content": "x"})
    assert len(store.load("r").messages) == 1


def test_turns_are_appended_and_a_new_transcript_replaces_the_old() -> None:
    store, run = MemoryStore(), state("r", "r")
    for i in range(3):
        run.messages.append({"role": "assistant", "content": str(i)})
        store.save(run)
    assert store.load("r") == run
    fresh = state("r", "r")
    store.save(fresh)
    assert store.load("r").messages == fresh.messages


def test_tree_lists_the_root_first_then_by_creation() -> None:
    store = MemoryStore()
    for s in (state("c2", "root", 3.0), state("root", "root", 5.0), state("c1", "root", 2.0)):
        store.save(s)
    store.save(state("other", "other"))
    assert [s.run_id for s in store.tree("root")] == ["root", "c1", "c2"]
    with pytest.raises(RunNotFound):
        store.tree("nope")
