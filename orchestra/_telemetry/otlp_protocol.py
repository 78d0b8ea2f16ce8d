"""OTLP protocol names, for the command line, :func:`~orchestra.configure_otlp` and the
export process: here, away from OpenTelemetry, so that ``orchestra --help`` can
list them without loading it."""

from __future__ import annotations

from .._exceptions import ConfigError

__all__ = ["PROTOCOLS", "protocol_name"]

PROTOCOLS = ("http/protobuf", "grpc")
"""OTLP protocols for traces (``http`` is taken for ``http/protobuf``)."""


def protocol_name(protocol: str) -> str:
    """``protocol`` as one of :data:`PROTOCOLS`; :class:`ConfigError` if it is none of them."""
    name = "http/protobuf" if protocol == "http" else protocol
    if name not in PROTOCOLS:
        raise ConfigError(f"unknown OTLP protocol {protocol!r}: use 'http/protobuf' or 'grpc'")
    return name
