"""What a model call costs and how much prompt slack to reserve, for one provider."""

from __future__ import annotations

import attrs

from ._model.margin import Calibration, Margin, provider_key
from ._model.provider import Provider
from ._money import Price
from ._prices import PriceTable

__all__ = ["Pricing"]


@attrs.define(kw_only=True, eq=False)
class Pricing:
    """Prices and prompt margins of the calls a runner makes to ``provider``.

    ``prompt_margin`` is the least slack on our prompt count; ``calibration``
    learns the provider's counts per model (the larger of each field wins).
    """

    provider: Provider
    prices: PriceTable
    prompt_margin: Margin
    calibration: Calibration

    @property
    def endpoint(self) -> str | None:
        """The base URL of the provider, if it has one (it picks published prices)."""
        url = provider_key(self.provider)
        return url if isinstance(url, str) else None

    def price_of(self, model: str) -> Price:
        """What a call of ``model`` costs on this provider."""
        return self.prices.price(model, endpoint=self.endpoint)

    def margin_for(self, model: str) -> Margin:
        """The prompt margin for the next call of ``model``."""
        learnt = self.calibration.margin(provider_key(self.provider), model)
        return learnt.widened(self.prompt_margin)

    def observe_prompt(self, model: str, *, ours: int, theirs: int, messages: int) -> None:
        """Learn how the provider counts ``model``'s prompts (see :class:`Calibration`)."""
        self.calibration.observe(
            provider_key(self.provider), model, ours=ours, theirs=theirs, messages=messages
        )
