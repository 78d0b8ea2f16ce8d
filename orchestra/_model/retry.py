"""Retrying a model call after a transient provider failure.

Retried: HTTP 408, 409, 429, 500, 502, 503 and 504, transport failures
(connection refused or reset, a read timeout, a body cut short) and 2xx
replies that are not a chat completion. Not retried: any other status (400,
401, 403, 404, 422, ...): the request itself is wrong. Waits grow
exponentially with jitter (stamina, on tenacity); a ``Retry-After`` the server
sends is honoured, unless it reaches past the run's deadline, in which case
the call gives up at once instead of sleeping into it.

Cancellation: every wait is a ``trio.sleep``, so a cancel or the run's
deadline interrupts a wait or an attempt at once. A failed attempt is never
billed: only a reply is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import stamina

from .._exceptions import ConfigError, ProviderError, ProviderHTTPError
from .provider import ChatReply

__all__ = ["RETRY_STATUSES", "RetryPolicy", "complete_with_retries"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt."""


def _at_least_one(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ConfigError(f"RetryPolicy.{attribute.name} must be >= 1, got {value}")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a model call is retried.

    Attributes:
        attempts: requests per model call at most (1: no retry).
        wait_initial: seconds before the first retry (then doubling).
        wait_max: the longest wait between two attempts (before jitter).
        wait_jitter: up to this many random seconds added to each wait.
    """

    attempts: int = attrs.field(default=5, validator=_at_least_one)
    wait_initial: float = 0.5
    wait_max: float = 20.0
    wait_jitter: float = 1.0

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a provider failure that another attempt may not meet."""
        if isinstance(exc, ProviderHTTPError):
            return exc.status_code is None or exc.status_code in RETRY_STATUSES
        return isinstance(exc, ProviderError)


OnRetry = Callable[[int, ProviderError], None]
"""Told before attempt ``n`` (n >= 2) which error ended the one before."""


async def complete_with_retries(
    attempt: Callable[[], Awaitable[ChatReply]],
    policy: RetryPolicy,
    *,
    time_left: Callable[[], float],
    on_retry: OnRetry,
) -> ChatReply:
    """``await attempt()`` until it returns, retrying transient failures.

    Raises:
        ProviderError: the last failure, once it is not transient, attempts
            run out, or the server asks to wait past the deadline.
    """
    last: list[ProviderError] = []

    def backoff(exc: Exception) -> bool | float:
        if not (isinstance(exc, ProviderError) and policy.transient(exc)):
            return False
        last[:] = [exc]
        hint = getattr(exc, "retry_after", None)
        if hint is None:
            return True
        return False if hint >= time_left() else float(hint)

    try:  # the first attempt outside stamina: its bookkeeping costs ~0.2 ms a call
        return await attempt()
    except ProviderError as exc:
        if backoff(exc) is False:
            raise
        first = exc
    async for trial in stamina.retry_context(
        on=backoff,
        attempts=policy.attempts,
        timeout=None,
        wait_initial=policy.wait_initial,
        wait_max=policy.wait_max,
        wait_jitter=policy.wait_jitter,
    ):
        with trial:
            if trial.num == 1:
                raise first  # replayed, so stamina waits before attempt 2 as it decides
            on_retry(trial.num, last[0])
            return await attempt()
    raise AssertionError("unreachable: stamina re-raises the last failure")
