"""The client's merge of a followed tree's live and saved events (no database).

Each event once, each run's events in their order, text deltas where they
were streamed, depths from the live batches or the lineage.
"""

from __future__ import annotations

from typing import Any

import orjson

from orchestra import Event
from orchestra.distributed._merge import HOLD_S, TreeMerge
from orchestra.distributed._notify import PAYLOAD_MAX, payloads

ROOT, CHILD = "run_root", "run_child"


def rec(type_: str, run_id: str = ROOT, at: float = 1.0, **data: Any) -> dict[str, Any]:
    parent = None if run_id == ROOT else ROOT
    return {"type": type_, "run_id": run_id, "root_id": ROOT, "parent_id": parent, "at": at, **data}


def delta(text: str, run_id: str = ROOT) -> dict[str, Any]:
    return rec("text_delta", run_id, text=text, tokens=1)


def shown(merge: TreeMerge) -> list[tuple[str, str, int]]:
    return [(e.run_id, e.type, e.depth) for e in merge.take()]


def no_store(run_id: str) -> int:
    raise AssertionError(f"the store was asked for the depth of {run_id}")


def test_live_events_show_at_once_and_their_saved_copies_never() -> None:
    merge = TreeMerge(ROOT, no_store)
    request, turn = rec("model_request"), rec("turn", at=2.0)
    merge.live([(0, request), (0, delta("Hel")), (0, delta("lo")), (0, turn)])
    assert shown(merge) == [
        (ROOT, "model_request", 0),
        (ROOT, "text_delta", 0),
        (ROOT, "text_delta", 0),
        (ROOT, "turn", 0),
    ]
    merge.saved([request, turn], now=10.0)
    merge.release(now=20.0)
    assert shown(merge) == []


def test_a_saved_event_waits_for_the_deltas_still_on_their_way() -> None:
    merge = TreeMerge(ROOT, no_store)
    request, turn = rec("model_request"), rec("turn", at=2.0)
    merge.live([(0, request), (0, delta("Hel"))])
    merge.take()
    merge.saved([request, turn], now=10.0)  # committed before the last live batch came
    merge.release(now=10.0 + HOLD_S / 2)
    assert shown(merge) == []
    merge.live([(0, delta("lo")), (0, turn)])
    assert shown(merge) == [(ROOT, "text_delta", 0), (ROOT, "turn", 0)]
    merge.release(now=99.0)
    assert shown(merge) == []


def test_a_saved_event_whose_live_copy_never_comes_shows_after_the_hold() -> None:
    merge = TreeMerge(ROOT, no_store)
    merge.live([(0, delta("x"))])
    merge.take()
    stopped = rec("run_stopped", status="completed")
    merge.saved([stopped], now=10.0)
    assert merge.next_due() == 10.0 + HOLD_S
    merge.release(now=10.0 + HOLD_S)
    assert shown(merge) == [(ROOT, "run_stopped", 0)]
    assert merge.root_stopped
    merge.live([(0, stopped)])  # late after all: not shown twice
    assert shown(merge) == []


def test_saved_events_of_a_run_not_seen_live_show_at_once_and_once() -> None:
    merge = TreeMerge(ROOT, no_store)
    started = rec("run_started", CHILD)
    merge.saved([rec("run_started"), started], now=1.0)
    assert shown(merge) == [(ROOT, "run_started", 0), (CHILD, "run_started", 1)]
    merge.live([(1, started), (1, delta("a", CHILD))])
    assert shown(merge) == [(CHILD, "text_delta", 1)]


def test_live_events_of_a_lost_step_stay_shown_and_the_retry_is_matched() -> None:
    merge = TreeMerge(ROOT, no_store)
    lost = rec("model_request", at=1.0)
    merge.live([(0, lost)])
    retried = rec("model_request", at=5.0)
    merge.live([(0, retried)])
    merge.take()
    merge.saved([retried], now=6.0)  # the lost step's event was never saved
    merge.release(now=99.0)
    assert shown(merge) == []


def test_held_events_before_a_live_match_show_first_in_their_order() -> None:
    merge = TreeMerge(ROOT, no_store)
    merge.live([(0, delta("x"))])
    merge.take()
    first, second = rec("tool_start", at=2.0), rec("tool_result", at=3.0)
    merge.saved([first, second], now=5.0)
    merge.live([(0, second)])  # the first one's live copy went missing
    assert [e.type for e in merge.take()] == ["tool_start", "tool_result"]


def test_depth_of_a_run_with_no_event_of_its_parent_comes_from_the_store() -> None:
    asked: list[str] = []

    def depth_of(run_id: str) -> int:
        asked.append(run_id)
        return 2

    merge = TreeMerge(ROOT, depth_of)
    grandchild = rec("run_started", "run_grandchild") | {"parent_id": CHILD}
    merge.saved([grandchild], now=1.0)
    assert shown(merge) == [("run_grandchild", "run_started", 2)]
    assert asked == ["run_grandchild"]


def test_payloads_stay_under_the_limit_and_split_long_deltas() -> None:
    events = [
        Event(
            type="text_delta",
            run_id=ROOT,
            root_id=ROOT,
            parent_id=None,
            at=1.0,
            data={"text": "é" * 9000, "tokens": 7},
            depth=0,
        ),
        *[
            Event(
                type="tool_start",
                run_id=ROOT,
                root_id=ROOT,
                parent_id=None,
                at=2.0 + i,
                data={"tool": "read_file", "args": {"path": "x" * 300}},
            )
            for i in range(40)
        ],
        Event(
            type="turn",
            run_id=ROOT,
            root_id=ROOT,
            parent_id=None,
            at=99.0,
            data={"text": "y" * 9000},
        ),
    ]
    sent = list(payloads(events, "w1"))
    assert all(len(p.encode()) <= PAYLOAD_MAX for p in sent)
    entries = [entry for p in sent for entry in orjson.loads(p)["e"]]
    deltas = [r for _, r in entries if r["type"] == "text_delta"]
    assert "".join(r["text"] for r in deltas) == "é" * 9000
    assert sum(r["tokens"] for r in deltas) == 7
    assert [r["type"] for _, r in entries if r["type"] != "text_delta"] == ["tool_start"] * 40
    # the oversized turn is left to the table


def test_deltas_of_a_live_batch_delayed_past_the_hold_are_dropped_not_misplaced() -> None:
    merge = TreeMerge(ROOT, no_store)
    merge.live([(0, rec("run_started", at=0.5))])  # the run is seen live
    request, turn = rec("model_request", at=1.0), rec("turn", at=3.0)
    merge.saved([request, turn], now=10.0)  # the call's batch is late (a loaded machine)
    merge.release(10.0 + HOLD_S)
    late = rec("text_delta", at=2.0, text="Hel", tokens=1)
    merge.live([(0, request), (0, late), (0, turn)])
    after = rec("text_delta", at=4.0, text="next", tokens=1)  # the next call's: in time
    merge.live([(0, rec("model_request", at=3.5)), (0, after)])
    assert [t for _, t, _ in shown(merge)] == [
        "run_started",
        "model_request",
        "turn",
        "model_request",
        "text_delta",
    ]


def test_once_a_live_copy_came_too_late_saved_events_wait_longer() -> None:
    merge = TreeMerge(ROOT, no_store)
    merge.live([(0, rec("run_started", at=0.5))])
    first, turn = rec("model_request", at=1.0), rec("turn", at=3.0)
    merge.saved([first, turn], now=10.0)
    merge.release(10.0 + HOLD_S)  # shown without their live copies
    merge.live([(0, first), (0, turn)])  # which come, too late
    assert merge.hold_s == 2 * HOLD_S
    second, reply = rec("model_request", at=4.0), rec("turn", at=6.0)
    merge.saved([second, reply], now=20.0)
    merge.release(20.0 + HOLD_S)  # within the longer hold: still waiting
    merge.live([(0, second), (0, rec("text_delta", at=5.0, text="x", tokens=1)), (0, reply)])
    types = [t for _, t, _ in shown(merge)]
    assert types[-3:] == ["model_request", "text_delta", "turn"]
