"""`--otlp` with no collector: one warning line, a bounded wait, and a summary that says so."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from orchestra._telemetry.otel import configure_otlp, finish_export

ORCHESTRA = [sys.executable, "-c", "from orchestra._cli.main import run; run()"]


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent() -> Iterator[str]:
    """An endpoint that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def demo(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [*ORCHESTRA, "demo", "plan", "--otlp", *args], capture_output=True, text=True, timeout=60
    )
    return done, time.monotonic() - started


def test_the_cli_warns_once_and_says_the_trace_was_not_exported() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    done, elapsed = demo("--otlp-endpoint", endpoint)
    assert done.returncode == 0, done.stderr
    started, stop, *said = done.stderr.splitlines()
    assert started.startswith("run run_") and started.endswith(" started")
    assert stop.startswith("  stop it with: orchestra cancel run_")
    assert said == [
        f"warning: spans were not exported: no OTLP collector at {endpoint}/v1/traces "
        "(connection refused)"
    ]  # no exporter retries, no RuntimeWarning about orchestra._telemetry.otlp_child
    assert done.stdout.splitlines()[-1] == "trace: not exported"
    assert elapsed < 8  # it used to hang 9 s at exit after the run, on top of the run itself


def test_the_json_report_says_whether_the_spans_were_exported() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    done, _ = demo("--otlp-endpoint", endpoint, "--otlp-protocol", "grpc", "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stderr.splitlines()) == 3  # the run started (two lines), and this
    assert "no OTLP collector at 127.0.0.1:" in done.stderr
    out = json.loads(done.stdout)
    assert out["spans_exported"] is False
    assert out["status"] == "completed"


def test_a_missing_collector_is_noticed_at_its_first_refusal() -> None:
    provider = configure_otlp(endpoint=f"http://127.0.0.1:{free_port()}")
    provider.get_tracer("t").start_span("lost").end()
    started = time.monotonic()
    why = finish_export(provider, timeout_s=20)
    assert why is not None and why.startswith("no OTLP collector at http://127.0.0.1:")
    assert time.monotonic() - started < 10  # not the 20 s allowed: refused is final enough
    assert provider.sink._process.returncode == 0  # type: ignore[attr-defined]


def test_a_collector_that_never_answers_costs_the_flush_timeout_and_no_more(silent: str) -> None:
    provider = configure_otlp(endpoint=silent)
    provider.get_tracer("t").start_span("stuck").end()
    started = time.monotonic()
    why = finish_export(provider, timeout_s=1)
    elapsed = time.monotonic() - started
    assert why == f"the export to {silent}/v1/traces did not finish in 1 s"
    # 1 s, the answer (within 4 s more however loaded the machine), and the
    # export process stopping its retries
    assert elapsed < 9
    assert provider.sink._process.returncode is not None  # type: ignore[attr-defined]


def test_without_a_flush_the_end_logs_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    provider = configure_otlp(endpoint=f"http://127.0.0.1:{free_port()}")
    provider.get_tracer("t").start_span("lost").end()
    provider.shutdown(timeout_millis=1000)  # what a library's atexit does, sooner
    (record,) = [r for r in caplog.records if r.name == "orchestra.otlp"]
    assert record.getMessage().startswith("spans were not exported: no OTLP collector at ")


def test_after_a_failed_flush_the_end_says_nothing_more(caplog: pytest.LogCaptureFixture) -> None:
    provider = configure_otlp(endpoint=f"http://127.0.0.1:{free_port()}")
    provider.get_tracer("t").start_span("lost").end()
    assert finish_export(provider) is not None
    assert [r for r in caplog.records if r.name == "orchestra.otlp"] == []
