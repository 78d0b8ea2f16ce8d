"""The documentation site builds strictly; the README stays a front door.

``mkdocs build --strict`` fails on a broken link, anchor or API reference, and
on a docstring the reference cannot read. (Each page's code runs in
``test_pages.py``.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_api_reference_lists_every_public_name() -> None:
    import orchestra

    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    listed = {
        line.split("orchestra.", 1)[1]
        for line in page.splitlines()
        if line.startswith("::: orchestra.")
    }
    assert set(orchestra.__all__) <= listed, sorted(set(orchestra.__all__) - listed)
