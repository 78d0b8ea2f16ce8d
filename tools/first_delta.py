"""Time to the first streamed words at the command line, beside the whole run.

Starts ``orchestra serve-scripted --chunk-ms MS`` on loopback, then runs, each
in a fresh process as a user would::

    orchestra run "Why did the nightly job fail?" --base-url URL --model plan --json-events

and reads its stdout as it comes: the time from starting the process to its
first ``text_delta`` line, and to its end. ``plan`` calls two tools before it
answers, so the first words are those of the third reply.

    python tools/first_delta.py                  # 5 runs, 100 ms per chunk
    python tools/first_delta.py --runs 10 --chunk-ms 50
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORCHESTRA = [sys.executable, "-m", "orchestra"]


def serve(chunk_ms: float) -> tuple[subprocess.Popen[str], str]:
    """A scripted server streaming ``chunk_ms`` apart, and its base URL."""
    command = [*ORCHESTRA, "serve-scripted", "--port", "0", "--chunk-ms", str(chunk_ms)]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    return server, server.stderr.readline().split(" at ")[1].strip()


def once(url: str, store: Path) -> tuple[float, float]:
    """One ``orchestra run``: seconds to its first text delta, and to its end."""
    started = time.perf_counter()
    command = [
        *(*ORCHESTRA, "run", "Why did the nightly job fail?", "--base-url", url),
        *("--model", "plan", "--json-events", "--store", str(store)),
        *("--price-in", "2", "--price-out", "12"),
    ]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert run.stdout is not None
    first = None
    for line in run.stdout:
        if first is None and '"type":"text_delta"' in line:
            first = time.perf_counter() - started
    run.wait()
    if first is None:
        raise SystemExit(f"no text delta came (exit {run.returncode})")
    return first, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunk-ms", type=float, default=100.0)
    args = parser.parse_args()
    server, url = serve(args.chunk_ms)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            times = [once(url, Path(tmp) / "runs.db") for _ in range(args.runs)]
    finally:
        server.kill()
        server.communicate()
    firsts, wholes = [f for f, _ in times], [w for _, w in times]
    print(f"{args.runs} runs, {args.chunk_ms:g} ms per chunk")
    for name, values in (("first words", firsts), ("whole run", wholes)):
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"{name:12} median {statistics.median(values):.2f} s ({spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
