"""HTML built in Python, escaped by default.

Everything the console shows comes from the run store, which holds untrusted
text (run ids, tool arguments and results, model output). So markup is made
only by :func:`h`, which escapes every string child and every attribute
value; the one way to pass markup through unescaped is to be :class:`Html`
already (made by :func:`h`, :func:`join` or :func:`literal` on a constant).
Text is also redacted of secrets on its way out, as the CLI's output is.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import LiteralString, TypeAlias

from .._redact import redact

__all__ = ["Child", "Html", "h", "join", "literal", "text"]


class Html(str):
    """A string of markup that is safe to send as is."""

    __slots__ = ()


Child: TypeAlias = "Html | str | int | float | Iterable[Child] | None"
"""What an element may contain: markup, text (escaped), numbers, nothing, or a list of them."""

VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})
"""Elements without a closing tag."""


def text(value: object) -> Html:
    """``value`` as text: secrets redacted (see :mod:`orchestra._redact`: the store may
    hold a key an endpoint echoed), then every ``<``, ``>``, ``&`` and quote escaped."""
    return Html(html.escape(redact(str(value)), quote=True))


def literal(markup: LiteralString) -> Html:
    """Markup written in the source (a constant: it holds nothing from the store)."""
    return Html(markup)


def join(children: Child) -> Html:
    """The children, each escaped unless it is :class:`Html`, one after the other."""
    if children is None:
        return Html("")
    if isinstance(children, Html):
        return children
    if isinstance(children, str | int | float):
        return text(children)
    return Html("".join(join(child) for child in children))


def _attribute(name: str, value: object) -> str:
    """`` name="value"`` (a trailing ``_`` dropped, ``_`` read as ``-``); True: the bare name."""
    name = name.rstrip("_").replace("_", "-")
    if value is True:
        return f" {name}"
    return f' {name}="{text(value)}"'


def h(tag: LiteralString, *children: Child, **attrs: object) -> Html:
    """The element ``tag`` with ``attrs`` (None and False left out) around ``children``.

    ``h("a", run_id, href=url, class_="run")``: ``<a href="..." class="run">...</a>``.
    """
    opened = "".join(_attribute(k, v) for k, v in attrs.items() if v is not None and v is not False)
    if tag in VOID:
        return Html(f"<{tag}{opened}>")
    return Html(f"<{tag}{opened}>{join(children)}</{tag}>")
