"""The CLI's money options: prices, the prompt margin floor and the token budget.

``--price-in/--price-out`` (USD per million tokens) and ``--margin-ratio`` /
``--margin-tokens`` are saved in the run's recipe, so ``orchestra resume``
prices and reserves the same way; ``--max-tokens-budget`` is a limit like
``--max-budget``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import attrs
import click

from .._model.margin import Margin
from .._money import Price, PriceTable
from .options import PRICE, TOKENS, Number, count

__all__ = ["Money", "money_options", "tokens_option"]


@attrs.frozen(kw_only=True)
class Money:
    """How a CLI run is priced and how much slack its reservations take."""

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


def tokens_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--max-tokens-budget``: prompt + completion tokens for the whole tree."""
    return click.option(
        "--max-tokens-budget",
        "max_tokens_total",
        type=TOKENS,
        default=None,
        help="Tokens (prompt + completion) for the whole tree; needs no prices.",
    )(fn)


def money_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the price and margin options; the command gets them as ``money: Money``."""

    @wraps(fn)
    def wrapper(
        *args: Any,
        price_in: float | None,
        price_out: float | None,
        margin_ratio: float,
        margin_tokens: int,
        **kwargs: Any,
    ) -> Any:
        money = Money(
            price_in=price_in,
            price_out=price_out,
            margin_ratio=margin_ratio,
            margin_tokens=margin_tokens,
        )
        return fn(*args, money=money, **kwargs)

    options = [
        click.option(
            "--price-in",
            type=PRICE,
            default=None,
            metavar="USD",
            help="USD per million input tokens. [default: the model's known price, else assumed]",
        ),
        click.option(
            "--price-out",
            type=PRICE,
            default=None,
            metavar="USD",
            help="USD per million output tokens.",
        ),
        click.option(
            "--margin-ratio",
            type=Number(max=10.0),
            default=0.0,
            help="Least extra share of our prompt count to reserve (the margin is also learnt).",
        ),
        click.option(
            "--margin-tokens",
            type=count(10**7),
            default=0,
            help="Least extra prompt tokens to reserve per call.",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
