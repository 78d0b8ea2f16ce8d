"""Every page's code runs as written (the rules: :mod:`docs_pages`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import ROOT, Page, pages

PAGE_TIMEOUT_S = 600  # a page's script as a whole; a hang fails it instead of the suite
LINKED = ("tools", "examples", "otel", "docs")
"""Folders of the repository a page's commands may name, linked as in a clone."""
MARKS = {"postgresql": pytest.mark.postgres, "jaeger": pytest.mark.otlp}


def _param(page: Page) -> object:
    return pytest.param(page, id=page.name, marks=[MARKS[need] for need in page.needs])


PAGES = [_param(page) for page in pages() if page.python or page.shell]


def _environment(page: Page, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """What the page's code sees (see :mod:`docs_pages`)."""
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OPENAI_BASE_URL": request.getfixturevalue("server_url"),
        "OPENAI_API_KEY": "scripted",
        "ORCHESTRA_STORE": str(tmp_path / "runs.db"),
        "COLUMNS": "100",
    }
    if "postgresql" in page.needs:
        env["ORCHESTRA_PG_URL"] = request.getfixturevalue("pg_url")
    if "jaeger" in page.needs:
        jaeger, otlp = os.environ.get("ORCHESTRA_JAEGER_URL"), os.environ.get("ORCHESTRA_OTLP_HTTP")
        if not (jaeger and otlp):
            pytest.skip("no ORCHESTRA_JAEGER_URL and ORCHESTRA_OTLP_HTTP: .ci/run starts Jaeger")
        env.update(ORCHESTRA_JAEGER_URL=jaeger, OTEL_EXPORTER_OTLP_ENDPOINT=otlp)
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S
    )


@pytest.mark.parametrize("page", PAGES)
def test_the_code_of_a_page_runs_as_written(
    page: Page, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = _environment(page, tmp_path, request)
    for folder in LINKED:
        (tmp_path / folder).symlink_to(ROOT / folder)
    if page.python:
        ran = _run([sys.executable, "-c", page.python], tmp_path, env)
        assert ran.returncode == 0, (
            f"{page.name}: Python\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
        )
        _check_output(page, ran.stdout)
    if page.shell:
        ran = _run(["bash", "-c", page.shell], tmp_path, env)
        assert ran.returncode == 0, _failed(page, "sh", ran)


def _failed(page: Page, what: str, ran: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{page.name}: {what} exited {ran.returncode}\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
    )


def _check_output(page: Page, stdout: str) -> None:
    """What a page says its Python prints, where the page's point is the figures."""
    lines = stdout.splitlines()
    if page.name == "README.md":
        assert lines[0].startswith("lead completed $"), stdout
        assert stdout.count("researcher completed") == 3, stdout
    if page.name == "docs/tutorial/index.md":
        assert lines[0].startswith("completed $") and lines[0].endswith(" of $0.05"), lines
        assert sum(line.startswith("  researcher completed") for line in lines) == 3, lines
        assert lines[-1].startswith("interrupted changed my mind"), lines
