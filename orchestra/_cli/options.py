"""The command line's option types: numbers that are finite and in range, tool
names, files to write.

click's ``FloatRange`` lets ``nan`` through (every comparison with NaN is
false) and, without a maximum, ``inf`` and ``1e308``; such a budget or deadline
then fails deep inside a run. These types refuse them as usage errors, and the
range shows in each option's help.

This module is imported by ``orchestra --help``: it imports nothing heavy.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

__all__ = [
    "CATALOG_TOOLS",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "MAX_TURNS",
    "MAX_USD",
    "PRICE",
    "READ_ONLY_TOOLS",
    "SECONDS",
    "TOKENS",
    "TURNS",
    "USD",
    "Count",
    "Number",
    "OutputFile",
    "ToolNames",
    "chunk_ms_option",
    "count",
]

MAX_USD: Final = 1_000_000.0
"""The largest budget in USD an option takes (a larger one is a typo, not a limit)."""
MAX_PRICE: Final = 10_000.0
"""The largest price in USD per million tokens."""
MAX_SECONDS: Final = 1_000_000.0
"""The longest duration in seconds (about 11.5 days)."""
MAX_TURNS: Final = 1_000_000
MAX_TOKENS: Final = 10**12
"""The largest token count (stored counts are 64-bit integers)."""

CATALOG_TOOLS: Final = ("list_files", "read_file", "search_files", "delete_file")
"""The file catalog's tools by name (:func:`orchestra._catalog.catalog`), in its order."""
READ_ONLY_TOOLS: Final = ("list_files", "read_file", "search_files")
"""What ``orchestra run`` offers unless ``--tools`` says otherwise: no writes."""


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if bound == int(bound) else f"{bound:g}"


class Number(click.FloatRange):
    """A finite float within ``[min, max]`` (``min_open``: above ``min``)."""

    name = "number"

    def __init__(self, *, min: float = 0.0, max: float, min_open: bool = False) -> None:
        super().__init__(min=min, max=max, min_open=min_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        low = "<" if self.min_open else "<="
        return f"{_shown(self.min or 0.0)}{low}x<={_shown(self.max or 0.0)}"


class Count(click.IntRange):
    """An integer within ``[min, max]``, shown as ``N`` with its range in the help."""

    name = "n"

    def _describe_range(self) -> str:
        return f"{_shown(self.min or 0)}<=x<={_shown(self.max or 0)}"


def count(high: int, low: int = 0) -> Count:
    """An integer option type from ``low`` to ``high``."""
    return Count(min=low, max=high)


class OutputFile(click.Path):
    """A file to append to (``-``: stderr) whose directory exists."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, allow_dash=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        if path != "-":
            parent = Path(os.fsdecode(path)).parent
            if not parent.is_dir():
                self.fail(f"the directory {str(parent)!r} does not exist.", param, ctx)
        return path


class ToolNames(click.ParamType[tuple[str, ...], Any]):
    """Catalog tools, comma-separated: ``list_files,read_file`` or short, ``list,read``.

    Converts to a tuple of full names in the catalog's order, each once.
    """

    name = "tools"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME[,NAME...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        asked = {part.strip() for part in str(value).split(",")} - {""}
        if not asked:
            self.fail(f"name at least one tool: {self.choices()}.", param, ctx)
        unknown = sorted(asked - set(CATALOG_TOOLS) - {_short(n) for n in CATALOG_TOOLS})
        if unknown:
            self.fail(
                f"unknown tool {', '.join(map(repr, unknown))}: {self.choices()}.", param, ctx
            )
        return tuple(n for n in CATALOG_TOOLS if n in asked or _short(n) in asked)

    @staticmethod
    def choices() -> str:
        return "choose from " + ", ".join(f"{n} ({_short(n)})" for n in CATALOG_TOOLS)


def _short(name: str) -> str:
    return name.partition("_")[0]


USD: Final = Number(max=MAX_USD)
"""A budget in USD."""
PRICE: Final = Number(max=MAX_PRICE)
"""A price in USD per million tokens."""
SECONDS: Final = Number(max=MAX_SECONDS)
"""A duration in seconds."""
TURNS: Final = count(MAX_TURNS)
"""A number of model calls."""
TOKENS: Final = count(MAX_TOKENS)
"""A number of tokens."""


class JsonObject(click.ParamType[dict[str, Any], Any]):
    """A JSON object given on the command line: ``'{"user": "me"}'``."""

    name = "json"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            self.fail(f"not JSON: {exc}.", param, ctx)
        if not isinstance(parsed, dict):
            self.fail(f"a JSON object is needed, got {type(parsed).__name__}.", param, ctx)
        return parsed


_F = TypeVar("_F", bound=Callable[..., Any])


def chunk_ms_option(help_text: str) -> Callable[[_F], _F]:
    """``--chunk-ms``: the scripted server's wait before each chunk of a streamed reply."""
    return click.option(
        "--chunk-ms",
        type=Number(max=60_000.0),
        default=0.0,
        show_default=True,
        metavar="MS",
        help=help_text,
    )


def seconds_option(
    flag: str, default: float, bounds: tuple[float, float], help_text: str
) -> Callable[[_F], _F]:
    """An option given in seconds, passed as ``<name>_s`` (``--dead-after``: ``dead_after_s``)."""
    low, high = bounds
    return click.option(
        flag,
        flag.lstrip("-").replace("-", "_") + "_s",
        type=Number(min=low, max=high),
        default=default,
        show_default=True,
        metavar="SECONDS",
        help=help_text,
    )
