"""Launcher: llama.cpp's OpenAI-compatible HTTP server (xllamacpp) on loopback.

Run with the Python of the server's own environment (``tools/local_model.py
start`` does), never the project's::

    python serve.py --model M.gguf --template T.jinja --port 8090 --threads 2 --ctx 8192

Serves ``/v1/chat/completions`` and ``/v1/models`` at 127.0.0.1:PORT with
jinja chat templates on, our template, one slot with the whole context, and
the model under ``--alias``. Runs until SIGTERM or SIGINT; prints one line
when it listens.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

STOP_GRACE_S = 3.0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the GGUF file")
    parser.add_argument("--template", type=Path, required=True, help="a jinja chat template")
    parser.add_argument("--alias", default="local", help="the model name clients send")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=8192, help="context size in tokens")
    parser.add_argument("--temp", type=float, default=0.0, help="sampling (0: greedy)")
    return parser.parse_args()


def params(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """llama.cpp's common parameters for our server."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(args.model)
    p.model_alias = {args.alias}
    p.n_ctx = args.ctx
    p.n_parallel = 1
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.use_jinja = True
    p.chat_template = args.template.read_text()
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.ui = False
    p.offline = True
    p.cache_ram_mib = 1024
    p.sampling.temp = args.temp
    return p


def main() -> int:
    args = arguments()
    for path in (args.model, args.template):
        if not path.is_file():
            print(f"serve.py: error: no such file: {path}", file=sys.stderr)
            return 1
    import xllamacpp

    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    try:
        server = xllamacpp.Server(params(args))
    except RuntimeError as exc:
        print(f"serve.py: error: llama.cpp did not start ({exc}); see above", file=sys.stderr)
        return 1
    print(f"serve.py: listening on {server.listening_address}", file=sys.stderr, flush=True)
    stopped.wait()
    print("serve.py: stopping", file=sys.stderr, flush=True)
    shut_down([server], STOP_GRACE_S)
    return 0


def shut_down(holder: list[object], grace: float) -> None:
    """Drop the server (llama.cpp stops its loop) for up to ``grace`` seconds, then exit.

    With a request in flight llama.cpp's destructor waits for the reply to
    finish; nothing here needs saving, so the process exits regardless.
    """
    done = threading.Thread(target=holder.clear, daemon=True)
    done.start()
    done.join(grace)
    print(
        f"serve.py: stopped{'' if not done.is_alive() else ' (a reply was in flight)'}",
        file=sys.stderr,
        flush=True,
    )
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
