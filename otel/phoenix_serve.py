"""Run ``phoenix serve`` with its OTLP gRPC collector bound to loopback.

Used by otel/start-phoenix.sh, run with the isolated Phoenix venv's python.

Phoenix binds its HTTP server (UI, REST API, OTLP/HTTP at /v1/traces) to
PHOENIX_HOST, but its OTLP gRPC collector hard-codes ``[::]:PORT``
(phoenix/server/grpc_server.py), i.e. every interface. This shim wraps
``grpc.aio.server`` so that wildcard bind addresses are rewritten to
PHOENIX_GRPC_HOST (default: PHOENIX_HOST, else 127.0.0.1) before Phoenix starts.
It does not modify the installed package.
"""

from __future__ import annotations

import os
import sys

import grpc.aio

_WILDCARDS = ("[::]", "0.0.0.0", "")


def _loopback(address: str) -> str:
    host, sep, port = address.rpartition(":")
    if not sep or host not in _WILDCARDS:
        return address
    bind = os.environ.get("PHOENIX_GRPC_HOST") or os.environ.get("PHOENIX_HOST") or "127.0.0.1"
    if ":" in bind and not bind.startswith("["):
        bind = f"[{bind}]"
    return f"{bind}:{port}"


_orig_server = grpc.aio.server


def _server(*args, **kwargs):  # type: ignore[no-untyped-def]
    server = _orig_server(*args, **kwargs)
    add_insecure, add_secure = server.add_insecure_port, server.add_secure_port
    server.add_insecure_port = lambda address: add_insecure(_loopback(address))
    server.add_secure_port = lambda address, creds: add_secure(_loopback(address), creds)
    return server


grpc.aio.server = _server


def main() -> None:
    from phoenix.server.main import main as phoenix_main

    sys.argv = ["phoenix", "serve", *sys.argv[1:]]
    phoenix_main()


if __name__ == "__main__":
    main()
