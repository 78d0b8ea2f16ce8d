"""Commands that serve until stopped, and ``mcp list``: ``console``, ``worker``,
``serve-scripted``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from .common import json_option, saved_run_key_option
from .errors import CommandError
from .options import Number, chunk_ms_option, count, seconds_option
from .stores import is_distributed, must_exist, need_distributed, new_store, store_option

if TYPE_CHECKING:
    from .._stores.contract import DurableStore

__all__ = ["console_command", "mcp_group", "serve_scripted_command", "worker_command"]


def _reason(exc: OSError) -> str:
    """An OS error in words, without its errno: ``address already in use``."""
    text = exc.strerror or str(exc)
    return text.rpartition("): ")[2] if "): " in text else text


@click.command("console")
@click.option(
    "--port",
    type=count(65535),
    default=8421,
    show_default=True,
    help="Port on 127.0.0.1 (0: any free one; the URL says which).",
)
@store_option
@click.option(
    "--create",
    is_flag=True,
    help="Start over an empty store if none is at --store yet (by default a store "
    "that does not exist is refused: a typo is said, not served).",
)
def console_command(port: int, store_path: str | None, create: bool) -> None:
    """Serve the web console on 127.0.0.1 until Ctrl-C (or SIGTERM).

    Recent runs; each tree live with its costs against its budgets, the
    transcript and events of every run; buttons to approve or reject a call
    (or approve and continue at once), resume a tree and stop a running one.
    Resumes it started stop with it (saved, resumable). Needs: pip install
    'orchestra-trees[console]'.
    """
    from ..console import missing_packages

    missing = missing_packages()
    if missing:
        raise CommandError(
            f"the console needs {' and '.join(missing)}: pip install 'orchestra-trees[console]'"
        )
    if not create:  # a typo is said, not served as an empty store
        must_exist(store_path, or_else="--create starts an empty one")
    from ..console._server import bind, run_console

    if is_distributed(store_path):  # what runs stream on workers shows too
        from ..distributed._texts import FollowingStore

        store: DurableStore = FollowingStore(str(store_path))
    else:
        store = new_store(store_path)
    try:
        sock = bind(port)
    except OSError as exc:
        raise CommandError(f"cannot serve on 127.0.0.1:{port}: {_reason(exc)}") from exc
    run_console(store=store, sock=sock)


@click.command("worker")
@click.option(
    "--store",
    "database",
    envvar="ORCHESTRA_DATABASE_URL",
    required=True,
    metavar="URL",
    help="The PostgreSQL database of the runs (postgresql://…; env ORCHESTRA_DATABASE_URL).",
)
@click.option("--id", "executor_id", default=None, help="This worker's name (default: host-pid).")
@click.option(
    "--concurrency",
    type=count(1024, 1),
    default=4,
    show_default=True,
    help="Runs executed here at once.",
)
@click.option(
    "--inline-children",
    type=count(100_000, 0),
    default=64,
    show_default=True,
    help="Child runs executed inside their parent's step here at once; more are queued "
    "for any worker (0: all).",
)
@click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="Model endpoint of runs submitted from Python (default: the embedded scripted one).",
)
@seconds_option(
    "--dead-after",
    10.0,
    (0.5, 3600.0),
    "A worker silent this long is dead: its runs continue on the others.",
)
@seconds_option(
    "--wait-for-db",
    60.0,
    (0.0, 86400.0),
    "A database away at the start (restarting) is waited for this long.",
)
@seconds_option(
    "--look-every",
    1.0,
    (0.05, 3600.0),
    "How often to look for queued runs nobody announced (announced ones are taken at once).",
)
@saved_run_key_option
def worker_command(
    database: str,
    executor_id: str | None,
    concurrency: int,
    inline_children: int,
    base_url: str | None,
    dead_after_s: float,
    wait_for_db_s: float,
    look_every_s: float,
    api_key: str,
) -> None:
    """Execute queued runs from a PostgreSQL database until Ctrl-C (or SIGTERM).

    Start as many as you like, on any machine that reaches the database: each
    takes runs and child runs from the queue; `orchestra demo|run --store
    postgresql://…` submits, `orchestra cancel|approve|reject|resume --store
    postgresql://…` act on trees wherever they run. Needs: pip install
    'orchestra-trees[distributed]'.
    """
    need_distributed("the worker")
    from ..distributed._cli import is_database, run_worker

    if not is_database(database):
        raise CommandError(f"--store must be a postgresql:// URL, got {database!r}")
    run_worker(
        database,
        executor_id=executor_id,
        concurrency=concurrency,
        inline_children=inline_children,
        base_url=base_url,
        api_key=api_key,
        dead_after_s=dead_after_s,
        wait_for_db_s=wait_for_db_s,
        look_every_s=look_every_s,
    )


@click.group("mcp")
def mcp_group() -> None:
    """Look at MCP servers (needs the mcp extra: pip install 'orchestra-trees[mcp]')."""


@mcp_group.command("list")
@click.argument("server")
@json_option
def mcp_list(server: str, as_json: bool) -> None:
    """List the tools of SERVER (a command to start, or an http(s) URL) with the
    flags Orchestra derives from their hints: read-only, needs approval, idempotent."""
    import trio

    from .._recipes.recipe import Recipe

    async def tools() -> Any:
        async with Recipe(directory=".", mcp=(server,)).mcp_tools() as found:
            return found

    found = trio.run(tools)
    if as_json:
        keys = ("name", "read_only", "needs_approval", "idempotent", "description")
        click.echo(json.dumps([{k: getattr(t, k) for k in keys} for t in found], sort_keys=True))
        return
    from ..mcp._convert import describe

    for tool in found:
        click.echo(describe(tool))


@click.command("serve-scripted")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=count(65535),
    default=8000,
    show_default=True,
    help="Port to listen on (0: any free one; the URL says which).",
)
@click.option(
    "--latency-ms",
    type=Number(max=600_000.0),
    default=0.0,
    show_default=True,
    metavar="MS",
    help="Milliseconds to wait before each reply.",
)
@chunk_ms_option("Milliseconds to wait before each chunk of a streamed reply.")
def serve_scripted_command(host: str, port: int, latency_ms: float, chunk_ms: float) -> None:
    """Serve the scripted provider over HTTP until Ctrl-C (or SIGTERM).

    Its URL is printed on stderr; each request's model names the scenario. A
    request with "stream": true is answered with server-sent events, as
    OpenAI's API does (a usage chunk with stream_options.include_usage).
    """
    import signal

    import trio

    from .._scripted.server import serve_scripted

    async def serve() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    url = await nursery.start(
                        lambda task_status: serve_scripted(
                            host=host,
                            port=port,
                            latency=latency_ms / 1000,
                            chunk_s=chunk_ms / 1000,
                            task_status=task_status,
                        )
                    )
                except OSError as exc:
                    raise CommandError(f"cannot serve on {host}:{port}: {_reason(exc)}") from exc
                click.echo(f"scripted provider at {url}", err=True)
                async for signum in signals:
                    click.echo(f"{signal.Signals(signum).name}: stopped", err=True)
                    nursery.cancel_scope.cancel()
                    break

    trio.run(serve)
