"""The file catalog: reads are bounded, whatever the file's size; the sandbox holds."""

from __future__ import annotations

import json
import os
import re
import resource
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from orchestra import (
    Agent,
    ChatReply,
    ChatRequest,
    ConfigError,
    Limits,
    PermanentToolError,
    Runner,
    RunResult,
    Status,
    ToolContext,
    ToolError,
    catalog,
)
from orchestra._model.tokens import count_completion, count_prompt
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


def read_text(directory: Path, name: str, **options: int) -> str:
    """What ``read_file(name)`` gives below its title line (checked)."""
    title, text = read(directory, name, **options).split("\n", 1)
    size = (directory / name).stat().st_size
    assert title == f"The text of {name} ({size:,} byte{'s' if size != 1 else ''}):"
    return text


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
        whole = read(tmp_path, "errors.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert rss_growth < 50 * 1024
    assert peak < 2 * 1024 * 1024
    assert len(whole.encode()) <= LIMIT
    text = read_text(tmp_path, "errors.log")
    assert text.startswith("\x00" * 1000)
    assert "[truncated: showing the first" in text
    assert f"of {HUGE:,}; the file is larger than the read limit" in text


async def test_a_truncated_read_passes_the_default_result_bound_unchanged(tmp_path):
    sparse_file(tmp_path / "errors.log", HUGE)
    read_file = tools(tmp_path)["read_file"]
    via_run = await read_file.run({"path": "errors.log"}, context())
    assert via_run == read(tmp_path, "errors.log")
    assert via_run.count("truncated") == 1


TITLE_2048 = len(b"The text of notes.txt (2,048 bytes):\n")


def test_a_file_that_fits_the_limit_with_its_title_is_read_whole(tmp_path):
    body = b"a\r\nb\rc\n\xff" + b"x" * (2048 - 8)
    (tmp_path / "notes.txt").write_bytes(body)
    text = read_text(tmp_path, "notes.txt", max_read_bytes=2048 + TITLE_2048)
    assert text == "a\nb\nc\n\ufffd" + "x" * (2048 - 8)
    assert "truncated" in read(tmp_path, "notes.txt", max_read_bytes=2048 + TITLE_2048 - 1)


def test_truncation_never_cuts_a_character_in_two(tmp_path):
    (tmp_path / "euro.txt").write_text("€" * 1000, encoding="utf-8")  # 3 bytes each
    text = read(tmp_path, "euro.txt", max_read_bytes=1024)
    head, note = read_text(tmp_path, "euro.txt", max_read_bytes=1024).split("\n", 1)
    assert head == "€" * len(head) and len(head) >= 250
    assert note == (
        f"[truncated: showing the first {3 * len(head):,} bytes of 3,000; "
        "the file is larger than the read limit of 1,024 bytes]"
    )
    assert len(text.encode()) <= 1024


def test_one_byte_over_the_limit_is_truncated(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"y" * 1025)
    title = len(b"The text of a.txt (1,025 bytes):\n")
    assert "of 1,025;" in read(tmp_path, "a.txt", max_read_bytes=1024 + title)
    assert read_text(tmp_path, "a.txt", max_read_bytes=1025 + title) == "y" * 1025


def test_a_read_limit_below_1024_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="max_read_bytes"):
        catalog(tmp_path, max_read_bytes=1023)


def test_the_sandbox_still_holds(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    (tmp_path / "secret.txt").write_text("s")
    with pytest.raises(PermanentToolError, match="outside the sandbox"):
        read(box, "../secret.txt")
    with pytest.raises(ToolError, match="no such file") as caught:
        read(box, "absent.txt")
    assert not isinstance(caught.value, PermanentToolError)


# -- paths outside the sandbox: words the model can act on; nothing outside is touched --

CANARY = "canary: the payroll of everyone"
SANDBOX_READ = "The text of errors.log (19 bytes):\nworker 7 timed out\n"
SANDBOX_LISTING = "1 file in the working directory:\nerrors.log: 1 line, 19 bytes"


class Asker:
    """A model that asks ``read_file(first)``, then the file the error names, then
    answers with the last tool result."""

    def __init__(self, first: str) -> None:
        self.first = first

    async def complete(self, request: ChatRequest) -> ChatReply:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        suggested = re.search(r"use '([^']+)'", results[-1]) if results else None
        if not results or (suggested and len(results) == 1):
            path = suggested[1] if suggested else self.first
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{len(results)}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
                    }
                ],
            }
        else:
            message = {"role": "assistant", "content": results[-1]}
        return ChatReply(
            message=message,
            finish_reason="stop",
            prompt_tokens=count_prompt(request.messages, request.tools),
            completion_tokens=count_completion(message),
        )


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A sandbox two levels down, and a directory beside it holding a canary file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(CANARY)
    (outside / "errors.log").write_text(CANARY)
    box = tmp_path / "a" / "box"
    box.mkdir(parents=True)
    (box / "errors.log").write_text("worker 7 timed out\n")
    (box / "link.log").symlink_to(outside / "secret.txt")
    (box / "sub").symlink_to(outside, target_is_directory=True)
    return box, outside


@pytest.fixture
def touched(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path the catalog opens, lists or unlinks (a spy on ``pathlib``, which it uses)."""
    seen: list[Path] = []
    real_open, real_iterdir, real_unlink = Path.open, Path.iterdir, Path.unlink

    def spy_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        seen.append(self)
        return real_open(self, *args, **kwargs)

    def spy_iterdir(self: Path) -> Any:
        seen.append(self)
        return real_iterdir(self)

    def spy_unlink(self: Path, missing_ok: bool = False) -> None:
        seen.append(self)
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "open", spy_open)
    monkeypatch.setattr(Path, "iterdir", spy_iterdir)
    monkeypatch.setattr(Path, "unlink", spy_unlink)
    return seen


def assert_only_inside(box: Path, paths: list[Path]) -> None:
    root = box.resolve()
    for path in paths:
        real = path.resolve()
        assert real == root or root in real.parents, f"touched {path} outside the sandbox"


async def ask(box: Path, first: str) -> RunResult:
    agent = Agent(name="a", model="m", tools=catalog(box), limits=Limits(max_turns=5))
    return await Runner(provider=Asker(first)).run(agent, "Why did the job fail?")


def tool_texts(result: RunResult) -> list[str]:
    return [m["content"] for m in result.state.messages if m["role"] == "tool"]


async def test_an_absolute_path_is_answered_in_words_and_the_model_recovers(layout, touched):
    box, _ = layout
    result = await ask(box, "/var/log/errors.log")
    assert result.status is Status.COMPLETED
    refusal, content = tool_texts(result)
    assert refusal == (
        "Error: '/var/log/errors.log' is an absolute path; paths must be relative to the "
        "working directory: use 'errors.log'."
    )
    assert content == result.answer == SANDBOX_READ
    assert result.state.own.tool_runs == 2
    mine = box.resolve().parent.parent  # not the interpreter's own lazy imports
    assert [p for p in touched if mine in p.parents] == [box.resolve() / "errors.log"]


async def test_an_absolute_path_to_the_real_outside_file_reads_the_sandbox_one(layout, touched):
    box, outside = layout
    result = await ask(box, str(outside / "errors.log"))
    assert result.status is Status.COMPLETED
    assert result.answer == SANDBOX_READ
    assert CANARY not in json.dumps(result.state.messages)
    assert_only_inside(box, touched)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("/etc/shadow", "'/etc/shadow' is an absolute path"),
        ("~/errors.log", "'~/errors.log' starts with '~', which is not expanded"),
        ("errors.log\x00", "the path contains a NUL byte"),
        ("  ", "the path is empty"),
    ],
)
def test_names_that_are_not_relative_paths_are_correctable_errors(layout, touched, name, said):
    box, _ = layout
    with pytest.raises(ToolError) as caught:
        read(box, name)
    assert not isinstance(caught.value, PermanentToolError)
    assert str(caught.value).startswith(said + "; paths must be relative to the working directory")
    hint = (
        "call list_files to see what exists."
        if name.strip() in ("/etc/shadow", "")
        else "use 'errors.log'."
    )
    assert str(caught.value).endswith(hint)
    assert_only_inside(box, touched)


def test_an_absolute_path_inside_the_sandbox_is_refused_too(layout):
    box, _ = layout
    with pytest.raises(ToolError, match=r"absolute path.*: use 'errors\.log'\.$"):
        read(box, str(box / "errors.log"))


def test_a_symlink_is_never_suggested_when_it_leads_out(layout):
    box, _ = layout
    with pytest.raises(ToolError, match="call list_files") as caught:
        read(box, "/tmp/link.log")
    assert "link.log'" not in str(caught.value).split(":", 1)[1]


async def test_dot_dot_out_of_the_sandbox_stops_the_run_failed(layout, touched):
    box, _ = layout
    result = await ask(box, "../../outside/secret.txt")
    assert result.status is Status.FAILED
    assert "outside the sandbox" in result.state.reason
    assert CANARY not in json.dumps(result.state.messages)
    assert_only_inside(box, touched)


@pytest.mark.parametrize("name", ["link.log", "sub/secret.txt", "sub/../../../outside/secret.txt"])
async def test_symlinks_out_of_the_sandbox_are_refused(layout, touched, name):
    box, _ = layout
    result = await ask(box, name)
    assert result.status is Status.FAILED
    assert "outside the sandbox" in result.state.reason
    assert CANARY not in json.dumps(result.state.messages)
    assert_only_inside(box, touched)


def test_nothing_outside_is_listed_or_deleted(layout, touched):
    box, outside = layout
    by_name = tools(box)
    assert by_name["list_files"].function() == SANDBOX_LISTING
    for name in ("link.log", "sub/secret.txt", "../../outside/secret.txt"):
        with pytest.raises(PermanentToolError):
            by_name["delete_file"].function(path=name)
    with pytest.raises(ToolError, match="absolute path"):
        by_name["delete_file"].function(path=str(outside / "secret.txt"))
    assert_only_inside(box, touched)
    assert (outside / "secret.txt").read_text() == CANARY
    assert (box / "link.log").is_symlink()


def test_odd_names_still_get_words_not_os_errors(layout):
    box, _ = layout
    (box / "loop").symlink_to(box / "loop")
    assert tools(box)["list_files"].function() == SANDBOX_LISTING
    with pytest.raises(ToolError, match=r"absolute path.*call list_files") as caught:
        read(box, "/" + "x" * 300)
    assert not isinstance(caught.value, PermanentToolError)


# -- what the tools say: enough for a small model's question, in words ----------------


def test_list_files_gives_each_file_its_lines_and_bytes(tmp_path):
    (tmp_path / "a.log").write_text("one\ntwo\nthree")  # a last line without a newline counts
    (tmp_path / "b.txt").write_text("x\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "dir").mkdir()
    listing = tools(tmp_path)["list_files"].function()
    assert listing == (
        "3 files in the working directory:\n"
        "a.log: 3 lines, 13 bytes\n"
        "b.txt: 1 line, 2 bytes\n"
        "empty: 0 lines, 0 bytes"
    )


def test_list_files_says_when_there_is_nothing(tmp_path):
    assert tools(tmp_path)["list_files"].function() == "The working directory has no files."


def test_list_files_does_not_count_the_lines_of_a_huge_file(tmp_path):
    sparse_file(tmp_path / "huge.bin", HUGE)
    listing = tools(tmp_path)["list_files"].function()
    assert listing.endswith(f"huge.bin: {HUGE:,} bytes (too large to count its lines)")


def test_the_catalog_holds_no_canned_tool(tmp_path):
    assert [t.name for t in catalog(tmp_path)] == [
        "list_files",
        "read_file",
        "search_files",
        "delete_file",
    ]
    from orchestra.testing import demo_tools

    assert [t.name for t in demo_tools(tmp_path)][-1] == "scan_archive"


def test_search_files_finds_word_forms_in_every_file(tmp_path):
    (tmp_path / "errors.log").write_text("INFO start\nERROR worker 7 timed out after 30000 ms\n")
    (tmp_path / "notes.txt").write_text("When a worker times out, restart it.\n")
    (tmp_path / "access.log").write_text("GET /health 200\n")
    found = tools(tmp_path)["search_files"].function(words="timeout")
    assert found == (
        "2 of the 3 files mention 'timeout' (2 lines):\n"
        "errors.log line 2: ERROR worker 7 timed out after 30000 ms\n"
        "notes.txt line 1: When a worker times out, restart it."
    )
    none = tools(tmp_path)["search_files"].function(words="rotating logs")
    assert none == "No line of the 3 files mentions 'rotating logs': no file mentions it."


def test_search_files_wants_every_word_on_one_line(tmp_path):
    (tmp_path / "a.log").write_text("worker 7 timed out\nworker 8 started\n")
    found = tools(tmp_path)["search_files"].function(words="Worker, STARTED")
    assert found.splitlines()[1:] == ["a.log line 2: worker 8 started"]


@pytest.mark.parametrize(
    ("words", "said"), [("", "give one or a few words"), ("a " * 9, "at most 8")]
)
def test_search_files_answers_bad_words_in_words(tmp_path, words, said):
    with pytest.raises(ToolError, match=said):
        tools(tmp_path)["search_files"].function(words=words)


def test_search_files_shows_at_most_forty_lines_and_says_how_many_more(tmp_path):
    (tmp_path / "big.log").write_text("error here\n" * 50)
    lines = tools(tmp_path)["search_files"].function(words="error").splitlines()
    assert lines[0] == "1 of the 1 files mention 'error' (50 lines):"
    assert len(lines) == 42 and lines[-1] == "... and 10 more lines"
