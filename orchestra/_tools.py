"""Tools: what a model may call, with a JSON-schema contract.

A :class:`Tool` pairs a JSON schema with a function. :func:`tool` builds one
from a typed Python function. Arguments are validated before the function
runs; a bad call never reaches it.

Cancellation: a tool runs inside its run's cancel scope. An ``async`` tool is
cancelled at its next checkpoint (``await trio.sleep``, I/O...), so a slow or
waiting tool stops at once when its run is cancelled or hits its deadline. A
plain (sync) function runs on the trio thread and cannot be interrupted (keep
it quick) unless its call has a time limit (``timeout_s``): then it runs in a
worker thread that is *abandoned* on a cancel or a timeout. A thread cannot be
killed: it runs on to its end in the background and what it returns is
dropped.

Hostile input and output: an argument string above ``MAX_ARGUMENT_BYTES`` or
nested deeper than ``MAX_ARGUMENT_DEPTH`` is refused before it is decoded (so
neither ``json`` nor ``jsonschema`` can exhaust the stack), and whatever a tool
returns is cut to ``ToolContext.max_result_bytes`` by :func:`bound_result`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Generic

import attrs
import trio

from ._deps import DepsT
from ._exceptions import ConfigError
from ._schema import check_schema, schema_of
from ._storable import MAX_DEPTH, MAX_JSON_BYTES, NotStorable, decoded, too_deep, valid_text
from .wire import RemoteCall

if typing.TYPE_CHECKING:
    import jsonschema

    from ._state import Limits

__all__ = [
    "ChildAgent",
    "ReconcileHook",
    "Reconciled",
    "Tool",
    "ToolContext",
    "ToolInputError",
    "bound_result",
    "tool",
]

MAX_ARGUMENT_BYTES = MAX_JSON_BYTES
"""The largest argument string (UTF-8 bytes) a tool call may carry."""
MAX_ARGUMENT_DEPTH = MAX_DEPTH
"""The deepest nesting of arrays and objects a call's arguments may have."""
DEFAULT_RESULT_BYTES = 64 * 1024
"""The default bound on a tool result's size (UTF-8 bytes)."""
MIN_RESULT_BYTES = 1024
"""The smallest result bound a policy may set."""
NOTE_BYTES = 200
"""Room kept for a truncation note: a cut result, note included, fits its limit."""


@attrs.frozen
class Reconciled:
    """What a tool's reconcile hook learnt of a write in doubt: it took effect
    (:meth:`done`, with the result the model is told), it did not
    (:meth:`not_done`: the write runs again, once), or nobody can tell
    (:meth:`unknown`, why: a human is asked, as without a hook)."""

    outcome: typing.Literal["done", "not_done", "unknown"]
    said: str = ""
    """The result (done) or why it cannot tell (unknown)."""

    @classmethod
    def done(cls, result: str) -> Reconciled:
        """The write took effect; ``result`` is what its call returns."""
        return cls("done", str(result))

    @classmethod
    def not_done(cls) -> Reconciled:
        """The write did not take effect: it may run again."""
        return cls("not_done")

    @classmethod
    def unknown(cls, why: str) -> Reconciled:
        """Nobody can tell (``why``): a human decides."""
        return cls("unknown", str(why))


ReconcileHook = Callable[[Mapping[str, Any], str], "Reconciled | Awaitable[Reconciled]"]
"""``hook(arguments, idempotency_key)``: whether a write's call took effect (see
:class:`Reconciled`); sync or async."""


class ChildAgent(typing.Protocol):
    """What :meth:`ToolContext.run_child` starts: an :class:`~orchestra.Agent`.

    A protocol rather than the class because agents hold tools, so this module
    cannot import them; a value that is not an ``Agent`` is refused when the
    child is started (``ConfigError``)."""

    @property
    def name(self) -> str: ...

    @property
    def limits(self) -> Limits: ...


class Spawn(typing.Protocol):
    """How a tool call starts a child run: the call's run spawns ``agent`` on
    ``task`` under ``limits`` (carved from its own); awaited, the child's answer."""

    def __call__(
        self, agent: ChildAgent, task: str, *, limits: Limits | None = None, deps: Any = None
    ) -> Awaitable[str]: ...


Hold = Callable[[float], "contextlib.AbstractAsyncContextManager[RemoteCall]"]
"""How a tool call holds a share of its run's budget for another service."""


@attrs.define(kw_only=True, eq=False)
class ToolContext(Generic[DepsT]):
    """What a running tool knows about its call.

    ``deps`` are the run's dependencies (see :mod:`orchestra._deps`): annotate
    the parameter ``ctx: ToolContext[MyDeps]`` and a type checker follows them.

    ``idempotency_key`` is stable for one logical call (same run, same call id)
    across retries and processes: pass it to a service that deduplicates writes.
    ``max_result_bytes`` bounds the text :meth:`Tool.run` returns (see
    :func:`bound_result`). ``timeout_s`` is the call's time limit, if it has
    one (a sync tool then runs in a worker thread).
    """

    run_id: str
    call_id: str
    tool: str
    idempotency_key: str
    max_result_bytes: int = DEFAULT_RESULT_BYTES
    timeout_s: float | None = None
    deps: DepsT = None  # type: ignore[assignment]  # None: the run was given none
    _progress: Callable[[str], None] = attrs.field(alias="progress", default=lambda _l: None)
    _spawn: Spawn | None = attrs.field(alias="spawn", default=None)
    _hold: Hold | None = attrs.field(alias="hold", default=None)

    def progress(self, label: str) -> None:
        """Report progress (shown live by the CLI, written to the trace)."""
        self._progress(label)

    def run_child(
        self, agent: ChildAgent, task: str, *, limits: Limits | None = None, deps: Any = None
    ) -> Awaitable[str]:
        """Run ``agent`` on ``task`` as a child of this call's run; await its answer as text.

        The child's limits are carved from what this run has left; if nothing is
        left it is not started and the text says why. Cancelling this run
        cancels the child. ``deps``: the child's dependencies (None: this
        run's). (An awaitable, returned rather than awaited here, so the
        child's stack is a frame shorter.)
        """
        if self._spawn is None:
            raise RuntimeError("this tool context cannot start child runs")
        return self._spawn(agent, task, limits=limits, deps=deps)

    def remote(self, *, usd: float) -> contextlib.AbstractAsyncContextManager[RemoteCall]:
        """Hold up to ``usd`` of this run's budget for a call to another agent
        service (see :mod:`orchestra.wire`): ``async with ctx.remote(usd=0.01) as
        call:`` send ``call.headers()`` with the request, ``call.report(spent)``
        what the service said its tree spent. The run is charged that once the
        block ends, or all it held if nothing was reported.

        Raises:
            ToolError: nothing is left to hold (as the tool's error).
        """
        if self._hold is None:
            raise RuntimeError("this tool context cannot call other services")
        return self._hold(usd)


ToolFunction = Callable[..., Any]


class ToolInputError(Exception):
    """The model's call could not be turned into valid arguments (internal)."""


def check_timeout(what: str, value: float | None) -> None:
    """Refuse a time limit that is not a number of seconds above 0 (``inf``: none).

    Raises:
        ConfigError: naming ``what`` and the value.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{what} must be a number of seconds > 0 (or None), got {value!r}")


@attrs.frozen(kw_only=True)
class Tool:
    """A tool the model may call.

    ``read_only`` tools may run concurrently, be deduplicated and be re-run
    after a crash; anything else is a write: run in order, never cached, and
    in doubt after a crash unless ``idempotent``.

    ``timeout_s`` bounds one call (``None``: the policy's ``tool_timeout_s``;
    ``inf``: no limit). A read that runs out of time is answered "timed out
    after N s"; a write that does is *in doubt*, like one a crash cut short.

    ``reconcile`` settles a write in doubt by asking the world: called with the
    call's arguments and idempotency key when the run goes on (a resume, in any
    process), before anyone is asked; see :class:`Reconciled`.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: ToolFunction
    read_only: bool = False
    needs_approval: bool = False
    idempotent: bool = False
    takes_context: bool = False
    timeout_s: float | None = None
    agent: Any = attrs.field(default=None, eq=False, repr=False)
    """For a tool made by :meth:`Agent.as_tool`: the agent each call runs as a
    child (so a worker of another process can find it by name)."""
    spawns: bool = False
    """Its calls start a child run (``ctx.run_child``): the calls of one reply
    to such tools share their run's budget (see :class:`~orchestra.Carving`).
    Tools made by :meth:`Agent.as_tool` do, whatever this says."""
    reconcile: ReconcileHook | None = attrs.field(default=None, eq=False, repr=False)
    """How to learn whether a call in doubt took effect (a write's; see above)."""
    _validator: jsonschema.Draft202012Validator = attrs.field(init=False, repr=False, eq=False)
    _surely_valid: Callable[[dict[str, Any]], bool] | None = attrs.field(
        init=False, repr=False, eq=False
    )

    def __attrs_post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ConfigError(f"tool name {self.name!r} must match [A-Za-z0-9_-]{{1,64}}")
        check_timeout(f"tool {self.name}: timeout_s", self.timeout_s)
        import jsonschema  # on first use: the command line starts without it

        check_schema(dict(self.parameters), f"tool {self.name}: parameters")
        validator = jsonschema.Draft202012Validator(dict(self.parameters))
        object.__setattr__(self, "_validator", validator)
        object.__setattr__(self, "_surely_valid", plain_object_check(self.parameters))

    def spec(self) -> dict[str, Any]:
        """The tool as declared in a chat-completions request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        """Decode and validate the model's argument string.

        Raises:
            ToolInputError: with a message the model can act on.
        """
        args = _decode_arguments(raw or "{}")
        if not isinstance(args, dict):
            raise ToolInputError("arguments must be a JSON object")
        if self._surely_valid is not None and self._surely_valid(args):
            return args
        try:
            errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.path))
        except RecursionError:
            raise ToolInputError(str(too_deep("arguments are"))) from None
        if errors:
            raise ToolInputError("; ".join(_describe(e) for e in errors))
        return args

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Call the function with validated ``args``; the result as text.

        Cancellation: a checkpoint. An async function stops at its next
        checkpoint. A sync one runs on the trio thread, uncancellable, unless
        ``ctx.timeout_s`` is set: then in a worker thread, abandoned (left to
        run on, its result dropped) when the call is cancelled.
        """
        kwargs = dict(args)
        if self.takes_context:
            kwargs["ctx"] = ctx
        if ctx.timeout_s is None or inspect.iscoroutinefunction(self.function):
            result = self.function(**kwargs)
        else:
            result = await _in_thread(self.function, kwargs, ctx if self.takes_context else None)
        if inspect.isawaitable(result):
            result = await result
        text = result if isinstance(result, str) else json.dumps(result)
        return bound_result(text, ctx.max_result_bytes)


async def _in_thread(fn: ToolFunction, kwargs: dict[str, Any], ctx: ToolContext | None) -> Any:
    """``fn(**kwargs)`` in a worker thread, abandoned if this task is cancelled.

    The function's ``ctx.progress`` reports hop back to the trio thread; once
    the call was abandoned they are dropped.
    """
    abandoned = False

    def progress(label: str) -> None:
        if not abandoned and ctx is not None:  # a tool abandoned on cancel no longer reports
            trio.from_thread.run_sync(ctx.progress, label)  # events are emitted on trio's thread

    if ctx is not None:
        kwargs["ctx"] = attrs.evolve(ctx, progress=progress)
    try:
        # abandoned on cancel: a sync tool cannot be interrupted, so the run stops at
        # once and the thread finishes (or not) on its own; its result is ignored
        return await trio.to_thread.run_sync(partial(fn, **kwargs), abandon_on_cancel=True)
    finally:
        abandoned = True


def _decode_arguments(raw: str) -> Any:
    """``raw`` as JSON that can be kept (see :mod:`orchestra._storable`: size and
    depth are checked before it is decoded, lone surrogates and integers out of
    range after), or the refusal in words."""
    try:
        return decoded(raw, "arguments are")
    except NotStorable as exc:
        raise ToolInputError(str(exc)) from None


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def utf8_prefix(data: bytes, size: int) -> bytes:
    """The first ``size`` bytes of ``data``, less any UTF-8 character cut in two."""
    if len(data) <= size:
        return data
    cut = max(size, 0)
    while cut > max(size - 3, 0) and data[cut] & 0xC0 == 0x80:  # a continuation byte
        cut -= 1
    return data[:cut]


def bound_result(text: str, limit: int) -> str:
    """``text`` if its UTF-8 size is at most ``limit``; else its start and a note.

    The start is cut on a character boundary so that start and note together
    fit in ``limit`` bytes (for any limit above ``NOTE_BYTES``); the note says
    the result was truncated and gives its full size. Bounding twice changes
    nothing more. Lone surrogates (not valid Unicode, so not storable) become
    U+FFFD first.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a file name read with surrogateescape)
        text = valid_text(text)
        data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    head = utf8_prefix(data, limit - NOTE_BYTES)
    note = f"[truncated: the result was {len(data):,} bytes; showing the first {len(head):,} bytes]"
    return f"{head.decode('utf-8')}\n{note}"


_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
"""JSON Schema types a plain check knows, and the Python types that surely are one
(``type(x) in ...``: a bool is not an integer here, though Python says it is)."""
_PLAIN_KEYWORDS = frozenset({"type", "description", "title", "default", "examples"})
"""Keywords a plain property may have: its type, and annotations that never fail a value."""
_PLAIN_OBJECT_KEYWORDS = frozenset(
    {"type", "description", "title", "properties", "required", "additionalProperties"}
)
"""Keywords a plain object schema may have."""


def plain_object_check(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A quick check for a *plain* object schema, or None if ``schema`` is not one.

    Plain: ``type: object``, ``properties`` each of one scalar type (string,
    integer, number, boolean; annotations such as a description or default
    allowed), ``required``, ``additionalProperties`` true, false or absent,
    nothing else. What most tools declare, and what :func:`schema_from_function`
    derives from scalar parameters. The check is at most as lenient as
    jsonschema: True means valid; False means "ask jsonschema" (which also
    words the errors).
    """
    properties, required = schema.get("properties", {}), schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if (
        schema.get("type") != "object"
        or not set(schema) <= _PLAIN_OBJECT_KEYWORDS
        or type(extra) is not bool
        or not isinstance(properties, Mapping)
        or not isinstance(required, list)
    ):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, Mapping) or not set(sub) <= _PLAIN_KEYWORDS:
            return None
        if (kinds := _PLAIN_TYPES.get(str(sub.get("type")))) is None:
            return None
        types[name] = kinds
    needed = frozenset(required)

    def surely_valid(args: dict[str, Any]) -> bool:
        if not needed <= args.keys() or (not extra and not args.keys() <= types.keys()):
            return False
        return all(type(v) in types.get(k, (type(v),)) for k, v in args.items())

    return surely_valid


def _describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


# -- deriving a schema from a typed function ---------------------------------


def _arg_docs(doc: str) -> dict[str, str]:
    found: dict[str, str] = {}
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    for line in section.splitlines():
        match = re.match(r"\s+(\w+)(?: \(.*?\))?:\s*(.+)", line)
        if match:
            found[match[1]] = match[2].strip()
        elif line.strip() and not line.startswith((" ", "\t")):
            break
    return found


def schema_from_function(fn: ToolFunction) -> tuple[dict[str, Any], bool]:
    """A JSON schema for ``fn``'s parameters, and whether it takes ``ctx``."""
    hints = typing.get_type_hints(fn)
    docs = _arg_docs(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    takes_context = False
    for name, param in inspect.signature(fn).parameters.items():
        hint = hints.get(name)
        if name == "ctx" or ToolContext in (hint, typing.get_origin(hint)):
            takes_context = True
            continue
        prop = schema_of(hints.get(name, str))
        if name in docs:
            prop["description"] = docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            prop["default"] = param.default
        properties[name] = prop
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return schema, takes_context


@typing.overload
def tool(fn: ToolFunction, /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    needs_approval: bool = False,
    idempotent: bool = False,
    timeout_s: float | None = None,
    reconcile: ReconcileHook | None = None,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    needs_approval: bool = False,
    idempotent: bool = False,
    timeout_s: float | None = None,
    reconcile: ReconcileHook | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` from a typed function (sync or async).

    The description is the docstring's first paragraph; parameter descriptions
    come from its ``Args:`` section. A parameter named ``ctx`` (or annotated
    :class:`ToolContext`) receives the call's context and is not in the schema.
    Usable bare (``@tool``) or with options (``@tool(read_only=True)``);
    ``timeout_s`` limits each call, ``reconcile`` settles a write in doubt
    (see :class:`Tool`).
    """

    def build(f: ToolFunction) -> Tool:
        schema, takes_context = schema_from_function(f)
        doc = (inspect.getdoc(f) or "").split("\n\n", 1)[0].strip()
        return Tool(
            name=name or f.__name__,
            description=description or doc or f.__name__,
            parameters=schema,
            function=f,
            read_only=read_only,
            needs_approval=needs_approval,
            idempotent=idempotent,
            takes_context=takes_context,
            timeout_s=timeout_s,
            reconcile=reconcile,
        )

    return build(fn) if fn is not None else build
