"""How a recipe's runs are priced: its prices and the floor of its prompt margin.

Saved in the run's recipe (``--price-in/--price-out``, ``--margin-ratio`` /
``--margin-tokens`` on the command line), so a resume prices and reserves the
same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._money import Price

if TYPE_CHECKING:  # imported where used: `orchestra --help` needs neither
    from .._model.margin import Margin
    from .._prices import PriceTable

__all__ = ["SCRIPTED_PRICE", "Money"]

SCRIPTED_PRICE = Price(cached_input_per_million=0.5, source="the scripted provider's")
"""What the demos' scripted provider charges: the default rates, cached input at $0.50."""


@attrs.frozen(kw_only=True)
class Money:
    """How a recipe's runs are priced and how much slack its reservations take."""

    price_in: float | None = None
    price_out: float | None = None
    price_cached: float | None = None
    margin_ratio: float = 0.0
    margin_tokens: int = 0

    def prices(self, *, assumed_is_known: bool) -> PriceTable:
        """The price table: the given prices, else the default (said to be assumed
        unless ``assumed_is_known``, as for the scripted provider)."""
        from .._prices import PriceTable

        if self.price_in is None and self.price_out is None and self.price_cached is None:
            if assumed_is_known:  # the scripted provider: its prices are the default
                return PriceTable(default=SCRIPTED_PRICE, published=False, warn_unknown=False)
            return PriceTable()
        default = Price()
        price = Price(
            input_per_million=default.input_per_million if self.price_in is None else self.price_in,
            output_per_million=(
                default.output_per_million if self.price_out is None else self.price_out
            ),
            cached_input_per_million=self.price_cached,
            source="given (--price-in/--price-out)",
        )
        return PriceTable(default=price, published=False, warn_unknown=False)

    def margin(self) -> Margin:
        """The floor of the prompt margin."""
        from .._model.margin import Margin

        return Margin(ratio=self.margin_ratio, tokens=self.margin_tokens)
