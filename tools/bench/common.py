"""What the sections share: statistics, rows, the machine, child processes, agents.

A *row* is one figure of a section: samples of Orchestra (or of the thing
measured), optionally samples of a baseline measured in the same run, and
their summaries (median, min, max, quartiles). Its ratio is the median of the
ratios of paired samples when the two were measured interleaved (pairs share
the machine's drift), else the ratio of the medians.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent.parent
ROOT = TOOLS.parent
ENTRY = TOOLS / "benchmarks.py"
PYTHON = sys.executable
INTERRUPT_S = 20.0
"""How long a worker interrupted before its end has to clean up."""
MARK = "@@bench "
"""Prefix of the lines a worker prints for its parent (anything else on stdout is ignored)."""

Row = dict[str, Any]
Section = dict[str, Any]


# -- statistics --------------------------------------------------------------------------


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min, max, quartiles and count of ``samples`` (all None if there are none)."""
    xs = sorted(float(x) for x in samples)
    if not xs:
        return {"median": None, "min": None, "max": None, "q1": None, "q3": None, "n": 0}
    q1, q3 = (statistics.quantiles(xs, n=4)[i] for i in (0, 2)) if len(xs) > 1 else (xs[0],) * 2
    return {
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "q1": q1,
        "q3": q3,
        "n": len(xs),
    }


def row(
    name: str,
    unit: str,
    samples: Sequence[float],
    *,
    baseline: str | None = None,
    baseline_samples: Sequence[float] | None = None,
    paired: bool = False,
    text: str | None = None,
    baseline_text: str | None = None,
    note: str | None = None,
) -> Row:
    """One figure: samples, their summary, the baseline's and the ratio (see the module doc).

    ``text``/``baseline_text`` replace a median that does not exist or does not
    tell the story (e.g. "did not complete in 60 s"); a row with either has no ratio.
    """
    out: Row = {"name": name, "unit": unit, "samples": list(samples), **summary(samples)}
    out["text"] = text
    out["baseline"] = baseline
    out["baseline_text"] = baseline_text
    out["note"] = note
    base = list(baseline_samples or [])
    out["baseline_samples"] = base
    out["baseline_summary"] = summary(base)
    out["ratio"] = out["ratio_min"] = out["ratio_max"] = None
    if text is None and baseline_text is None and base and samples:
        pairs = [a / b for a, b in zip(samples, base, strict=False) if b]
        if paired and len(base) == len(samples) and len(pairs) == len(samples):
            out["ratio"] = statistics.median(pairs)
            out["ratio_min"], out["ratio_max"] = min(pairs), max(pairs)
            out["ratio_kind"] = "median of paired ratios"
        elif out["baseline_summary"]["median"]:
            out["ratio"] = out["median"] / out["baseline_summary"]["median"]
            out["ratio_kind"] = "ratio of medians"
    return out


def target(text: str, value: str, met: bool | None) -> dict[str, Any]:
    """A target the issue states, the value measured and whether it is met (None: unknown)."""
    return {"text": text, "value": value, "met": met}


def section(
    sid: str, title: str, method: str, rows: list[Row], targets: Sequence[dict[str, Any]] = ()
) -> Section:
    """A section's result (``notes`` may be appended by the caller)."""
    return {
        "id": sid,
        "title": title,
        "method": method,
        "rows": rows,
        "targets": list(targets),
        "notes": [],
        "error": None,
    }


def find(rows: Sequence[Row], name: str) -> Row:
    """The row called ``name``."""
    return next(r for r in rows if r["name"] == name)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with about ``digits`` significant digits, thousands separated."""
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 10 ** (digits - 1) or magnitude == 0:
        return f"{value:,.0f}"
    decimals = digits - 1 - int(f"{magnitude:e}".split("e")[1])
    return f"{value:,.{max(decimals, 0)}f}"


def ratio_text(r: float | None) -> str:
    return "—" if r is None else f"{fmt(r)}×"


# -- the machine ---------------------------------------------------------------------------


def _first(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip() if ":" in line else line
    except OSError:
        return None
    return None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


DISTRIBUTIONS = {"orchestra": "orchestra-trees"}
"""Where a package's distribution has another name (the one PyPI knows)."""


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, Python, OS, date, git commit, and the versions that matter."""
    mem_kb = _first("/proc/meminfo", "MemTotal")
    os_name = (_first("/etc/os-release", "PRETTY_NAME=") or "").partition("=")[2].strip('"\n')
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "cpu": _first("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "ram_gb": round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": f"{os_name or platform.system()} ({platform.system()} {platform.release()})",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "commit_subject": _git("log", "-1", "--format=%s"),
        "uncommitted_changes": dirty,
        "load_average": list(os.getloadavg()),
        "versions": {
            p: _version(DISTRIBUTIONS.get(p, p))
            for p in ("orchestra", "trio", "httpx", "httpcore", "h11", "tiktoken")
        },
    }


# -- memory ---------------------------------------------------------------------------------


def status_mb(field: str, pid: int | str = "self") -> float:
    """A ``VmXXX`` field of /proc/PID/status in MB (VmRSS: now; VmHWM: the peak)."""
    value = _first(f"/proc/{pid}/status", field + ":")
    return int(value.split()[0]) / 1024 if value else float("nan")


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc/PID/stat;
    with ``reaped``, plus those of its children that exited and it waited for
    (0.0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # after the command: state, ppid, ... (fields 3..); utime is field 14, stime 15,
    # cutime 16, cstime 17 (proc(5)), in clock ticks
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``, its live descendants, and the descendants that exited
    (reaped: a server's ended connections count too)."""
    return cpu_seconds(pid, reaped=True) + sum(cpu_seconds(p) for p in _descendants(pid))


def rss_mb() -> float:
    return status_mb("VmRSS")


def peak_rss_mb() -> float:
    return status_mb("VmHWM")


# -- child processes ------------------------------------------------------------------------


def emit(**data: Any) -> None:
    """Print one line for the parent process."""
    print(MARK + json.dumps(data), flush=True)


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def kill_tree(process: subprocess.Popen[Any], wait_s: float = 0.0) -> None:
    """Stop a child we started and every process it started (SIGKILL, by pid).

    ``wait_s``: first give it that long to exit by itself.
    """
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=wait_s)
    if process.poll() is None:
        for pid in [*_descendants(process.pid), process.pid]:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    process.wait()


class Worker:
    """``benchmarks.py --worker NAME`` in its own session; reads its ``MARK`` lines."""

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        argv = [PYTHON, str(ENTRY), "--worker", name, "--params", json.dumps(params)]
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
            start_new_session=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.tail = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARK):
                with suppress(ValueError):
                    self.lines.put(json.loads(line[len(MARK) :]))
        self.lines.put(None)

    def next(self, deadline: float) -> dict[str, Any] | None:
        """The next line, or None at the end of output or at ``deadline`` (perf_counter)."""
        try:
            return self.lines.get(timeout=max(deadline - time.perf_counter(), 0.0))
        except queue.Empty:
            return None

    def stderr_tail(self, lines: int = 12) -> str:
        self._stderr.seek(0)
        return "".join(self._stderr.readlines()[-lines:])

    def close(self, wait_s: float = 0.0) -> None:
        """Stop it (after ``wait_s`` for it to exit by itself); keeps its stderr's tail.

        One still running gets SIGTERM (``benchmarks.py`` makes it SystemExit) and
        :data:`INTERRUPT_S` to stop what it started that is not its descendant (a
        PostgreSQL cluster), then SIGKILL. Not SIGINT: a job started in the
        background by a shell ignores it, and so do its children.
        """
        if self._stderr.closed:
            return
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=wait_s)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        kill_tree(self.process, INTERRUPT_S)
        self._reader.join(timeout=5)
        self.tail = self.stderr_tail()
        self._stderr.close()


def run_worker(name: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run a worker to its ``final`` line (returned); RuntimeError if it fails or runs out."""
    worker = Worker(name, params)
    deadline = time.perf_counter() + timeout
    try:
        while (line := worker.next(deadline)) is not None:
            if line.get("final"):
                worker.close(wait_s=10)
                return line
        late = time.perf_counter() >= deadline
        worker.close(wait_s=0 if late else 5)
    finally:
        worker.close()
    if late:
        raise RuntimeError(f"worker {name} did not finish in {timeout:.0f} s\n{worker.tail}")
    raise RuntimeError(f"worker {name} failed (exit {worker.process.returncode})\n{worker.tail}")


@contextmanager
def scripted_server(latency_ms: float = 0.0) -> Iterator[str]:
    """``orchestra serve-scripted`` in a child process on a free loopback port; its base URL.

    ``latency_ms``: the server waits that long before each reply (``--latency-ms``).
    """
    with scripted_process(latency_ms) as (url, _):
        yield url


@contextmanager
def scripted_process(latency_ms: float = 0.0) -> Iterator[tuple[str, int]]:
    """As :func:`scripted_server`; the base URL and the server's pid (to read its CPU)."""
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log:
        argv = [PYTHON, "-m", "orchestra", "serve-scripted", "--port", "0"]
        argv += ["--latency-ms", str(latency_ms)]
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT, start_new_session=True
        )
        try:
            deadline = time.perf_counter() + 30
            while True:
                log.seek(0)
                banner = log.readline()
                if banner.endswith("\n") and "http://" in banner:
                    break
                if process.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"the scripted server did not start: {banner!r}")
                time.sleep(0.02)
            yield banner.split()[-1], process.pid
        finally:
            kill_tree(process)


def raise_fd_limit() -> None:
    """Raise the soft limit on open files to the hard limit (many sockets)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- agents ---------------------------------------------------------------------------------


def sandbox() -> Path:
    """A fresh sandbox directory with the scenarios' files."""
    from orchestra.testing import make_sandbox

    return make_sandbox(Path(tempfile.mkdtemp(prefix="orchestra-bench-")) / "sandbox")


def plan_agent(directory: Path, model: str = "plan", **options: Any) -> Any:
    """The agent the bare loop mirrors: the bare loop's instructions, list_files and read_file."""
    from orchestra import Agent, catalog

    from .bare import INSTRUCTIONS

    tools = [t for t in catalog(directory) if t.name in ("list_files", "read_file")]
    return Agent(name="assistant", model=model, instructions=INSTRUCTIONS, tools=tools, **options)


def tree_runs(spec: tuple[int, ...]) -> int:
    """Runs in a ``tree`` scenario of that shape (children per level), its root included."""
    total, level = 1, 1
    for size in spec:
        level *= size
        total += level
    return total


def tree_agent(directory: Path, levels: int) -> Any:
    """An agent for the ``tree`` scenario whose ``research`` tool nests ``levels`` deep."""
    from orchestra import Agent
    from orchestra.testing import demo_tools

    tools = demo_tools(directory)
    agent = None
    for _ in range(levels + 1):
        research = () if agent is None else (agent.as_tool(name="research"),)
        agent = Agent(
            name="node",
            model="tree",
            instructions="You are a researcher.",
            tools=(*tools, *research),
            max_tokens=8192,  # room for 100 tool calls in one reply
        )
    return agent


def in_process_provider() -> Any:
    """An OpenAIProvider on the scripted provider's in-process transport."""
    from orchestra import OpenAIProvider
    from orchestra.testing import ScriptedTransport

    return OpenAIProvider(
        base_url="http://scripted/v1", api_key="bench", transport=ScriptedTransport()
    )


def warm_tokenizer() -> None:
    """Build the tokenizer now (0.3 s), outside every timing. Runs a tiny count."""
    from orchestra.testing import reply

    reply({"model": "plan", "messages": [{"role": "user", "content": "warm up"}]})
