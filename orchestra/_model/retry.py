"""Retrying a model call after a transient provider failure.

Retried: HTTP 408, 409, 429, 500, 502, 503 and 504, transport failures
(a connection reset, a read timeout, a body cut short, a refused connection
to an endpoint that has answered before) and 2xx replies that are not a chat
completion. Not retried: any other status (400, 401, 403, 404, 422, ...): the
request itself is wrong. Nor is a connection refused by an endpoint that has
never answered: that is a wrong URL or a server not started, said at once,
unless :attr:`RetryPolicy.wait_for_server_s` asks to wait for it.

Waits double from ``wait_initial`` up to ``wait_max``, plus random jitter; a
``Retry-After`` the server sends is honoured, unless it reaches past the
run's deadline, in which case the call gives up at once instead of sleeping
into it. Each retry is announced (``on_retry``) before its wait, with the
wait.

Cancellation: every wait is a ``trio.sleep``, so a cancel or the run's
deadline interrupts a wait or an attempt at once. A failed attempt is never
billed: only a reply is.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import attrs
import trio

from .._exceptions import ConfigError, ProviderError, ProviderHTTPError, ProviderUnreachable
from .provider import ChatReply

__all__ = ["RETRY_STATUSES", "RetryPolicy", "complete_with_retries"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt."""
SERVER_POLL_S = 0.5
"""Seconds between attempts while waiting for a server that has never answered."""


def _at_least_one(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ConfigError(f"RetryPolicy.{attribute.name} must be >= 1, got {value}")


def _not_negative(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:  # NaN too
        raise ConfigError(f"RetryPolicy.{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a model call is retried.

    Attributes:
        attempts: requests per model call at most (1: no retry).
        wait_initial: seconds before the first retry (then doubling).
        wait_max: the longest wait between two attempts (before jitter).
        wait_jitter: up to this many random seconds added to each wait.
        wait_for_server_s: how long to keep trying an endpoint that refuses
            connections and has never answered (a server still starting);
            0, the default: fail the call at once, naming the URL.
    """

    attempts: int = attrs.field(default=5, validator=_at_least_one)
    wait_initial: float = attrs.field(default=0.5, validator=_not_negative)
    wait_max: float = attrs.field(default=20.0, validator=_not_negative)
    wait_jitter: float = attrs.field(default=1.0, validator=_not_negative)
    wait_for_server_s: float = attrs.field(default=0.0, validator=_not_negative)

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a provider failure that another attempt may not meet."""
        if isinstance(exc, ProviderUnreachable) and exc.never_answered:
            return False  # waited for only within wait_for_server_s (see wait_before)
        if isinstance(exc, ProviderHTTPError):
            return exc.status_code is None or exc.status_code in RETRY_STATUSES
        return isinstance(exc, ProviderError)

    def wait_before(
        self, attempt: int, exc: ProviderError, *, failing_s: float, time_left: float
    ) -> float | None:
        """Seconds to wait before attempt number ``attempt`` after ``exc``, or None
        to give up; ``failing_s``: seconds since the call's first failure."""
        if isinstance(exc, ProviderUnreachable) and exc.never_answered:
            waited = failing_s + SERVER_POLL_S <= self.wait_for_server_s
            return SERVER_POLL_S if waited and time_left > SERVER_POLL_S else None
        if attempt > self.attempts or not self.transient(exc):
            return None
        hint: float | None = exc.retry_after if isinstance(exc, ProviderHTTPError) else None
        if hint is not None:
            return None if hint >= time_left else hint
        backoff: float = min(self.wait_max, self.wait_initial * 2.0 ** (attempt - 2))
        return backoff + random.uniform(0, self.wait_jitter)


OnRetry = Callable[[int, ProviderError, float], None]
"""Told, before waiting ``wait`` seconds for attempt ``n`` (n >= 2), which error
ended the attempt before."""


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
    number, first_failure = 1, None
    while True:
        try:
            return await attempt()
        except ProviderError as exc:
            now = trio.current_time()
            first_failure = now if first_failure is None else first_failure
            number += 1
            wait = policy.wait_before(
                number, exc, failing_s=now - first_failure, time_left=time_left()
            )
            if wait is None:
                raise
            on_retry(number, exc, wait)
        await trio.sleep(wait)
