"""A throwaway PostgreSQL cluster on 127.0.0.1, for tests, CI and trying things by hand.

One command each (standard library only: run it with any Python >= 3.11)::

    python tools/postgres.py start [--dir DIR] [--port N]
    python tools/postgres.py status [--dir DIR]
    python tools/postgres.py url [--dir DIR]
    python tools/postgres.py stop [--dir DIR]

``start`` makes a cluster in ``DIR/data`` on first use (``initdb``), then
runs it listening on 127.0.0.1 only, on ``--port`` (default: a free port;
the port it last used if it is still free), with its Unix socket in
``DIR/sock`` and its log in ``DIR/server.log``. It prints the URL
``postgresql://postgres@127.0.0.1:PORT/postgres`` on stdout and writes it to
``DIR/url``. If the cluster already runs it just prints the URL.

``DIR`` defaults to ``$ORCHESTRA_PG_STATE``, else ``~/.cache/orchestra/postgres``.
The binaries are Debian's (``/usr/lib/postgresql/<highest version>/bin``),
else ``initdb`` and ``pg_ctl`` on PATH. PostgreSQL refuses to run as root:
as root, the server runs as the ``postgres`` user (``runuser -u postgres``)
and ``DIR`` is handed to that user, so it must be reachable by it (not under
``/root``: use ``--dir`` under ``/tmp``).

This cluster is for tests only: any local user may connect as the superuser
``postgres`` without a password (trust authentication, loopback and socket
only), and it does not flush to disk (``fsync=off``), so a machine crash can
lose or corrupt its data.

Exit codes: 0 done; 1 failed (the reason on stderr); 3 ``status`` or ``url``
found no cluster running; 4 no PostgreSQL binaries on this machine.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

NOT_RUNNING = 3
NO_BINARIES = 4
SERVER_USER = "postgres"
DEBIAN_BINARIES = Path("/usr/lib/postgresql")


class Failure(Exception):
    """An ordinary failure: its message is printed and the command exits 1."""

    code = 1


class NoBinaries(Failure):
    """PostgreSQL's server programs are not installed."""

    code = NO_BINARIES


def say(message: str) -> None:
    print(f"[postgres] {message}", file=sys.stderr, flush=True)


# --- where things live ------------------------------------------------------


def default_dir() -> Path:
    explicit = os.environ.get("ORCHESTRA_PG_STATE")
    return Path(explicit) if explicit else Path.home() / ".cache" / "orchestra" / "postgres"


def data_dir(base: Path) -> Path:
    return base / "data"


def socket_dir(base: Path) -> Path:
    return base / "sock"


def url_file(base: Path) -> Path:
    return base / "url"


def log_file(base: Path) -> Path:
    return base / "server.log"


def url_for(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def binaries() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (highest version)."""
    found = sorted(
        (p.parent for p in DEBIAN_BINARIES.glob("*/bin/postgres")),
        key=lambda d: [int(n) for n in re.findall(r"\d+", d.parent.name)] or [0],
    )
    if found:
        return found[-1]
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    raise NoBinaries(
        f"no PostgreSQL server binaries (initdb, pg_ctl) in {DEBIAN_BINARIES}/*/bin or on PATH:"
        " apt-get install postgresql"
    )


# --- running programs as the server's user ----------------------------------


def as_root() -> bool:
    return os.geteuid() == 0


def server_command(program: Path, *args: str) -> list[str]:
    """``program args``, as the ``postgres`` user when we are root."""
    if as_root():
        return ["runuser", "-u", SERVER_USER, "--", str(program), *args]
    return [str(program), *args]


def run(base: Path, program: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL program (from ``base``, a directory its user can enter)."""
    return subprocess.run(
        server_command(program, *args), cwd=base, capture_output=True, text=True, check=False
    )


def prepare(base: Path) -> None:
    """Create ``base`` and, as root, hand it to the ``postgres`` user (who must reach it)."""
    base.mkdir(parents=True, exist_ok=True)
    socket_dir(base).mkdir(exist_ok=True)
    if not as_root():
        return
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise Failure(
            f"running as root and there is no {SERVER_USER!r} user to run the server as"
            " (PostgreSQL refuses to run as root)"
        ) from None
    for path in (base, socket_dir(base)):
        os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(base, 0o700)
    probe = ["runuser", "-u", SERVER_USER, "--", "test", "-w", str(base)]
    if subprocess.run(probe, check=False).returncode != 0:
        raise Failure(
            f"the {SERVER_USER} user cannot reach {base} (a parent directory is closed to it):"
            " pass --dir under /tmp or set ORCHESTRA_PG_STATE"
        )


# --- the cluster ---------------------------------------------------------------


def initdb(base: Path, bin_dir: Path) -> None:
    """A new cluster in ``DIR/data``, superuser ``postgres``, trusted on loopback and socket."""
    done = run(
        base,
        bin_dir / "initdb",
        *("-D", str(data_dir(base)), "-U", "postgres", "-A", "trust"),
        *("--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions"),
    )
    if done.returncode != 0:
        raise Failure(f"initdb failed ({done.returncode}):\n{done.stderr.strip()}")
    with (data_dir(base) / "postgresql.conf").open("a") as conf:
        conf.write("\ninclude_if_exists = 'orchestra.conf'\n")


def configure(base: Path, port: int) -> None:
    """Our settings, rewritten at every start (the port may change)."""
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(port),
        "unix_socket_directories": f"'{socket_dir(base)}'",
        "max_connections": "200",
        # A cluster for tests: losing it in a machine crash is fine, speed is not.
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
    }
    text = "".join(f"{name} = {value}\n" for name, value in settings.items())
    conf = data_dir(base) / "orchestra.conf"
    conf.write_text(text)
    if as_root():
        user = pwd.getpwnam(SERVER_USER)
        os.chown(conf, user.pw_uid, user.pw_gid)


def running_port(base: Path, bin_dir: Path) -> int | None:
    """The port of the cluster in ``base`` if its server runs, else None."""
    if not (data_dir(base) / "PG_VERSION").exists():
        return None
    if run(base, bin_dir / "pg_ctl", "status", "-D", str(data_dir(base))).returncode != 0:
        return None
    try:  # postmaster.pid: pid, data dir, start time, port, ...
        lines = (data_dir(base) / "postmaster.pid").read_text().splitlines()
        return int(lines[3])
    except (OSError, IndexError, ValueError):
        return None


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def choose_port(base: Path, asked: int | None) -> int:
    """``asked`` if free; else the port of the last start if still free; else a free one."""
    if asked is not None:
        if not port_free(asked):
            raise Failure(f"port {asked} on 127.0.0.1 is taken by another process: use --port")
        return asked
    match = re.search(r":(\d+)/", read_url(base) or "")
    if match and port_free(int(match[1])):
        return int(match[1])
    return free_port()


def read_url(base: Path) -> str | None:
    try:
        return url_file(base).read_text().strip() or None
    except OSError:
        return None


def tail(base: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log_file(base).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- commands --------------------------------------------------------------------


def start(args: argparse.Namespace) -> int:
    base = Path(args.dir).absolute()
    bin_dir = binaries()
    prepare(base)
    port = running_port(base, bin_dir)
    if port is not None:
        if args.port is not None and args.port != port:
            raise Failure(
                f"the cluster in {base} already runs on port {port}: stop it first"
                f" (python tools/postgres.py stop --dir {base})"
            )
        say(f"already running in {base}")
        return publish(base, port)
    if not (data_dir(base) / "PG_VERSION").exists():
        initdb(base, bin_dir)
    port = choose_port(base, args.port)
    configure(base, port)
    log_file(base).touch()
    if as_root():
        user = pwd.getpwnam(SERVER_USER)
        os.chown(log_file(base), user.pw_uid, user.pw_gid)
    done = run(
        base,
        bin_dir / "pg_ctl",
        *("start", "-D", str(data_dir(base)), "-l", str(log_file(base))),
        *("-w", "-t", str(int(args.wait))),
    )
    if done.returncode != 0:
        raise Failure(f"the server did not start ({done.returncode}):\n{tail(base)}")
    say(f"started in {base} (binaries {bin_dir})")
    return publish(base, port)


def publish(base: Path, port: int) -> int:
    url = url_for(port)
    url_file(base).write_text(url + "\n")
    print(url, flush=True)
    return 0


def stop(args: argparse.Namespace) -> int:
    base = Path(args.dir).absolute()
    bin_dir = binaries()
    if running_port(base, bin_dir) is None:
        say(f"not running in {base}")
        return 0
    done = run(base, bin_dir / "pg_ctl", "stop", "-D", str(data_dir(base)), "-m", "fast", "-w")
    if done.returncode != 0:
        raise Failure(f"pg_ctl stop failed ({done.returncode}): {done.stderr.strip()}")
    say(f"stopped in {base}")
    return 0


def status(args: argparse.Namespace) -> int:
    base = Path(args.dir).absolute()
    port = running_port(base, binaries())
    if port is None:
        say(f"not running in {base}")
        return NOT_RUNNING
    say(f"running in {base} (log {log_file(base)})")
    print(url_for(port), flush=True)
    return 0


def url(args: argparse.Namespace) -> int:
    base = Path(args.dir).absolute()
    port = running_port(base, binaries())
    if port is None:
        say(f"not running in {base}")
        return NOT_RUNNING
    print(url_for(port), flush=True)
    return 0


# --- the command line ---------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--dir", default=str(default_dir()), help="the cluster's directory (default: %(default)s)"
    )
    begin = commands.add_parser("start", parents=[where], help="start the cluster, print its URL")
    begin.add_argument("--port", type=int, default=None, help="default: a free port")
    begin.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it")
    commands.add_parser("stop", parents=[where], help="stop the cluster")
    commands.add_parser("status", parents=[where], help="whether it runs; its URL on stdout")
    commands.add_parser("url", parents=[where], help="its URL on stdout, if it runs")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler = {"start": start, "stop": stop, "status": status, "url": url}
    try:
        return handler[args.command](args)
    except Failure as exc:
        print(f"postgres {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"postgres {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
