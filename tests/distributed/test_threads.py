"""The clients' retry while the database is away (no database needed)."""

from __future__ import annotations

import pytest

from orchestra import StoreUnreachable
from orchestra.distributed._threads import while_away


class Flaky:
    """Fails ``failures`` times as an unreachable database would, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnreachable(f"database away ({self.calls})")
        return "answer"


def test_a_call_is_tried_again_until_the_database_answers_and_the_outage_is_said_once():
    told: list[str] = []
    flaky = Flaky(failures=3)
    assert while_away(flaky, patience_s=60, poll_s=0, on_away=lambda e: told.append(str(e))) == (
        "answer"
    )
    assert flaky.calls == 4
    assert told == ["database away (1)"]


def test_an_outage_past_the_patience_is_raised():
    told: list[str] = []
    flaky = Flaky(failures=10)
    with pytest.raises(StoreUnreachable, match="database away"):
        while_away(flaky, patience_s=0, poll_s=0, on_away=lambda e: told.append(str(e)))
    assert flaky.calls == 1
    assert told == ["database away (1)"]


def test_other_errors_are_not_retried():
    def broken() -> str:
        raise ValueError("not an outage")

    with pytest.raises(ValueError, match="not an outage"):
        while_away(broken, patience_s=60, poll_s=0)
