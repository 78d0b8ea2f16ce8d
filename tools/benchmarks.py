"""The benchmark suite: one command, results in BENCHMARKS.md and benchmarks.json.

Measures Orchestra against baselines measured in the same run: per-turn
overhead against a bare trio + httpx loop (loopback HTTP and in-process),
N concurrent runs (100, 1,000, 10,000) and throughput at 200, idle RSS,
trees against the same runs flat, cancelling a tree, persistence per step,
tracing on against off, prompt counting per turn, and CLI start-up. Every
figure is a median with its spread over repeats and a ratio to its baseline;
the header names the machine, the date and the git commit. Each section runs
in a fresh process; the scripted provider runs in another process for the
loopback HTTP figures. The full suite takes under 10 minutes on 2 cores.

    python tools/benchmarks.py                       # full: BENCHMARKS.md, benchmarks.json
    python tools/benchmarks.py --quick --out /tmp/B.md   # smoke: small N, few repeats
    python tools/benchmarks.py --only trees,cancel --compare benchmarks.json
    python tools/benchmarks.py --only scaleout --update   # re-measure one section in place
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path

from bench import common, concurrency, suite

WORKERS = {
    "section": suite.section_worker,
    "concurrent": concurrency.concurrent_worker,
    "throughput": concurrency.throughput_worker,
}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"sections: {', '.join(suite.SECTIONS)}",
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode: small N, few repeats")
    parser.add_argument(
        "--out", type=Path, default=common.ROOT / "BENCHMARKS.md", help="the Markdown report"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="the raw numbers (default: benchmarks.json beside --out)",
    )
    parser.add_argument("--only", default="", help="comma-separated sections to run")
    parser.add_argument(
        "--compare", type=Path, default=None, help="an earlier benchmarks.json to show beside"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the other sections of the existing report (with --only); each "
        "section says when it was measured",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    signal.signal(signal.SIGTERM, _terminated)  # the running section is stopped cleanly
    if args.worker:
        WORKERS[args.worker](json.loads(args.params))
        return 0
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in suite.SECTIONS]
    if unknown:
        print(
            f"error: unknown section {', '.join(unknown)}; choose from {', '.join(suite.SECTIONS)}",
            file=sys.stderr,
        )
        return 2
    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path = (args.json or out.with_name("benchmarks.json")).resolve()
    previous = json.loads(args.compare.read_text(encoding="utf-8")) if args.compare else None
    shown = ["python", "tools/benchmarks.py", *(sys.argv[1:] if argv is None else argv)]
    return suite.main(
        quick=args.quick,
        out=out,
        json_path=json_path,
        only=only,
        previous=previous,
        command=shlex.join(shown),
        update=args.update,
    )


if __name__ == "__main__":
    sys.exit(main())
