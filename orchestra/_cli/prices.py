"""``orchestra prices MODEL``: what Orchestra charges for a model, and why."""

from __future__ import annotations

import json
from typing import Any

import click

from .common import json_option

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
    from (a published price list, else an assumed default; --price-in/--price-out
    on `orchestra run` override both)."""
    from .._prices import PriceTable

    table = PriceTable()
    price = table.price(model, endpoint=base_url)
    warning = table.warning(model, budgeted=False, endpoint=base_url)
    out: dict[str, Any] = {
        "model": model,
        "source": price.source,
        "input_per_million": price.input_per_million,
        "cached_input_per_million": price.cached_input_per_million,
        "output_per_million": price.output_per_million,
        "tiers": [
            {
                "from_prompt_tokens": t.from_prompt_tokens,
                "input_per_million": t.input_per_million,
                "cached_input_per_million": t.cached_input_per_million,
                "output_per_million": t.output_per_million,
            }
            for t in price.tiers
        ],
        "warning": warning,
    }
    if as_json:
        click.echo(json.dumps(out))
        return
    for line in _lines(out):
        click.echo(line)


def _lines(out: dict[str, Any]) -> list[str]:
    lines = [f"{out['model']}: {_rates(out)} per million tokens", f"source: {out['source']}"]
    lines += [
        f"from {t['from_prompt_tokens']:,} prompt tokens: {_rates(t)} (every token of the call)"
        for t in out["tiers"]
    ]
    if out["warning"]:
        lines.append(f"warning: {out['warning']}")
    return lines


def _rates(rates: dict[str, Any]) -> str:
    cached = rates["cached_input_per_million"]
    said = f"${rates['input_per_million']:g} in"
    if cached is not None:
        said += f", ${cached:g} cached in"
    return said + f", ${rates['output_per_million']:g} out"
