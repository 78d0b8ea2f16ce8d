"""What a model costs: the prices a user gives, else the published ones, else
an assumed default (said, so that nobody takes it for a real price).

Published prices come from ``genai-prices`` (its price data ships inside the
package: no network). It is imported the first time a run needs the price of
a model nobody gave a price for, never by commands that call no model; a
lookup is remembered per (model, endpoint). Its prices become :class:`Price`
values here, at the boundary: input, cached input and output per million
tokens, with their tiers by prompt size.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import attrs

from ._money import Price, PriceTier

__all__ = ["PriceTable", "published_price"]

_FIELDS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")


@attrs.frozen(kw_only=True)
class PriceTable:
    """Prices by model name: those given, else published ones, else ``default``.

    The default is the design's: $2.00 per million input tokens and $12.00 per
    million output tokens. ``published=False`` never looks a price up (a
    scripted provider whose prices are the default).
    """

    default: Price = Price()
    models: Mapping[str, Price] = attrs.field(factory=dict)
    warn_unknown: bool = True
    """Warn (a ``price_warning`` event) when a run's model is priced at the default."""
    published: bool = True
    """Look up the published price of a model that ``models`` does not list."""

    def __getitem__(self, model: str) -> Price:
        return self.price(model)

    def price(self, model: str, *, endpoint: str | None = None) -> Price:
        """The price of ``model`` (served at ``endpoint``, a base URL, which picks
        the provider where several sell the same model; a model written
        ``PROVIDER:MODEL`` names its provider itself)."""
        given = self.models.get(model)
        if given is not None:
            return given
        found = published_price(model, endpoint) if self.published else None
        return self.default if found is None else found

    def warning(self, model: str, *, budgeted: bool, endpoint: str | None = None) -> str | None:
        """What is doubtful about pricing ``model``, if anything.

        A model with no price given or published is priced at the default
        (said, so that nobody mistakes an assumed price for a real one); a zero
        price makes a USD budget unable to stop anything (``budgeted``: the run
        has one).
        """
        price = self.price(model, endpoint=endpoint)
        if budgeted and (price.input_pico == 0 or price.output_pico == 0):
            return (
                f"model {model!r} has a zero price: the USD budget cannot bound its spend; "
                "set a token budget (max_tokens_total) instead"
            )
        if self.warn_unknown and price is self.default and model not in self.models:
            return (
                f"no price for model {model!r}: assuming ${price.input_per_million:.2f} in / "
                f"${price.output_per_million:.2f} out per million tokens"
            )
        return None


@functools.lru_cache(maxsize=512)
def published_price(model: str, endpoint: str | None = None) -> Price | None:
    """The published price of ``model`` (at ``endpoint``, if its provider is
    known by its URL; else of whichever provider sells it), or None when
    unknown or when ``genai-prices`` is not installed."""
    from datetime import UTC, datetime

    try:
        from genai_prices import __version__, data_snapshot
    except ImportError:
        return None
    snapshot = data_snapshot.get_snapshot()
    named, colon, ref = model.partition(":")
    provider_id, model = (named, ref) if colon else (None, model)
    for url in (endpoint, None) if endpoint and not colon else (None,):
        try:
            provider, info = snapshot.find_provider_model(model, None, provider_id, url)
        except LookupError:
            continue
        prices = info.get_prices(datetime.now(UTC))
        source = f"genai-prices {__version__}: {provider.id} {info.id}"
        return _price(prices, source)
    return None


def _price(prices: Any, source: str) -> Price | None:
    """A genai-prices ``ModelPrice`` as a :class:`Price`; None without token rates."""
    rates = {name: getattr(prices, name, None) for name in _FIELDS}
    if rates["input_mtok"] is None or rates["output_mtok"] is None:
        return None
    starts = sorted({t.start for r in rates.values() for t in getattr(r, "tiers", ())})
    tiers = tuple(_tier(rates, start) for start in starts)
    base = _tier(rates, 0)
    return Price(
        input_per_million=base.input_per_million,
        output_per_million=base.output_per_million,
        cached_input_per_million=base.cached_input_per_million,
        cache_write_per_million=base.cache_write_per_million,
        tiers=tiers,
        source=source,
    )


def _tier(rates: Mapping[str, Any], start: int) -> PriceTier:
    from decimal import Decimal  # loaded with genai-prices already

    def at(name: str) -> float | None:
        rate = rates[name]
        if rate is None:
            return None
        if isinstance(rate, Decimal | int | float):  # a flat rate
            return float(rate)
        reached = [t.price for t in rate.tiers if t.start <= start]
        return float(reached[-1] if reached else rate.base)

    return PriceTier(
        from_prompt_tokens=start,
        input_per_million=at("input_mtok") or 0.0,
        output_per_million=at("output_mtok") or 0.0,
        cached_input_per_million=at("cache_read_mtok"),
        cache_write_per_million=at("cache_write_mtok"),
    )
