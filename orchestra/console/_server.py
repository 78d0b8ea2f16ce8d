"""The console's server: Hypercorn's trio worker on one loopback socket.

Ctrl-C or SIGTERM stops it: the live streams end, Hypercorn finishes the
requests in flight, then the resumes started from the console are stopped
gracefully (see :mod:`orchestra.console._launches`).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from functools import partial
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

from .._stores.contract import DurableStore
from ._app import Console, build_app
from ._launches import Launches

__all__ = ["HOST", "bind", "run_console", "serve_console"]

HOST = "127.0.0.1"
"""The only address the console listens on."""
GRACEFUL_S = 2.0
"""Seconds requests in flight get to finish once the server stops."""


def bind(port: int) -> socket.socket:
    """A listening TCP socket on :data:`HOST` (``port`` 0: any free one).

    Raises:
        OSError: the port is in use, or not ours to take.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _config(sock: socket.socket) -> Config:
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # Hypercorn owns the socket from here on
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = GRACEFUL_S
    return config


async def _until_signal(closing: trio.Event, say: Callable[[str], None]) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            say(f"{signal.Signals(signum).name}: stopped")
            closing.set()
            return


async def serve_console(
    *, store: DurableStore, sock: socket.socket, say: Callable[[str], None] = print
) -> None:
    """Serve the console over ``store`` on ``sock`` until Ctrl-C or SIGTERM.

    ``say`` gets the URL once the server accepts requests, then how it stopped.
    """
    port = sock.getsockname()[1]
    closing = trio.Event()
    async with trio.open_nursery() as resumes:
        launches = Launches(nursery=resumes, store_path=os.fspath(store.path))
        console = Console(store=store, port=port, launches=launches, closing=closing)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_signal, closing, say)
            app = cast(ASGIFramework, build_app(console))  # Starlette's ASGI types, Hypercorn's
            await nursery.start(partial(serve, app, _config(sock), shutdown_trigger=closing.wait))
            say(f"console at http://{HOST}:{port}/ (Ctrl-C to stop)")
        resumes.cancel_scope.cancel()  # resumes started here stop, saved and resumable


def run_console(*, store: DurableStore, sock: socket.socket) -> None:
    """Serve the console until Ctrl-C or SIGTERM (messages on stderr)."""

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    trio.run(partial(serve_console, store=store, sock=sock, say=say))
