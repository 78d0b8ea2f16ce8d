"""Money as integers, prices as values.

Costs are kept in integer pico-dollars (1e-12 USD) so that sums over a tree
are exact: a parent's tree cost equals its own cost plus its children's, to
the last digit, however many runs add into it.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ._exceptions import ConfigError

__all__ = ["PICO", "Price", "PriceTable", "from_usd", "to_usd"]

PICO = 10**12


def from_usd(usd: float) -> int:
    """Dollars to pico-dollars (rounded to the nearest)."""
    return round(usd * PICO)


def to_usd(pico: int) -> float:
    """Pico-dollars to dollars."""
    return pico / PICO


def _non_negative(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class Price:
    """USD per million tokens, input and output."""

    input_per_million: float = attrs.field(default=2.0, validator=_non_negative)
    output_per_million: float = attrs.field(default=12.0, validator=_non_negative)

    @property
    def input_pico(self) -> int:
        """Pico-dollars per input token."""
        return round(self.input_per_million * 1_000_000)

    @property
    def output_pico(self) -> int:
        """Pico-dollars per output token."""
        return round(self.output_per_million * 1_000_000)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Cost in pico-dollars of a call with these token counts."""
        return prompt_tokens * self.input_pico + completion_tokens * self.output_pico

    def affordable_completion(self, pico: int, prompt_tokens: int) -> int:
        """How many output tokens ``pico`` pays for once the prompt is paid."""
        left = pico - prompt_tokens * self.input_pico
        if left < 0:
            return -1
        return left // self.output_pico if self.output_pico else 1 << 30


@attrs.frozen(kw_only=True)
class PriceTable:
    """Prices by model name, with a default for models not listed.

    The default is the design's: $2.00 per million input tokens and $12.00 per
    million output tokens.
    """

    default: Price = Price()
    models: Mapping[str, Price] = attrs.field(factory=dict)
    warn_unknown: bool = True
    """Warn (a ``price_warning`` event) when a run's model is priced at the default."""

    def __getitem__(self, model: str) -> Price:
        return self.models.get(model, self.default)

    def warning(self, model: str, *, budgeted: bool) -> str | None:
        """What is doubtful about pricing ``model``, if anything.

        A model with no entry is priced at the default (said, so that nobody
        mistakes an assumed price for a real one); a zero price makes a USD
        budget unable to stop anything (``budgeted``: the run has one).
        """
        price = self[model]
        if budgeted and (price.input_pico == 0 or price.output_pico == 0):
            return (
                f"model {model!r} has a zero price: the USD budget cannot bound its spend; "
                "set a token budget (max_tokens_total) instead"
            )
        if self.warn_unknown and model not in self.models:
            return (
                f"no price for model {model!r}: assuming ${price.input_per_million:.2f} in / "
                f"${price.output_per_million:.2f} out per million tokens"
            )
        return None
