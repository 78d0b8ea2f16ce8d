"""Testing helpers: a scripted, deterministic OpenAI-shaped provider and its sandbox.

The scripted provider answers chat completions with a pure function of the
request (:func:`reply`); the request's ``model`` names a scenario from
:data:`SCENARIOS`. Use it over a real socket (:func:`serve_scripted`,
:func:`scripted_server`) or in-process (:class:`ScriptedTransport`). Its
scenarios call tools that work on the files of :data:`SANDBOX_FILES`;
:func:`make_sandbox` writes them to a directory; :func:`demo_tools` is the
catalog plus the scenarios' canned slow ``scan_archive``. :class:`InMemorySpanSink`
keeps the spans of a :class:`~orchestra.RecordingTracerProvider` for assertions.
:class:`FakeProvider` plays fixed assistant messages without HTTP (build them
with :func:`tool_calls` and :data:`DONE`).
"""

from __future__ import annotations

from .._recipes.demo import demo_agent, demo_task
from .._scripted import make_sandbox
from .._scripted.scenarios import SANDBOX_FILES, SCENARIOS, Scenario, ScriptError, reply
from .._scripted.server import scripted_server, serve_scripted
from .._scripted.tools import demo_tools, scan_archive
from ._fake import DONE, FakeProvider, tool_calls
from ._spans import InMemorySpanSink
from ._transport import ScriptedTransport

__all__ = [
    "DONE",
    "SANDBOX_FILES",
    "SCENARIOS",
    "FakeProvider",
    "InMemorySpanSink",
    "Scenario",
    "ScriptError",
    "ScriptedTransport",
    "demo_agent",
    "demo_task",
    "demo_tools",
    "make_sandbox",
    "reply",
    "scan_archive",
    "scripted_server",
    "serve_scripted",
    "tool_calls",
]
