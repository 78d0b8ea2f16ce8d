"""Fast start: what `import orchestra` and the light commands load (modules, not timings).

Each case runs in a fresh interpreter: the command line's own code path
(``orchestra._cli.main.run``) with the given arguments, then a look at
``sys.modules`` and at whether the tokenizer was built. Timings are in
``python tools/benchmarks.py --only startup``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

PROBE = """
import json, sys
args = sys.argv[1:]
if args != ["--import-only"]:
    sys.argv = ["orchestra", *args]
    from orchestra._cli.main import run
    try:
        run()
    except SystemExit:
        pass
else:
    import orchestra
tokens = sys.modules.get("orchestra._model.tokens")
built = bool(tokens and tokens.encoding.cache_info().currsize)
print("\\nPROBE " + json.dumps({"modules": sorted(sys.modules), "tokenizer_built": built}))
"""

NEVER = ("opentelemetry.sdk", "jsonschema", "httpx._main", "pygments", "genai_prices", "pydantic")
"""Never loaded by a command that does not run a tree."""
NOT_TO_START = (*NEVER, "rich", "trio", "httpx", "tiktoken", "opentelemetry")
"""Not loaded by `import orchestra`, `--help` or `cancel` (nothing to lay out, no run)."""


def probe(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stdout.rsplit("\nPROBE ", 1)[1]
    result: dict[str, Any] = json.loads(line)
    return result


def loaded(result: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (or their submodules) were imported."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in result["modules"])]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A store holding one completed demo run, and that run's id; the probe sees the
    tokenizer built and jsonschema loaded by a command that does run a tree."""
    store = str(tmp_path_factory.mktemp("startup") / "runs.db")
    ran = probe("demo", "plan", "--store", store, "--json")
    assert ran["tokenizer_built"]
    assert loaded(ran, ("jsonschema", "trio")) == ["jsonschema", "trio"]
    cli = [sys.executable, "-c", "from orchestra._cli.main import run; run()"]
    listed = subprocess.run(
        [*cli, "runs", "--store", store, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return store, json.loads(listed.stdout)[0]["run_id"]


def test_import_orchestra_loads_nothing_heavy() -> None:
    result = probe("--import-only")
    assert loaded(result, NOT_TO_START) == []
    assert not result["tokenizer_built"]


def test_public_names_still_resolve_lazily() -> None:
    import orchestra

    assert set(orchestra.__all__) <= set(dir(orchestra))
    assert orchestra.configure_otlp.__module__ == "orchestra._telemetry.otel"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        orchestra.nope  # type: ignore[attr-defined]  # noqa: B018


def test_help_loads_nothing_heavy() -> None:
    result = probe("--help")
    assert loaded(result, NOT_TO_START) == []
    assert not result["tokenizer_built"]


def test_cancel_of_a_finished_run_loads_nothing_heavy(finished: tuple[str, str]) -> None:
    store, run_id = finished
    result = probe("cancel", run_id, "--store", store)
    assert loaded(result, NOT_TO_START) == []
    assert not result["tokenizer_built"]


@pytest.mark.parametrize("command", ["runs", "show"])
def test_runs_and_show_build_no_tokenizer_and_load_no_sdk(
    finished: tuple[str, str], command: str
) -> None:
    store, run_id = finished
    args = ["runs"] if command == "runs" else ["show", run_id]
    result = probe(*args, "--store", store)
    assert loaded(result, NEVER) == []  # rich may lay out the table or tree
    assert not result["tokenizer_built"]
