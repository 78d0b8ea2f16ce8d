"""Orchestra's exceptions, in one place.

Control-flow signals (a budget reached, an approval needed, a cancel) are *not*
exceptions: they end a run with a status and come back as data. Exceptions are
for misuse and for failures of the things around a run::

    OrchestraError
    ├── ConfigError              bad options given by a user (limits, prices, URLs)
    ├── ProviderError            the model endpoint failed us
    │   ├── ProviderHTTPError    transport failure or a non-2xx status
    │   │   └── ProviderUnreachable  no connection could be made (refused, unknown host)
    │   └── ProviderReplyError   a 2xx reply that is not a chat completion
    ├── ToolError                raised *by tools* to report a failure
    │   ├── PermanentToolError   a failure the model cannot fix by retrying
    │   └── ToolOutcomeUnknown   the tool cannot tell whether its effect happened
    ├── StateError               saved state that cannot be used
    │   ├── SchemaVersionError   saved by an unknown schema version
    │   ├── RunNotFound          no run with that id in the store
    │   └── StoreError           the store's file cannot be opened, read or written
    │       └── StoreUnreachable the store's server cannot be reached (maybe for a moment)
    ├── LeaseError               another process owns the run
    │   └── LeaseLost            this process's lease was taken over: it stopped saving
    └── TokenizerError           the o200k_base data is missing or corrupt

Third-party errors (httpx, sqlite3, json) are translated into these at the
boundary where they occur; ``trio.Cancelled`` is never caught or wrapped.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LeaseError",
    "LeaseLost",
    "OrchestraError",
    "PermanentToolError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderReplyError",
    "ProviderUnreachable",
    "RunNotFound",
    "SchemaVersionError",
    "StateError",
    "StoreError",
    "StoreUnreachable",
    "TokenizerError",
    "ToolError",
    "ToolOutcomeUnknown",
]


class OrchestraError(Exception):
    """Base of every exception Orchestra raises on purpose."""


class ConfigError(OrchestraError, ValueError):
    """An option given by the caller is invalid (a negative budget, an unknown scenario...)."""


class ProviderError(OrchestraError):
    """The model endpoint could not give us a usable reply."""


class ProviderHTTPError(ProviderError):
    """The request failed in transport or came back with a non-2xx status.

    ``status_code`` is None for a transport failure; ``retry_after`` is the
    seconds the server asked to wait (its ``Retry-After`` header), if any.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class ProviderUnreachable(ProviderHTTPError):
    """No connection to the endpoint could be made (refused, unknown host).

    ``never_answered`` says whether the endpoint had never answered this
    provider: then the URL is wrong or the server is not started, and the call
    fails at once (unless ``RetryPolicy.wait_for_server_s``); otherwise the
    server went away and the call is retried like any transport failure.
    """

    def __init__(self, message: str, *, never_answered: bool) -> None:
        super().__init__(message)
        self.never_answered = never_answered


class ProviderReplyError(ProviderError):
    """The endpoint answered 2xx with something that is not a chat completion."""


class ToolError(OrchestraError):
    """Raised by a tool to report a failure the model may act on.

    Any exception a tool raises becomes a tool result (``Error: <message>`` by
    default); raising ``ToolError`` just makes the intent explicit.
    """


class PermanentToolError(ToolError):
    """A tool failure retrying cannot fix (permission denied, unsupported operation).

    The run stops ``failed`` with this message instead of looping to its turn cap.
    """


class ToolOutcomeUnknown(ToolError):
    """The tool lost touch with what it acted on mid-call (a server that died).

    For a read this is an ordinary failure the model may act on. For a write
    the effect may or may not have happened: the run stops ``interrupted``
    (``unknown_outcome``) for a human, exactly as when a write times out.
    """


class StateError(OrchestraError):
    """Saved state cannot be loaded or used."""


class SchemaVersionError(StateError):
    """The state was saved by a schema version this Orchestra does not know."""


class RunNotFound(StateError, LookupError):
    """The store holds no run with the requested id."""


class StoreError(StateError):
    """The store's file cannot be opened, read or written.

    A file that is not a database or whose pages are corrupt ("database disk
    image is malformed"), a disk that is full, a directory that cannot be
    created: SQLite's own errors, translated where the store meets SQLite.
    """


class StoreUnreachable(StoreError):
    """The store's database server cannot be reached (it may be back in a moment)."""


class LeaseError(OrchestraError):
    """Another process currently owns (is running) this run."""


class LeaseLost(LeaseError):
    """This process no longer holds the lease on a run tree it was running.

    It stalled past its lease (a stopped process, a blocking tool) and another
    process took the tree over. Every save and every write's start is checked
    against the lease in the same transaction, so the process stops before
    its next effect and saves nothing over the new holder's state.
    """


class TokenizerError(OrchestraError):
    """The o200k_base encoding could not be built from its packaged data."""
