"""The file catalog: reads are bounded, whatever the file's size; the sandbox holds."""

from __future__ import annotations

import os
import resource
import tracemalloc
from pathlib import Path

import pytest

from orchestra import ConfigError, PermanentToolError, ToolContext, ToolError, catalog
from orchestra._tools import Tool

HUGE = 200 * 1024 * 1024
LIMIT = 64 * 1024


def tools(directory: Path, **options: int) -> dict[str, Tool]:
    """The catalog over ``directory``, by tool name."""
    return {t.name: t for t in catalog(directory, **options)}


def read(directory: Path, name: str, **options: int) -> str:
    """``read_file(name)``, called directly."""
    result = tools(directory, **options)["read_file"].function(path=name)
    assert isinstance(result, str)
    return result


def sparse_file(path: Path, size: int) -> Path:
    """A file of ``size`` zero bytes that takes no disk space."""
    path.touch()
    os.truncate(path, size)
    return path


def context() -> ToolContext:
    return ToolContext(run_id="r", call_id="c", tool="read_file", idempotency_key="r:c")


def test_a_huge_file_is_read_without_loading_it(tmp_path):
    sparse_file(tmp_path / "errors.log", HUGE)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    try:
        text = read(tmp_path, "errors.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert rss_growth < 50 * 1024
    assert peak < 2 * 1024 * 1024
    assert len(text.encode()) <= LIMIT
    assert text.startswith("\x00" * 1000)
    assert "[truncated: showing the first" in text
    assert f"of {HUGE:,}; the file is larger than the read limit" in text


async def test_a_truncated_read_passes_the_default_result_bound_unchanged(tmp_path):
    sparse_file(tmp_path / "errors.log", HUGE)
    read_file = tools(tmp_path)["read_file"]
    via_run = await read_file.run({"path": "errors.log"}, context())
    assert via_run == read(tmp_path, "errors.log")
    assert via_run.count("truncated") == 1


def test_a_file_at_the_limit_is_read_whole_as_before(tmp_path):
    body = b"a\r\nb\rc\n\xff" + b"x" * (2048 - 8)
    (tmp_path / "notes.txt").write_bytes(body)
    text = read(tmp_path, "notes.txt", max_read_bytes=2048)
    assert text == "a\nb\nc\n\ufffd" + "x" * (2048 - 8)


def test_truncation_never_cuts_a_character_in_two(tmp_path):
    (tmp_path / "euro.txt").write_text("€" * 1000, encoding="utf-8")  # 3 bytes each
    text = read(tmp_path, "euro.txt", max_read_bytes=1024)
    head, note = text.split("\n", 1)
    assert head == "€" * len(head) and len(head) >= 250
    assert note == (
        f"[truncated: showing the first {3 * len(head):,} bytes of 3,000; "
        "the file is larger than the read limit of 1,024 bytes]"
    )
    assert len(text.encode()) <= 1024


def test_one_byte_over_the_limit_is_truncated(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"y" * 1025)
    assert "of 1,025;" in read(tmp_path, "a.txt", max_read_bytes=1024)
    assert read(tmp_path, "a.txt", max_read_bytes=1025) == "y" * 1025


def test_a_read_limit_below_1024_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="max_read_bytes"):
        catalog(tmp_path, max_read_bytes=1023)


def test_the_sandbox_still_holds(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    (tmp_path / "secret.txt").write_text("s")
    with pytest.raises(PermanentToolError, match="outside the sandbox"):
        read(box, "../secret.txt")
    with pytest.raises(ToolError, match="no such file"):
        read(box, "absent.txt")
