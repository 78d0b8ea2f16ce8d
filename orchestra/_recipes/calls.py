"""How a run's model calls are made: one builder, wherever the run executes.

A recipe (:meth:`~orchestra._recipes.recipe.Recipe.model_calls`) says how
its runs reach their model: the provider's options (endpoint, HTTP timeout,
tool-call recovery, provider name), the prices, the retry policy (its
``--wait-for-server``) and the prompt margin. The command line builds its
runner from them in its own process; a worker builds each run's from the
same value, read back from the run's saved recipe. So every option a user
gives holds on whichever machine the run executes.

A worker keeps one provider per :class:`ProviderOptions` (the value is
hashable: equal options share one connection pool).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # imported where used: `orchestra --help` needs none of them
    from .._model.margin import Margin
    from .._model.provider import HTTPProvider
    from .._model.retry import RetryPolicy
    from .._prices import PriceTable

__all__ = ["DEFAULT_TIMEOUT_S", "ModelCalls", "ProviderOptions"]

DEFAULT_TIMEOUT_S = 120.0
"""The HTTP timeout of a provider whose recipe sets none (runs submitted from Python)."""


@attrs.frozen(kw_only=True)
class ProviderOptions:
    """Everything a run's provider is built from, but the API key (never saved)."""

    base_url: str | None = None
    """The endpoint; None: the embedded scripted server of the process that
    executes the run (its URL is given to :meth:`build`)."""
    timeout: float = DEFAULT_TIMEOUT_S
    recover_tool_calls: bool = False
    provider_name: str | None = None
    """``gen_ai.provider.name`` on spans; None: the provider's default for its URL."""
    wire: str = "chat"
    """The API the calls speak: ``chat`` (OpenAI's Chat Completions), ``responses``
    (OpenAI's Responses) or ``anthropic`` (Anthropic's Messages)."""

    def build(self, *, scripted_url: str | None, api_key: str) -> HTTPProvider:
        """The provider (the caller closes it). ``scripted_url`` is the embedded
        scripted server's (used, with its demo key, when :attr:`base_url` is None);
        with no ``api_key`` the provider reads its own variable
        (``$OPENAI_API_KEY``, ``$ANTHROPIC_API_KEY``).

        Raises:
            ConfigError: no endpoint (no base URL and no scripted server).
        """
        from .._model.anthropic import AnthropicProvider
        from .._model.provider import OpenAIProvider
        from .._model.responses import ResponsesProvider

        url, key = self.base_url, api_key
        if url is None:
            from .._scripted.server import DEMO_API_KEY

            url, key = scripted_url, DEMO_API_KEY
        if url is None:
            from .._exceptions import ConfigError

            raise ConfigError("no model endpoint: no base URL and no scripted server")
        if self.wire == "chat":
            return OpenAIProvider(
                base_url=url,
                api_key=key or None,
                timeout=self.timeout,
                recover_tool_calls=self.recover_tool_calls,
                provider_name=self.provider_name,
            )
        make = ResponsesProvider if self.wire == "responses" else AnthropicProvider
        return make(
            base_url=url,
            api_key=key or None,
            timeout=self.timeout,
            provider_name=self.provider_name,
        )


@attrs.frozen(kw_only=True)
class ModelCalls:
    """What a :class:`~orchestra.Runner` needs to make a recipe's model calls."""

    provider: ProviderOptions
    prices: PriceTable
    retry: RetryPolicy
    margin: Margin
    """The floor of the prompt margin (``Runner(prompt_margin=...)``)."""

    @property
    def key(self) -> str:
        """A text that tells apart calls made differently (a worker keys its
        runners by it: a price table holds a dict, so the value is not hashable)."""
        return repr(self)
