"""The documentation site builds strictly, and its code runs as written.

``mkdocs build --strict`` fails on a broken link, anchor or API reference, and
on a docstring the reference cannot read. Each page's Python blocks run in
order as one script (in a fresh process, in an empty directory), and each
``orchestra`` command of its shell blocks runs; a page whose code stopped
working fails here, not in a reader's hands.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
RUN = ("README.md", "docs/index.md", "docs/tutorial.md", "docs/concepts/budgets.md",
       "docs/concepts/exits.md", "docs/guides/testing.md")  # fmt: skip
"""Pages whose code runs here, as written."""
NOT_YET = ("demo", "library", "console", "mcp", "scale-out", "benchmarks", "examples", "layout")
"""Guides moved from the README whose blocks mix snippets, commands that need a
service (an endpoint, PostgreSQL, Jaeger) and commands meant to fail: their
code is not run here yet (each script of examples/ is, by test_examples)."""
PAGES = [ROOT / page for page in RUN]


def blocks(page: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def test_every_page_is_run_here_or_said_not_to_be() -> None:
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md")}
    generated = {"docs/changelog.md", "docs/reference/api.md", "docs/reference/cli.md"}
    said = {*RUN, *(f"docs/guides/{name}.md" for name in NOT_YET), *generated}
    assert pages <= said, sorted(pages - said)


def test_the_readme_is_a_front_door() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="pip install -e '.[docs]'")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert 'id="orchestra.Runner.grant"' in api  # the reference is generated from the code
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "orchestra grant" in cli


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.stem)
def test_the_python_of_a_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    script = "\n\n".join(blocks(page, "python"))
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    if page.name == "README.md":
        assert ran.stdout.splitlines()[0].startswith("lead completed $"), ran.stdout
        assert ran.stdout.count("researcher completed") == 3, ran.stdout
    if page.stem == "tutorial":
        lines = ran.stdout.splitlines()
        assert lines[0].startswith("completed $") and lines[0].endswith(" of $0.05"), lines
        assert sum(line.startswith("  researcher completed") for line in lines) == 3, lines
        assert lines[-1].startswith("interrupted changed my mind"), lines


def _commands(page: Path) -> list[str]:
    lines = (
        line.split("#")[0].strip() for body in blocks(page, "sh") for line in body.splitlines()
    )
    return [line for line in lines if line.startswith("orchestra ")]


@pytest.mark.parametrize("page", [p for p in PAGES if _commands(p)], ids=lambda p: p.stem)
def test_the_commands_of_a_page_run(page: Path, tmp_path: Path) -> None:
    for command in _commands(page):
        args = shlex.split(command)[1:]
        ran = subprocess.run(
            [sys.executable, "-m", "orchestra", *args, "--store", str(tmp_path / "runs.db")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, (command, ran.stderr[-2000:])
