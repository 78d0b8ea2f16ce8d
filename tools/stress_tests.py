"""Run a pytest selection N times in a row while K CPU-bound processes keep the machine busy.

The test command must pass every time, on a loaded machine too (a developer's
laptop, a shared CI runner). This loop is how we check it: each run is a fresh
``python -m pytest`` process; the loop stops at the first run that fails (or
outlives ``--run-timeout``), keeps that run's whole output, and prints the
counts (passed runs / runs, durations).

    python tools/stress_tests.py                        # 30 runs of the default selection, 2 busy
    python tools/stress_tests.py --runs 5 --busy 2 -- tests/distributed/test_example.py
    python tools/stress_tests.py --runs 5 --busy 2 -- -x       # the whole suite (README's command)

The default selection is ``tests/distributed`` and the process tests (the
``kill -9`` crash tests and the CLI's, which start real processes). Arguments
after ``--`` replace it (pytest's own options included). PostgreSQL: as for
``pytest`` itself, ``$ORCHESTRA_PG_URL`` if set, else each run starts a
throwaway cluster. Each run's output is saved in ``--keep`` (default: a new
directory under /tmp); exit 0 if every run passed, 1 if one failed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SELECTION = (
    "tests/distributed",
    "tests/test_crash.py",
    "tests/test_crash_tree.py",
    "tests/mcp/test_mcp_crash.py",
    "tests/cli",
)
BUSY_LOOP = "while True: pass"
INTERRUPT_S = 60.0
"""How long an interrupted run has to tear its fixtures down before it is killed."""


@contextmanager
def busy(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` CPU-bound Python processes, each spinning one core, until the block ends."""
    procs = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:  # by pid: only the processes this loop started
            with suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            proc.wait()


def run_once(selection: Sequence[str], log: Path, timeout_s: float) -> tuple[bool, float, str]:
    """One ``pytest`` run of ``selection``, its output in ``log``: (passed, seconds, summary).

    A run that outlives ``timeout_s`` is killed (its whole process group) and failed.
    """
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection]
    started = time.monotonic()
    with log.open("wb") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_interruptible,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out.write(f"\n[stress] killed: still running after {timeout_s:.0f} s\n".encode())
            return False, time.monotonic() - started, f"timed out after {timeout_s:.0f} s"
        except BaseException:  # Ctrl-C or SIGTERM: the run's processes go too
            _kill_group(proc)
            raise
    seconds = time.monotonic() - started
    return code == 0, seconds, _summary(log, code)


def _interruptible() -> None:
    """In the pytest child: SIGINT back to its default, so that Python turns it
    into KeyboardInterrupt (a job a shell started in the background ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a run's pytest: SIGINT, so that its fixtures stop what they started
    outside its process group (a PostgreSQL cluster), then SIGKILL for every
    process of its group after :data:`INTERRUPT_S`."""
    with suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=INTERRUPT_S)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _summary(log: Path, code: int) -> str:
    """pytest's counts line (``N passed, M skipped in S s``: the last line that has
    them, skip reasons may follow it), else its last line, else the exit code."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    counts = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    said = counts or lines
    return said[-1].strip("= ") if said else f"exit {code}"


def _durations(seconds: Sequence[float]) -> str:
    if not seconds:
        return "no runs"
    return (
        f"median {statistics.median(seconds):.1f} s, "
        f"min {min(seconds):.1f} s, max {max(seconds):.1f} s"
    )


def loop(
    selection: Sequence[str], runs: int, keep: Path, timeout_s: float
) -> tuple[int, list[float], Path | None]:
    """Up to ``runs`` runs, stopping at the first failure: (passed, durations, failed log)."""
    passed, seconds = 0, []
    for i in range(1, runs + 1):
        log = keep / f"run-{i:03d}.log"
        ok, took, summary = run_once(selection, log, timeout_s)
        seconds.append(took)
        mark = "passed" if ok else "FAILED"
        load = os.getloadavg()[0]
        print(
            f"[stress] run {i}/{runs}: {mark} in {took:.1f} s (load {load:.1f}) — {summary}",
            flush=True,
        )
        if not ok:
            return passed, seconds, log
        passed += 1
        log.unlink()  # only a failure's output is kept
    return passed, seconds, None


def _arguments(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    args = list(sys.argv[1:] if argv is None else argv)
    selection: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, selection = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="pytest arguments go after --; default: " + " ".join(DEFAULT_SELECTION),
    )
    parser.add_argument("--runs", type=int, default=30, help="runs in a row (default 30)")
    parser.add_argument(
        "--busy", type=int, default=2, help="CPU-bound processes meanwhile (default 2)"
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=1800.0,
        help="seconds after which a run is killed and counted failed (default 1800)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="where the outputs go")
    return parser.parse_args(args), selection or list(DEFAULT_SELECTION)


def main(argv: Sequence[str] | None = None) -> int:
    args, selection = _arguments(argv)
    keep: Path = args.keep or Path(tempfile.mkdtemp(prefix="orchestra-stress."))
    keep.mkdir(parents=True, exist_ok=True)
    print(
        f"[stress] {args.runs} runs of pytest {' '.join(selection)} with {args.busy} busy "
        f"processes on {os.cpu_count()} cores; outputs in {keep}",
        flush=True,
    )
    signal.signal(signal.SIGTERM, _terminated)  # clean up as for Ctrl-C
    with busy(args.busy):
        passed, seconds, failed = loop(selection, args.runs, keep, args.run_timeout)
    print(f"[stress] passed {passed}/{len(seconds)} runs ({_durations(seconds)})")
    if failed is not None:
        print(f"[stress] stopped at the first failure; its output: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
