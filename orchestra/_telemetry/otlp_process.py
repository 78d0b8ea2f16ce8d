"""Span export in a child process: a :class:`~orchestra._telemetry.spans.SpanSink` over a pipe.

The trio thread appends each finished span's record to a batch; when the
batch is full it pickles it and writes it, without blocking, into the stdin
of the export process (:mod:`orchestra._telemetry.otlp_child`), which exports them with the SDK's
OTLP exporter on the machine's other core. Encoding protobuf, the costliest
part of tracing, never holds this process's GIL, and the hot path never
wakes a thread (each wake-up costs the trio thread GIL hand-offs).

- The pipe holds up to 1 MiB (where the OS allows); when it is full, batches
  wait in memory, at most ``max_queue`` spans (more are dropped, counted and
  logged at shutdown, as the SDK's batch processor does).
- A daemon thread ships a partial batch (and anything waiting) every
  ``delay_s``, so spans never wait long for more to come.
- ``force_flush`` waits until the child has exported everything queued before
  the call and returns whether every export since the last flush succeeded
  (unlike the SDK's, which says True even when the export failed), within
  its timeout and a second, whatever the collector does; :attr:`error` says
  why not (``no OTLP collector at URL (connection refused)``).
- ``shutdown`` ships what is left, closes the pipe and waits for the child to
  finish exporting, for ``timeout_s``, after which the child stops retrying
  and drops the rest; it is registered with :mod:`atexit` too.
- The child runs in its own process group and ignores SIGINT, so Ctrl-C in a
  terminal does not lose the spans of the runs it interrupts; it exits when
  the pipe closes, whatever ends this process.
- If the child dies, spans are dropped with one logged warning; runs go on.
- In a fork of this process (``os.fork``, multiprocessing's fork start
  method), spans are dropped: the pipe stays the parent's alone.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

    from .spans import Record

__all__ = ["ExportProcess"]

_log = logging.getLogger("orchestra.otlp")
_PIPE_BYTES = 1 << 20
_ANSWER_S = 4.0
"""How long past its timeout a flush waits for the child's answer (its collector
check). The child answers as soon as its own timeout passes, so this bounds only
a child that is stuck or starved: 1 s was too short on a loaded 2-core machine,
where a flush of 1 s then said "no answer in 2 s" instead of the timeout."""
_EXIT_S = 2.0
"""How long past its grace the child may take to exit (it stops retrying, then exits)."""
_CHILD = "from orchestra._telemetry.otlp_child import main; main()"


class ExportProcess:
    """Ships span records to an OTLP-exporting child process (see the module docstring)."""

    def __init__(
        self,
        *,
        protocol: str,
        endpoint: str | None,
        resource: Resource,
        batch_size: int = 16,
        max_queue: int = 8192,
        delay_s: float = 0.5,
    ) -> None:
        self.resource = resource
        self._batch_size = batch_size
        self._max_queue = max_queue
        self._delay_s = delay_s
        # _lock guards the fields below it; held for microseconds, never across I/O.
        self._lock = threading.Lock()
        self._batch: list[Record] = []
        self._waiting: deque[tuple[bytes, int]] = deque()  # pickled messages, span counts
        self._waiting_spans = 0
        self._broken = False  # the child is gone, or shut down: nothing more is written
        self.dropped = 0
        self.error: str | None = None
        """Why the last :meth:`force_flush` (or the end) failed; None after a flush that did not."""
        self._answers = b""  # read from the child, not yet taken
        self._late = 0  # answers to flushes that stopped waiting, to skip
        # _pipe is held by the one thread writing to the child (or reading its answer).
        self._pipe = threading.Lock()
        self._stop = threading.Event()
        self._process = _spawn(protocol, endpoint)
        self._stdin = _nonblocking_pipe(self._process)
        with self._lock:
            self._enqueue(("resource", dict(resource.attributes), resource.schema_url), 0)
        self._forked = False
        self._thread = threading.Thread(target=self._tick, name="orchestra-otlp", daemon=True)
        self._thread.start()
        atexit.register(self.shutdown)
        _after_fork_in_child(weakref.WeakMethod(self._after_fork))

    # -- the trio thread's side ---------------------------------------------------

    def add(self, record: Record) -> None:
        """Queue one finished span; a full batch is written to the pipe. Never waits on I/O."""
        with self._lock:
            self._batch.append(record)
            if len(self._batch) < self._batch_size:
                return
            self._take_batch()
        if self._pipe.acquire(blocking=False):  # else the thread holding it writes this too
            try:
                self._write(block=False)
            finally:
                self._pipe.release()

    # -- blocking calls (any thread but trio's) -----------------------------------------

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Block until the spans queued so far are exported; True if all exports succeeded.

        Returns within about ``timeout_s`` (plus the child's check for a
        listening collector); when False, :attr:`error` says why.
        """
        deadline = time.monotonic() + timeout_s
        if not self._pipe.acquire(timeout=timeout_s):
            self.error = f"the export process was busy for {timeout_s:g} s"
            return False
        try:
            with self._lock:
                self._take_batch()
                self._enqueue(("flush", timeout_s), 0)
            sent = self._write(block=True, timeout_s=timeout_s)
            answer = self._answer(deadline + _ANSWER_S) if sent else None
        finally:
            self._pipe.release()
        if answer == "ok":
            self.error = None
        elif answer is not None and answer.startswith("failed "):
            self.error = answer.removeprefix("failed ")
        else:
            waited = timeout_s + _ANSWER_S
            gone = answer is None
            self.error = "the export process is gone" if gone else f"no answer in {waited:g} s"
        return self.error is None

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Ship what is queued, close the pipe and wait (bounded) for the child to exit.

        The child exports what is left for up to ``timeout_s``, then stops
        retrying, drops the rest and exits.
        """
        atexit.unregister(self.shutdown)
        if self._forked:
            return  # the export process belongs to the parent
        self._stop.set()
        self._thread.join(timeout_s)
        with self._pipe:
            with self._lock:
                self._take_batch()
                self._enqueue(("end", timeout_s), 0)
            self._write(block=True, timeout_s=timeout_s)
            with self._lock:
                self._broken = True  # spans ended from now on are dropped
            _close(self._process.stdin)  # the child's end of input
        try:
            self._process.wait(timeout_s + _EXIT_S)
        except subprocess.TimeoutExpired:
            _log.warning(
                "the OTLP export process did not finish in %.0f s; killed", timeout_s + _EXIT_S
            )
            self._process.kill()
            self._process.wait()
        last = self._last_answer()
        _close(self._process.stdout)
        if last.startswith("failed ") and self.error is None:  # else a flush said it already
            self.error = last.removeprefix("failed ")
            _log.warning("spans were not exported: %s", self.error)
        if self.dropped:
            _log.warning("%d spans dropped before export", self.dropped)

    # -- shared -------------------------------------------------------------------------

    def _tick(self) -> None:
        """Every ``delay_s``: ship the partial batch and whatever waits."""
        while not self._stop.wait(self._delay_s):
            with self._pipe:
                with self._lock:
                    self._take_batch()
                self._write(block=True)

    def _take_batch(self) -> None:
        """Seal the current batch into a waiting message (the caller holds ``_lock``)."""
        batch, self._batch = self._batch, []
        if batch:
            self._enqueue(("spans", batch), len(batch))

    def _enqueue(self, message: tuple[Any, ...], spans: int) -> None:
        """Pickle ``message`` onto the waiting queue, or drop it (the caller holds ``_lock``)."""
        if self._broken or self._waiting_spans + spans > self._max_queue:
            self.dropped += spans
            return
        self._waiting.append((_pickle(message), spans))
        self._waiting_spans += spans

    def _write(self, *, block: bool, timeout_s: float = 30.0) -> bool:
        """Write waiting messages (the caller holds ``_pipe``); False if the child is gone.

        Without ``block``, stops where the pipe is full; with it, waits for the
        child to read, up to ``timeout_s`` without progress (then it is gone).
        """
        while True:
            with self._lock:
                if self._broken or not self._waiting:
                    return not self._broken
                data = self._waiting[0][0]
            try:
                written = os.write(self._stdin, data)
            except BlockingIOError:
                if not block:
                    return True
                if not select.select([], [self._stdin], [], timeout_s)[1]:
                    self._gone(TimeoutError(f"not reading for {timeout_s:.0f} s"))
                continue
            except OSError as exc:  # BrokenPipeError: the child is gone
                self._gone(exc)
                continue
            self._sent(written)

    def _sent(self, written: int) -> None:
        """Account for ``written`` bytes of the first waiting message (holding ``_pipe``)."""
        with self._lock:
            data, spans = self._waiting[0]
            if written < len(data):
                self._waiting[0] = (data[written:], spans)
            else:
                self._waiting.popleft()
                self._waiting_spans -= spans

    def _answer(self, deadline: float) -> str | None:
        """The child's answer to the latest flush: "" if none came by ``deadline``, None
        if the child is gone (the caller holds ``_pipe``)."""
        stdout = self._process.stdout
        while True:
            while b"\n" not in self._answers:
                remaining = deadline - time.monotonic()
                if stdout is None or not select.select([stdout], [], [], max(remaining, 0))[0]:
                    self._late += 1  # its answer, when it comes, is not the next flush's
                    return ""
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    return None
                self._answers += chunk
            line, self._answers = self._answers.split(b"\n", 1)
            if not self._late:
                return line.decode(errors="replace")
            self._late -= 1

    def _last_answer(self) -> str:
        """The child's answer at the end (its last line), once it has exited."""
        stdout = self._process.stdout
        with contextlib.suppress(OSError, ValueError):  # closed, or never opened
            while stdout is not None and (chunk := os.read(stdout.fileno(), 1 << 16)):
                self._answers += chunk
        lines = self._answers.decode(errors="replace").splitlines()
        return lines[-1] if lines else ""

    def _after_fork(self) -> None:
        """In a forked copy of this process: drop spans, leave the parent's pipe alone.

        Two writers on one pipe would interleave their messages; spans ended
        in the fork are dropped (counted), as after shutdown.
        """
        self._forked = True
        self._lock = threading.Lock()  # it may have been held by another thread at fork
        self._pipe = threading.Lock()
        self._broken = True
        self._waiting.clear()
        self._waiting_spans = 0
        self._batch = []
        _close(self._process.stdin)
        _close(self._process.stdout)

    def _gone(self, exc: Exception) -> None:
        with self._lock:
            self._broken = True
            self.dropped += self._waiting_spans
            self._waiting.clear()
            self._waiting_spans = 0
        _log.warning("the OTLP export process is gone (%s); spans are dropped", exc)


def _pickle(message: tuple[Any, ...]) -> bytes:
    """The message; a span whose attributes cannot be pickled is dropped, not its batch."""
    try:
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        if message[0] != "spans":
            raise
    kept = [r for r in message[1] if _picklable(r)]
    lost = len(message[1]) - len(kept)
    _log.warning("%d spans dropped: attributes that cannot be exported", lost)
    return pickle.dumps(("spans", kept), protocol=pickle.HIGHEST_PROTOCOL)


def _picklable(record: Record) -> bool:
    try:
        pickle.dumps(record)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return True


def _after_fork_in_child(method: weakref.WeakMethod[Any]) -> None:
    """Call ``method`` in a forked child, while its object lives (not keeping it alive)."""

    def call() -> None:
        bound = method()
        if bound is not None:
            bound()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=call)


def _nonblocking_pipe(process: subprocess.Popen[bytes]) -> int:
    """The child's stdin as a non-blocking descriptor with a large buffer."""
    assert process.stdin is not None
    fd = process.stdin.fileno()
    os.set_blocking(fd, False)
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        with contextlib.suppress(OSError):  # the OS keeps its default size
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    return fd


def _close(stream: IO[bytes] | None) -> None:
    """Close one of the child's pipes (already broken if the child is gone)."""
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()


def _spawn(protocol: str, endpoint: str | None) -> subprocess.Popen[bytes]:
    """The export process, running this copy of orchestra whatever the cwd (``-P``: not
    the cwd's; ``-c``, not ``-m``, which warns when the package already imported the module)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-P", "-c", _CHILD, "--protocol", protocol]
    if endpoint:
        command += ["--endpoint", endpoint]
    return subprocess.Popen(  # its own process group: a terminal's Ctrl-C does not reach it
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, process_group=0
    )
