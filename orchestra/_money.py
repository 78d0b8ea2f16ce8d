"""Money as integers, prices as values.

Costs are kept in integer pico-dollars (1e-12 USD) so that sums over a tree
are exact: a parent's tree cost equals its own cost plus its children's, to
the last digit, however many runs add into it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ._exceptions import ConfigError

__all__ = ["PICO", "Price", "PriceTier", "from_usd", "to_usd"]

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


def _tiers(tiers: Iterable[PriceTier]) -> tuple[PriceTier, ...]:
    return tuple(sorted(tiers, key=lambda tier: tier.from_prompt_tokens))


def _pico(per_million: float) -> int:
    return round(per_million * 1_000_000)


@attrs.frozen(kw_only=True)
class PriceTier:
    """The rates of a price from a prompt size on: a provider that bills a long
    prompt at another rate bills *every* token of the call at it (a "cliff")."""

    from_prompt_tokens: int
    input_per_million: float = attrs.field(validator=_non_negative)
    output_per_million: float = attrs.field(validator=_non_negative)
    cached_input_per_million: float | None = None
    cache_write_per_million: float | None = None


@attrs.frozen(kw_only=True)
class Price:
    """USD per million tokens: input, cached input, output; tiers by prompt size.

    ``cached_input_per_million`` prices the prompt tokens the provider read from
    its cache, ``cache_write_per_million`` those it wrote to it (Anthropic's
    cache writes cost more than input; None: as any input token). A
    reservation prices every prompt token at the dearer of input and cache
    write, so a call that writes its cache never costs more than reserved.
    Reasoning tokens are output tokens
    (providers count them in ``completion_tokens``). ``source`` says where the
    price comes from (given by the user, a published price list, or assumed).
    """

    input_per_million: float = attrs.field(default=2.0, validator=_non_negative)
    output_per_million: float = attrs.field(default=12.0, validator=_non_negative)
    cached_input_per_million: float | None = attrs.field(default=None)
    cache_write_per_million: float | None = attrs.field(default=None)
    tiers: tuple[PriceTier, ...] = attrs.field(default=(), converter=_tiers)
    source: str = attrs.field(default="assumed (Orchestra's default)", eq=False)

    @cached_input_per_million.validator
    @cache_write_per_million.validator
    def _cached_not_negative(self, attribute: attrs.Attribute[Any], value: float | None) -> None:
        if value is not None and value < 0:
            raise ConfigError(f"{attribute.name} must be >= 0, got {value}")

    @property
    def input_pico(self) -> int:
        """Pico-dollars per input token."""
        return _pico(self.input_per_million)

    @property
    def output_pico(self) -> int:
        """Pico-dollars per output token."""
        return _pico(self.output_per_million)

    @property
    def cached_pico(self) -> int:
        """Pico-dollars per cached input token."""
        cached = self.cached_input_per_million
        return self.input_pico if cached is None else _pico(cached)

    @property
    def cache_write_pico(self) -> int:
        """Pico-dollars per prompt token written to the provider's cache."""
        written = self.cache_write_per_million
        return self.input_pico if written is None else _pico(written)

    @property
    def prompt_pico_max(self) -> int:
        """The most one prompt token may cost (input, or a cache write if dearer)."""
        return max(self.input_pico, self.cache_write_pico)

    def at(self, prompt_tokens: int) -> Price:
        """The flat rates that bill a call with ``prompt_tokens`` prompt tokens."""
        tier = max(
            (t for t in self.tiers if t.from_prompt_tokens <= prompt_tokens),
            key=lambda t: t.from_prompt_tokens,
            default=None,
        )
        if tier is None:
            return self if not self.tiers else attrs.evolve(self, tiers=())
        return Price(
            input_per_million=tier.input_per_million,
            output_per_million=tier.output_per_million,
            cached_input_per_million=tier.cached_input_per_million,
            cache_write_per_million=tier.cache_write_per_million,
            source=self.source,
        )

    def highest_up_to(self, prompt_tokens: int) -> Price:
        """The highest rates of any tier up to ``prompt_tokens``: what a reservation
        for at most that many prompt tokens must assume."""
        if not self.tiers:
            return self
        rates = [
            self.at(0),
            *(
                self.at(t.from_prompt_tokens)
                for t in self.tiers
                if t.from_prompt_tokens <= prompt_tokens
            ),
        ]
        return Price(
            input_per_million=max(r.input_per_million for r in rates),
            output_per_million=max(r.output_per_million for r in rates),
            cached_input_per_million=max(r.cached_pico for r in rates) / 1_000_000,
            cache_write_per_million=max(r.cache_write_pico for r in rates) / 1_000_000,
            source=self.source,
        )

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        written_tokens: int = 0,
    ) -> int:
        """Cost in pico-dollars of a call with these token counts (``cached_tokens``:
        the part of the prompt the provider read from its cache; ``written_tokens``:
        the part it wrote to it)."""
        rates = self.at(prompt_tokens)
        cached = min(max(cached_tokens, 0), prompt_tokens)
        written = min(max(written_tokens, 0), prompt_tokens - cached)
        return (
            (prompt_tokens - cached - written) * rates.input_pico
            + cached * rates.cached_pico
            + written * rates.cache_write_pico
            + completion_tokens * rates.output_pico
        )

    def affordable_completion(self, pico: int, prompt_tokens: int) -> int:
        """How many output tokens ``pico`` pays for once the prompt is paid (at the
        highest rates of any tier the prompt may fall in)."""
        rates = self.highest_up_to(prompt_tokens)
        left = pico - prompt_tokens * rates.prompt_pico_max
        if left < 0:
            return -1
        return left // rates.output_pico if rates.output_pico else 1 << 30

    def reserved(self, prompt_tokens: int, completion_tokens: int) -> int:
        """The most a call of at most these counts can cost (no cache read assumed;
        every prompt token may be a cache write)."""
        rates = self.highest_up_to(prompt_tokens)
        return prompt_tokens * rates.prompt_pico_max + completion_tokens * rates.output_pico
