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
    with pytest.raises(ToolError, match="no such file") as caught:
        read(box, "absent.txt")
    assert not isinstance(caught.value, PermanentToolError)


# -- paths outside the sandbox: words the model can act on; nothing outside is touched --

CANARY = "canary: the payroll of everyone"


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
    assert content == result.answer == "worker 7 timed out\n"
    assert result.state.own.tool_runs == 2
    assert touched == [box.resolve() / "errors.log"]


async def test_an_absolute_path_to_the_real_outside_file_reads_the_sandbox_one(layout, touched):
    box, outside = layout
    result = await ask(box, str(outside / "errors.log"))
    assert result.status is Status.COMPLETED
    assert result.answer == "worker 7 timed out\n"
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
    assert by_name["list_files"].function() == "errors.log"
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
    assert tools(box)["list_files"].function() == "errors.log"
    with pytest.raises(ToolError, match=r"absolute path.*call list_files") as caught:
        read(box, "/" + "x" * 300)
    assert not isinstance(caught.value, PermanentToolError)
