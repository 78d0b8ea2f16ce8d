"""``orchestra prices MODEL``: what Orchestra charges for a model, and why.

A model the demos' scripted server serves (a scenario such as ``plan``, maybe
with faults, or ``researcher``) is priced as ``orchestra demo`` prices it: the
scripted provider's rates, cached input included; with ``--base-url``, as any
model served there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from .common import json_option

if TYPE_CHECKING:
    from .._money import Price, PriceTier
    from .._prices import PriceTable

__all__ = ["prices_command"]


@click.command("prices")
@click.argument("model")
@click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="The endpoint that serves MODEL: it picks the provider where several sell it.",
)
@json_option
def prices_command(model: str, base_url: str | None, as_json: bool) -> None:
    """What a run of MODEL is charged per million tokens, and where that price comes
    from (a published price list, the demos' scripted provider for a demo model,
    else an assumed default; --price-in/--price-out/--price-cached on `orchestra
    run` override them all)."""
    scripted = base_url is None and _is_scripted(model)
    table = _table(scripted=scripted)
    price = table.price(model, endpoint=base_url)
    out: dict[str, Any] = {
        "model": model,
        "source": price.source,
        **_rates(price),
        "tiers": [{"from_prompt_tokens": t.from_prompt_tokens, **_rates(t)} for t in price.tiers],
        "warning": table.warning(model, budgeted=False, endpoint=base_url),
    }
    if as_json:
        click.echo(json.dumps(out))
        return
    for line in _lines(out, scripted=scripted):
        click.echo(line)


def _table(*, scripted: bool) -> PriceTable:
    """The prices a run is charged by: the demos' (for a model of their scripted
    server, no endpoint named), else the published ones."""
    from .._prices import PriceTable
    from .._recipes.money import Money

    return Money().prices(assumed_is_known=True) if scripted else PriceTable()


def _is_scripted(model: str) -> bool:
    """Whether the demos' scripted server serves ``model`` (``plan``, ``plan+429x3``,
    ``researcher``)."""
    from .._scripted.faults import FaultSpec
    from .._scripted.scenarios import SCENARIOS, ScriptError

    try:
        return FaultSpec.parse(model).base in SCENARIOS
    except ScriptError:
        return False


def _rates(rates: Price | PriceTier) -> dict[str, float | None]:
    return {
        "input_per_million": rates.input_per_million,
        "cached_input_per_million": rates.cached_input_per_million,
        "cache_write_per_million": rates.cache_write_per_million,
        "output_per_million": rates.output_per_million,
    }


def _lines(out: dict[str, Any], *, scripted: bool) -> list[str]:
    source = f"source: {out['source']}"
    if scripted:
        source += " (`orchestra demo` runs)"
    lines = [f"{out['model']}: {_said(out)} per million tokens", source]
    lines += [
        f"from {t['from_prompt_tokens']:,} prompt tokens: {_said(t)} (every token of the call)"
        for t in out["tiers"]
    ]
    if out["warning"]:
        lines.append(f"warning: {out['warning']}")
    return lines


def _said(rates: dict[str, Any]) -> str:
    """``$2 in, $0.5 cached in, $12 out``: input, cached input and cache writes
    when they are priced apart, output."""
    said = f"${rates['input_per_million']:g} in"
    for key, words in (
        ("cached_input_per_million", "cached in"),
        ("cache_write_per_million", "cache write"),
    ):
        if rates[key] is not None:
            said += f", ${rates[key]:g} {words}"
    return said + f", ${rates['output_per_million']:g} out"
