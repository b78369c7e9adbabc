"""The `Tool` that `define_tool` declares (`toren.agent._define`): its contract and running it.

A worker runs a tool with `Tool.call` (the handler in a thread of its own if it is sync, its
return value encoded as the text the model sees); `Tool.spec` is the contract every other side
reads, the `ToolSpec` a run records once in history, `list_tools` shows and `toren check` prints.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import os
import types
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from toren.agent._context import ToolContext, ToolResult, Variable
from toren.agent._spec import ToolSpec
from toren.errors import ToolError

__all__ = [
    "Approval",
    "Effects",
    "ExecutionMode",
    "Handler",
    "Idempotency",
    "Tool",
    "encode_result",
]

Effects = Literal["none", "sandbox", "external"]
Idempotency = Literal["keyed", "none"]
Approval = Literal["never", "always"] | Callable[[Any], bool]
ExecutionMode = Literal["local", "provider"]
Handler = Callable[[Any, "ToolContext"], Any | Awaitable[Any]]


_AS_DECLARED = (
    "description", "schema", "effects", "idempotency", "timeout_ms", "max_attempts",
    "approval_timeout_s", "native", "execution_mode", "execution_provider", "progress_argument",
)  # fmt: skip
"""`ToolSpec` fields a tool's spec takes as the tool declares them (the rest are derived)."""


@dataclass
class Tool:
    """A tool as declared by `define_tool`; `toren.agent._define` shows the contract."""

    name: str | None
    """Tool name the model sees; `None` until discovery gives it the file's stem."""
    description: str
    """What the tool does, for the model."""
    handler: Handler | None
    """`handler(args, ctx) -> str` (sync or async); dicts and lists are JSON-encoded. `None`
    only for a tool the provider runs (`execution_mode="provider"`)."""
    input: Any = None
    """A pydantic model class, a JSON Schema dict, or `None` for no arguments."""
    effects: Effects = "none"
    """`none` (pure lookup), `sandbox` (recoverable writes) or `external` (the world sees it)."""
    idempotency: Idempotency = "keyed"
    """`keyed`: a stable `ctx.idempotency_key` per call; `none`: duplicates are harmless."""
    approval: Approval = "never"
    """`never`, `always`, or a predicate over the validated args."""
    timeout_ms: int | None = None
    """A call running longer returns `tool X timed out after Nms` to the model."""
    max_attempts: int | None = None
    """Starts of one call (after worker deaths) before it fails closed; `None`: at-least-once."""
    approval_timeout_s: float | None = None
    """Seconds a gated call waits for a decision before it is denied; `None`: forever."""
    uses: tuple[str, ...] = ()
    """Tools this one may call with `ctx.invoke_tool` (checked when the agent loads)."""
    variables: tuple[Variable, ...] = ()
    """Env values this tool needs, resolved from the worker's environment before each call."""
    native: str | None = None
    """For built-ins the workflow runs itself (`run_process`, `check_run`); not an activity."""
    workspace: bool = False
    """Works in the run's workspace without writing to it (`read_file`): its calls are ordered
    with the workspace's writers. `effects="sandbox"` implies it."""
    annotations: dict[str, Any] = field(default_factory=dict)
    """Free JSON metadata for consumers (UIs, catalogues); toren only shows and records it."""
    progress_argument: str | None = None
    """The argument (a property of `input`) that describes the operation in progress."""
    execution_mode: ExecutionMode = "local"
    """`local`: toren runs the handler as an activity; `provider`: the model's provider runs the
    tool inside the model call and its result comes back in the model's reply."""
    execution_provider: str | None = None
    """For `provider` mode: whose tool it is (`anthropic`); the agent's model must be theirs."""
    provider_options: dict[str, Any] = field(default_factory=dict)
    """For `provider` mode: keys merged into the provider's tool declaration (`max_uses`)."""
    schema: dict[str, Any] = field(default_factory=dict)
    """The JSON Schema the model sees, derived from `input`."""
    source: str | None = None
    """The file the tool was loaded from, for error messages."""

    @property
    def in_workspace(self) -> bool:
        """Whether its calls work in the run's workspace, and so run in order with the others.

        Declared (`effects="sandbox"`; `workspace` for toren's `read_file`), or seen in the
        handler's code: a handler that names `ctx.run_code` or `ctx.workspace` (itself or a
        function defined in it). One that reaches the workspace through a function defined
        elsewhere should declare `effects="sandbox"`, or its calls may run beside another
        workspace call of the same turn, in the same directory, from the same version.
        """
        return self.workspace or self.effects == "sandbox" or _names_workspace(self.handler)

    @property
    def approval_kind(self) -> Literal["never", "always", "predicate"]:
        """How the call is gated: `never`, `always` or `predicate`."""
        if callable(self.approval):
            return "predicate"
        return self.approval

    def spec(self, tools: Mapping[str, Tool]) -> ToolSpec:
        """The contract a run records for this tool, one of the agent's `tools`.

        Its calls work in the workspace when it does, or when a tool it `uses` does (a call
        may invoke that one).
        """
        return ToolSpec(
            name=self.name or "",
            approval=self.approval_kind,
            annotations=self.annotations or None,
            workspace=self.in_workspace
            or any(u.in_workspace for u in map(tools.get, self.uses) if u),
            **{name: getattr(self, name) for name in _AS_DECLARED},
        )

    def parse_args(self, args: Mapping[str, Any]) -> Any:
        """Turn JSON args into what the handler takes: a model instance, or a dict with defaults."""
        from pydantic import BaseModel

        if isinstance(self.input, type) and issubclass(self.input, BaseModel):
            return self.input.model_validate(dict(args))
        return _apply_defaults(self.schema, dict(args))

    def needs_approval(self, args: Mapping[str, Any]) -> bool:
        """Evaluate the approval policy on `args` (JSON); a predicate sees the parsed args."""
        if callable(self.approval):
            return bool(self.approval(self.parse_args(args)))
        return self.approval == "always"

    async def call(
        self,
        args: Mapping[str, Any],
        ctx: ToolContext,
        redact: Callable[[Any], Any] | None = None,
    ) -> ToolResult:
        """Run the handler on `args`; its return value as a `ToolResult`.

        `redact` (a `Redactor.value`) is applied to a structured return value before it is
        serialized: every string leaf, every key, bytes and whatever JSON would write as `str`.
        """
        if self.handler is None:
            # The agent loader keeps other tools from invoking one, and the workflow never
            # schedules one: reaching here is a bug, said plainly.
            raise ToolError(
                f"tool {self.name!r} is run by {self.execution_provider} inside the model call; "
                "toren has no handler to run"
            )
        parsed = self.parse_args(args)
        if inspect.iscoroutinefunction(self.handler):
            result = await self.handler(parsed, ctx)
        else:
            # A sync handler runs in a thread so it cannot stall heartbeats or other calls; a
            # pool of its own, so `timeout_ms` never counts a wait for a free thread.
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, self.handler, parsed, ctx)
            result = await loop.run_in_executor(_handler_pool(), call)
            if inspect.isawaitable(result):
                result = await result
        if isinstance(result, ToolResult):
            return result
        return ToolResult(result=encode_result(result, redact))

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        """Run the handler on `args` and return the text the model sees."""
        return (await self.call(args, ctx)).text


_POOL: ThreadPoolExecutor | None = None


_WORKSPACE_NAMES = frozenset({"run_code", "workspace"})
"""The `ToolContext` methods that work in the run's workspace."""


def _names_workspace(handler: Any) -> bool:
    """Whether `handler`'s code, or code defined in it, names a `_WORKSPACE_NAMES` attribute."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    handler = inspect.unwrap(handler) if callable(handler) else handler
    code = getattr(handler, "__code__", None)
    if code is None and callable(handler):  # an object with `__call__`
        code = getattr(type(handler).__call__, "__code__", None)
    stack: list[types.CodeType] = [code] if isinstance(code, types.CodeType) else []
    while stack:
        current = stack.pop()
        if _WORKSPACE_NAMES.intersection(current.co_names):
            return True
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return False


def _handler_pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        size = int(os.environ.get("TOREN_HANDLER_THREADS", "200"))
        _POOL = ThreadPoolExecutor(max_workers=size, thread_name_prefix="toren-handler")
    return _POOL


def encode_result(result: Any, redact: Callable[[Any], Any] | None = None) -> str:
    """Encode a handler's return value: strings as they are, everything else as JSON.

    With `redact`, each leaf is redacted before it is serialized: once serialized, a leaf that
    held a secret in an escaped form (a `repr`, bytes) would be escaped once more.
    """
    if isinstance(result, str):
        return redact(result) if redact else result
    if result is None:
        return ""
    from pydantic import BaseModel

    if isinstance(result, BaseModel):
        if redact is None:
            return result.model_dump_json()
        dumped = redact(result.model_dump(mode="json"))
        return json.dumps(dumped, ensure_ascii=False, separators=(",", ":"))
    if redact is not None:
        result = redact(_as_json_writes(result))
    return json.dumps(result, default=str, ensure_ascii=False)


def _as_json_writes(value: Any) -> Any:
    """`value` with what `json.dumps(default=str)` would write as `str(x)` already a string."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {k: _as_json_writes(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json_writes(v) for v in value]
    return str(value)


def _apply_defaults(schema: Mapping[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    for key, prop in (schema.get("properties") or {}).items():
        if key not in args and isinstance(prop, dict) and "default" in prop:
            args[key] = json.loads(json.dumps(prop["default"]))
    return args
