"""How much more than our own count to reserve for a prompt.

We count prompts with o200k_base; a server counts with its own tokenizer and
chat template (llama.cpp adds about 167 tokens of template text to a first
turn with four tools, and about 22 per tool round trip). The budget gate
reserves ``Margin.apply(ours, messages)`` prompt tokens, so the zero-overshoot
bound holds as long as the server's count stays within that.

:class:`Calibration` learns the margin per (provider, model) pair:

* before the first reply of a pair it uses :data:`FIRST_MARGIN`, twice our
  count plus 256 tokens (a server counting 60 % more, or adding a long chat
  template, is still covered);
* after each reply it keeps the largest gap seen between the server's prompt
  count and ours, both as a ratio of our count and per message, and from
  then on reserves our count plus the larger of the two extrapolations, plus
  :data:`PAD` tokens. Each of the two covers every prompt seen so far; taking
  the larger also covers a gap that grows with the prompt (a ratio) and one
  that grows with the number of messages (a template).

A fixed floor (``Runner(prompt_margin=Margin(...))``) is combined with the
learnt margin by taking the larger of each field.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import attrs

from .._exceptions import ConfigError
from .provider import endpoint_of

__all__ = ["FIRST_MARGIN", "PAD", "Calibration", "Margin", "provider_key"]

PAD = 8
"""Tokens added to a calibrated margin (rounding, a short extra message)."""


def _not_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(f"Margin.{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class Margin:
    """Slack added to our prompt count when reserving budget.

    The prompt reserved is ``ours + max(ceil(ours * ratio), ceil(messages *
    per_message)) + tokens``.
    """

    ratio: float = attrs.field(default=0.0, validator=_not_negative)
    per_message: float = attrs.field(default=0.0, validator=_not_negative)
    tokens: int = attrs.field(default=0, validator=_not_negative)

    def apply(self, prompt_tokens: int, messages: int = 0) -> int:
        """The prompt size to reserve for."""
        slack = max(math.ceil(prompt_tokens * self.ratio), math.ceil(messages * self.per_message))
        return prompt_tokens + slack + self.tokens

    def widened(self, other: Margin) -> Margin:
        """The larger of ``self`` and ``other``, field by field."""
        return Margin(
            ratio=max(self.ratio, other.ratio),
            per_message=max(self.per_message, other.per_message),
            tokens=max(self.tokens, other.tokens),
        )


FIRST_MARGIN = Margin(ratio=1.0, tokens=256)
"""The margin before a (provider, model) pair has replied once."""


def provider_key(provider: object) -> Hashable:
    """What identifies a provider for calibration: its base URL, else the object."""
    url = endpoint_of(provider)
    return url if url is not None else id(provider)


@attrs.define(kw_only=True, eq=False)
class Calibration:
    """The largest prompt-count gaps seen, per (provider, model); one per runner."""

    first: Margin = FIRST_MARGIN
    _learnt: dict[tuple[Hashable, str], Margin] = attrs.field(factory=dict, init=False)

    def margin(self, provider: Hashable, model: str) -> Margin:
        """The margin to reserve with for the next call to this pair."""
        return self._learnt.get((provider, model), self.first)

    def observe(
        self, provider: Hashable, model: str, *, ours: int, theirs: int, messages: int
    ) -> None:
        """Learn from one reply: the server counted ``theirs`` for a prompt we counted ``ours``."""
        gap = max(theirs - ours, 0)
        seen = Margin(ratio=gap / max(ours, 1), per_message=gap / max(messages, 1), tokens=PAD)
        key = (provider, model)
        known = self._learnt.get(key)
        self._learnt[key] = seen if known is None else known.widened(seen)
