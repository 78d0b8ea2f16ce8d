"""Objects named ``module:attribute``: what a worker imports to rebuild a tree."""

from __future__ import annotations

import importlib
from typing import Any

from ._exceptions import ConfigError

__all__ = ["named"]


def named(reference: str, what: str) -> Any:
    """The object ``reference`` (``module:attribute``) names (``what``: its kind, for
    the error).

    Raises:
        ConfigError: it cannot be imported.
    """
    module, _, attr = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot import {what} {reference!r}: {exc}") from None
