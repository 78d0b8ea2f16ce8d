"""How a recipe's runs are priced: its prices and the floor of its prompt margin.

Saved in the run's recipe (``--price-in/--price-out``, ``--margin-ratio`` /
``--margin-tokens`` on the command line), so a resume prices and reserves the
same way.
"""

from __future__ import annotations

import attrs

from .._model.margin import Margin
from .._money import Price, PriceTable

__all__ = ["Money"]


@attrs.frozen(kw_only=True)
class Money:
    """How a recipe's runs are priced and how much slack its reservations take."""

    price_in: float | None = None
    price_out: float | None = None
    margin_ratio: float = 0.0
    margin_tokens: int = 0

    def prices(self, *, assumed_is_known: bool) -> PriceTable:
        """The price table: the given prices, else the default (said to be assumed
        unless ``assumed_is_known``, as for the scripted provider)."""
        if self.price_in is None and self.price_out is None:
            return PriceTable(warn_unknown=not assumed_is_known)
        default = Price()
        price = Price(
            input_per_million=default.input_per_million if self.price_in is None else self.price_in,
            output_per_million=(
                default.output_per_million if self.price_out is None else self.price_out
            ),
        )
        return PriceTable(default=price, warn_unknown=False)

    def margin(self) -> Margin:
        """The floor of the prompt margin."""
        return Margin(ratio=self.margin_ratio, tokens=self.margin_tokens)
