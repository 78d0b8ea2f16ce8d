"""How a run shares what it has left among the children one reply starts (a value).

The policy lives on the parent's agent (:attr:`Agent.carving`); the carving
itself is :mod:`orchestra._core.fair`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from ._exceptions import ConfigError

__all__ = ["Carving"]

Split = Literal["equal", "as_left"]


def _split(_c: object, _a: object, value: str) -> None:
    if value not in ("equal", "as_left"):
        raise ConfigError(f"Carving.split must be 'equal' or 'as_left', got {value!r}")


def _weights(_c: object, _a: object, value: Mapping[str, float]) -> None:
    for name, weight in value.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ConfigError(f"Carving.weights[{name!r}] must be a number > 0, got {weight!r}")


def _answer(_c: object, _a: object, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"Carving.answer_tokens must be an integer >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Carving:
    """How a run carves budgets for the children one of its replies starts.

    Attributes:
        split: ``"equal"`` (the default): the children started by one reply
            share what the run can give them, each in proportion to its
            weight, and each is still capped by its own limit; ``"as_left"``:
            each child may use whatever the run has left when it starts
            (the first can take what its siblings needed: a sibling started,
            or waiting for a ``max_concurrent_children`` slot, may then find
            nothing left for its first call).
        weights: a weight per tool name (default 1): ``{"research": 2}``
            gives each ``research`` child twice the share of a weight-1 sibling.
        answer_tokens: output tokens the run keeps for its own answer after
            its children's (with the prompt that answer needs, grown by what
            the children may return): never carved away, whatever the split.

    A child whose share cannot pay one call is not started: its tool call is
    answered "not enough budget left for this child: $X needed, $Y left", and
    its share goes to the siblings after it. A child that ends returns what it
    did not spend to the run at once (its cap was a share, not a hold); with
    children in this process, the siblings still running get it.
    """

    split: Split = attrs.field(default="equal", validator=_split)
    weights: Mapping[str, float] = attrs.field(factory=dict, validator=_weights)
    answer_tokens: int = attrs.field(default=128, validator=_answer)
