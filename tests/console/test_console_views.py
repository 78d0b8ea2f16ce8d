"""The console's HTML, without a server: escaping, bars, words."""

from __future__ import annotations

import json

import pytest

from orchestra import Limits, RunState, Status, Usage
from orchestra._result import RunResult
from orchestra.console._events_view import event_words, events_html
from orchestra.console._html import Html, h, join, literal, text
from orchestra.console._page import age
from orchestra.console._reads import rolled_up
from orchestra.console._runs_view import runs_html
from orchestra.console._transcript_view import decision_words, transcript_html
from orchestra.console._tree_view import bar, doing, tree_html

EVIL = '<script>alert("x")</script>'


def hostile_state(**changes: object) -> RunState:
    """A run whose every string field carries markup."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": f"read{EVIL}", "arguments": json.dumps({"path": EVIL})},
    }
    state = RunState(
        run_id=f"run_{EVIL}",
        root_id=f"run_{EVIL}",
        agent=f"agent{EVIL}",
        model="m",
        messages=[
            {"role": "system", "content": EVIL},
            {"role": "user", "content": EVIL},
            {"role": "assistant", "content": EVIL, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": EVIL},
        ],
        status=Status.FAILED,
        reason=EVIL,
    )
    for name, value in changes.items():
        setattr(state, name, value)
    return state


def test_h_escapes_text_and_attributes_but_not_markup() -> None:
    made = h("a", EVIL, h("b", "ok"), href=f'/runs/"{EVIL}', class_="x", hidden=True, title=None)
    assert "<script>" not in made and "&lt;script&gt;" in made
    assert 'href="/runs/&quot;&lt;script&gt;' in made
    assert made.endswith("<b>ok</b></a>") and " hidden" in made and "title" not in made
    assert join([EVIL, 1, None, literal("<i>")]) == text(EVIL) + "1<i>"
    assert isinstance(join(["a"]), Html)


def test_a_hostile_run_is_escaped_everywhere() -> None:
    state = hostile_state()
    event = {"type": EVIL, "run_id": EVIL, "root_id": EVIL, "at": 1.0, EVIL: EVIL}
    pages = [
        tree_html(RunResult(state=state), state.run_id, {}),
        transcript_html(state, [], [event]),
        events_html([event], 1),
        runs_html([state], now=2.0),
    ]
    for made in pages:
        assert "<script>" not in made
        assert "&lt;script&gt;" in made


def test_secrets_are_redacted_from_what_is_shown() -> None:
    state = hostile_state(reason="401 from server: Authorization: Bearer sk-abcdefghijklmnop")
    made = tree_html(RunResult(state=state), state.run_id, {})
    assert "sk-abcdefghijklmnop" not in made and "[REDACTED]" in made


@pytest.mark.parametrize(
    ("used", "limit", "hit", "level", "width"),
    [
        (0.01, 0.05, False, "ok", "20.0"),
        (0.045, 0.05, False, "high", "90.0"),
        (0.039, 0.05, True, "hit", "78.0"),
        (0.09, 0.05, True, "hit", "100.0"),
        (0.01, None, False, "free", None),
    ],
)
def test_a_bar_fills_to_the_share_used_and_says_when_the_limit_was_hit(
    used: float, limit: float | None, hit: bool, level: str, width: str | None
) -> None:
    made = bar("label", used, limit, hit=hit, kind="usd")
    assert f"meter m-usd {level}" in made
    fill = f'<rect width="{width}" height="4" class="fill">'
    assert (fill in made) if width else ('class="fill"' not in made and "no budget" in made)


def test_a_child_stopped_by_its_budget_is_marked_on_its_row() -> None:
    root = RunState(run_id="run_r", root_id="run_r", agent="boss", model="m")
    child = RunState(
        run_id="run_c",
        root_id="run_r",
        parent_id="run_r",
        agent="worker",
        model="m",
        status=Status.BUDGET_EXCEEDED,
        reason="budget: $0.001 left",
        limits=Limits(max_budget_usd=0.005, max_turns=8),
        tree=Usage(cost_pico=3_900_000_000, model_calls=4),
    )
    tree = RunResult(state=root, children=(RunResult(state=child),))
    made = tree_html(tree, "run_r", {})
    row = made[made.index('data-run="run_c"') - 200 :]
    assert "stopped-hard" in row and "hit its budget" in row
    assert "$0.0039 of $0.0050" in row and "4 of 8 calls" in row
    assert "meter m-usd hit" in row and "meter m-turns ok" in row


def test_a_running_run_says_which_tools_it_waits_on() -> None:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "research", "arguments": "{}"}}
        for i in range(3)
    ]
    state = RunState(run_id="r", root_id="r", agent="a", model="m")
    state.messages = [{"role": "assistant", "content": None, "tool_calls": calls}]
    state.results = {"c0": "done"}
    assert doing(state) == "running research (2 calls)"
    state.results["c1"] = "done"
    assert doing(state) == "running research"
    state.messages += [
        {"role": "tool", "tool_call_id": c, "content": "x"} for c in ("c0", "c1", "c2")
    ]
    assert doing(state) == "waiting for the model"
    assert doing(RunState(run_id="r", root_id="r", agent="a", model="m")) == (
        "waiting for the model"
    )


def test_decisions_and_events_in_words() -> None:
    said = decision_words({"decision": "rejected", "done": False, "reason": "keep it"})
    assert said == "rejected by a human; the model is told when the tree resumes (reason: keep it)"
    turn = {
        "type": "turn",
        "turn": 2,
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "call_cost_usd": 0.002,
        "tool_calls": ["read_file"],
    }
    assert event_words(turn) == "turn 2: 1,200+30 tokens, $0.0020; calls read_file"
    odd = {"type": "turn", "run_id": "r", "root_id": "r", "at": 1.0, "turn": "?"}
    assert event_words(odd) == 'turn="?"'  # another shape: its fields as they are


def test_ages_are_short() -> None:
    assert [age(0.0, now) for now in (4.0, 125.0, 7300.0, 200_000.0)] == ["4s", "2m", "2h", "2d"]


def test_a_tree_total_adds_up_the_own_spend_its_runs_saved() -> None:
    spent = Usage(cost_pico=10, model_calls=1)
    root = RunState(run_id="r", root_id="r", agent="a", model="m", own=spent, tree=spent)
    kids = tuple(
        RunResult(
            state=RunState(
                run_id=f"c{i}",
                root_id="r",
                parent_id="r",
                agent="b",
                model="m",
                own=Usage(cost_pico=5, model_calls=2),
            )
        )
        for i in range(2)
    )
    totals = rolled_up(RunResult(state=root, children=kids))  # the root saved before they spent
    assert totals["r"] == Usage(cost_pico=20, model_calls=5)
    assert totals["c1"] == Usage(cost_pico=5, model_calls=2)


def test_a_continued_run_links_the_run_it_continues_and_its_conversation() -> None:
    from orchestra.console._run_view import _continues

    state = hostile_state(continues="run_b", conversation_id="run_a")
    shown = _continues(state)
    assert shown is not None
    assert 'href="/runs/run_b"' in shown and 'href="/runs/run_a"' in shown
    assert _continues(hostile_state()) is None
