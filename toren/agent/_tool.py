"""Tools: `define_tool`, the `Tool` it returns, and the `ToolContext` a handler receives.

Every field of `define_tool` is part of the tool's durability contract:

```python
from pydantic import BaseModel
from toren import define_tool

class Refund(BaseModel):
    order_id: str
    amount: float

tool = define_tool(
    description="Refund an order.",
    input=Refund,
    effects="external",          # what the outside world sees
    idempotency="keyed",         # ctx.idempotency_key is the same on every attempt
    approval=lambda a: a.amount > 100,
    timeout_ms=30_000,           # slower calls return an error result to the model
    max_attempts=2,              # a call whose worker died twice fails closed
    handler=lambda args, ctx: payments.refund(args, key=ctx.idempotency_key),
    annotations={"team": "billing"},  # free JSON for consumers (`toren check`, `list_tools`)
    progress_argument="order_id",     # the argument that says what a call is doing
)
```

A tool the model's provider runs itself (Anthropic's hosted web search) has no handler:

```python
tool = define_tool(
    name="web_search",                # the provider's own name for the tool
    description="Search the web.",
    execution_mode="provider",
    execution_provider="anthropic",   # only an `anthropic/` model may use it
    provider_options={"max_uses": 3}, # merged into the provider's tool declaration
)
```
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import os
import re
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypedDict, Unpack, overload

from toren.agent._context import ToolContext, ToolResult, Variable
from toren.agent._problems import did_you_mean
from toren.agent._schema import check_schema, input_schema
from toren.errors import ConfigError, ToolError

__all__ = [
    "Approval",
    "Effects",
    "ExecutionMode",
    "Idempotency",
    "Tool",
    "ToolContext",
    "ToolOptions",
    "ToolResult",
    "Variable",
    "define_tool",
]

Effects = Literal["none", "sandbox", "external"]
Idempotency = Literal["keyed", "none"]
Approval = Literal["never", "always"] | Callable[[Any], bool]
ExecutionMode = Literal["local", "provider"]
Handler = Callable[[Any, "ToolContext"], Any | Awaitable[Any]]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_EFFECTS = ("none", "sandbox", "external")
_IDEMPOTENCY = ("keyed", "none")
_EXECUTION_MODES = ("local", "provider")


@dataclass
class Tool:
    """A tool as declared by `define_tool`; see the module docstring for the contract."""

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


class ToolOptions(TypedDict, total=False):
    """The optional keywords of `define_tool`; each left out keeps `Tool`'s default."""

    name: str | None
    """Tool name the model sees; default the file's stem."""
    input: Any
    """A pydantic model class or a JSON Schema dict; default no arguments."""
    effects: Effects
    """`none` (default), `sandbox` or `external`."""
    idempotency: Idempotency
    """`keyed` (default) or `none`."""
    approval: Approval
    """`never` (default), `always`, or a predicate over the parsed args."""
    timeout_ms: int | None
    """A call running longer returns an error result to the model; default no limit."""
    max_attempts: int | None
    """Starts of one call before it fails closed; default at-least-once."""
    approval_timeout: float | timedelta | None
    """Seconds (or a `timedelta`) a gated call waits before it is denied; default forever."""
    uses: Sequence[str]
    """Tools this one may call with `ctx.invoke_tool`."""
    variables: Sequence[Variable]
    """Env values this tool needs, resolved before each call."""
    annotations: Mapping[str, Any]
    """Free JSON metadata for consumers; must be JSON-serialisable."""
    progress_argument: str | None
    """The argument that describes the operation in progress; a property of `input`."""
    execution_provider: str | None
    """With `execution_mode="provider"`: the provider that runs the tool (`anthropic`)."""
    provider_options: Mapping[str, Any]
    """With `execution_mode="provider"`: merged into the provider's tool declaration."""


@overload
def define_tool(
    *,
    description: str,
    handler: Handler,
    execution_mode: Literal["local"] = "local",
    **options: Unpack[ToolOptions],
) -> Tool: ...


@overload
def define_tool(
    *,
    description: str,
    handler: None = None,
    execution_mode: Literal["local"] = "local",
    **options: Unpack[ToolOptions],
) -> Callable[[Handler], Tool]: ...


@overload
def define_tool(
    *,
    description: str,
    handler: None = None,
    execution_mode: Literal["provider"],
    **options: Unpack[ToolOptions],
) -> Tool: ...


def define_tool(
    *,
    description: str,
    handler: Handler | None = None,
    execution_mode: ExecutionMode = "local",
    **options: Unpack[ToolOptions],
) -> Tool | Callable[[Handler], Tool]:
    """Declare a tool and its durability contract.

    Use it as `tool = define_tool(..., handler=fn)` or as a decorator
    `@define_tool(description=...)` over the handler; `ToolOptions` lists the other keywords.
    The name defaults to the file's stem. `approval_timeout` (seconds or a `timedelta`) denies a
    gated call nobody decided in time; by default it waits forever (or the agent's
    `limits.approvalTimeoutMin`).

    `execution_mode="provider"` declares a tool the model's provider runs itself (its
    `execution_provider`, e.g. `anthropic`): it takes no handler, no approval and no call limits
    (toren never runs it), its name is the provider's name for the tool, and an agent whose model
    is not that provider's refuses to load. `annotations` is free JSON for consumers;
    `progress_argument` names the `input` property that says what a call is doing.

    Raises:
        ConfigError: a keyword is unknown or has a wrong value; names the tool and every one.
    """
    # `Tool`'s fields, from the options given; `Tool` holds the defaults of the rest.
    fields: dict[str, Any] = {"name": None, **options}
    unknown = sorted(set(fields) - ToolOptions.__optional_keys__)
    for key in unknown:
        del fields[key]
    timeout = fields.pop("approval_timeout", None)
    fields["approval_timeout_s"] = (
        timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    )
    fields["uses"] = tuple(fields.get("uses", ()))
    fields["variables"] = tuple(fields.get("variables", ()))
    fields["annotations"] = _plain_dict(fields.get("annotations", {}))
    fields["provider_options"] = _plain_dict(fields.get("provider_options", {}))
    fields["execution_mode"] = execution_mode

    def build(fn: Handler | None) -> Tool:
        tool = Tool(description=description, handler=fn, **fields)
        tool.source = _caller_file()
        _check(tool, unknown)
        return tool

    if handler is None and execution_mode != "provider":
        return build
    return build(handler)


def _plain_dict(value: Any) -> Any:
    # A mapping becomes a dict (recorded as JSON); anything else stays, for `_check` to name.
    return dict(value) if isinstance(value, Mapping) else value


def _caller_file() -> str | None:
    for frame in inspect.stack()[2:6]:
        if frame.filename != __file__:
            return frame.filename
    return None


def _check(tool: Tool, unknown: Sequence[str] = ()) -> None:
    label = f"tool {tool.name!r}" if tool.name else "tool"
    if tool.source:
        label += f" ({tool.source})"
    known = sorted(ToolOptions.__optional_keys__ | {"description", "handler", "execution_mode"})
    problems = [f"{label}: unknown keyword {k!r}{did_you_mean(k, known)}" for k in unknown]
    if tool.name is not None and not _NAME.match(tool.name):
        problems.append(f"{label}: name {tool.name!r} must be snake_case ([a-z][a-z0-9_]*)")
    if not isinstance(tool.description, str) or not tool.description.strip():
        problems.append(f"{label}: description must be a non-empty string")
    if tool.execution_mode == "provider":
        problems += _provider_problems(tool, label)
    elif tool.execution_mode != "local":
        problems.append(
            f"{label}: execution_mode must be one of {_EXECUTION_MODES}, "
            f"got {tool.execution_mode!r}"
        )
    elif not callable(tool.handler):
        problems.append(f"{label}: handler must be a function handler(args, ctx)")
    elif tool.execution_provider is not None or tool.provider_options:
        key = "execution_provider" if tool.execution_provider is not None else "provider_options"
        problems.append(
            f"{label}: {key} is for a tool the provider runs; add execution_mode='provider' "
            "(and no handler), or drop it"
        )
    if tool.effects not in _EFFECTS:
        problems.append(f"{label}: effects must be one of {_EFFECTS}, got {tool.effects!r}")
    if tool.idempotency not in _IDEMPOTENCY:
        problems.append(
            f"{label}: idempotency must be one of {_IDEMPOTENCY}, got {tool.idempotency!r}"
        )
    if not callable(tool.approval) and tool.approval not in ("never", "always"):
        problems.append(
            f"{label}: approval must be 'never', 'always' or a predicate, got {tool.approval!r}"
        )
    for key in ("timeout_ms", "max_attempts"):
        value = getattr(tool, key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            problems.append(f"{label}: {key} must be a positive integer, got {value!r}")
    if tool.approval_timeout_s is not None and (
        not isinstance(tool.approval_timeout_s, int | float) or tool.approval_timeout_s <= 0
    ):
        problems.append(
            f"{label}: approval_timeout must be a positive number of seconds or a timedelta, "
            f"got {tool.approval_timeout_s!r}"
        )
    try:
        tool.schema = input_schema(tool.input)
    except TypeError as err:
        problems.append(f"{label}: input: {err}")
    else:
        problems += [f"{label}: input: {p}" for p in check_schema(tool.schema)]
        problems += _progress_problems(tool, label)
    problems += _json_problems(label, "annotations", tool.annotations)
    for name in tool.uses:
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{label}: uses: {name!r} is not a tool name")
    for var in tool.variables:
        if not isinstance(var, Variable):
            problems.append(f"{label}: variables: {var!r} is not a Variable(name, ...)")
        elif var.type not in ("text", "secret"):
            problems.append(f"{label}: variables: {var.name!r} type must be 'text' or 'secret'")
    if problems:
        raise ConfigError(problems)


def _provider_problems(tool: Tool, label: str) -> list[str]:
    """What a tool the provider runs may not declare: toren never runs it, so none of it applies."""
    problems: list[str] = []
    if not isinstance(tool.execution_provider, str) or not tool.execution_provider:
        problems.append(
            f"{label}: execution_mode='provider' needs execution_provider, the provider that "
            "runs the tool (e.g. 'anthropic')"
        )
    if tool.handler is not None:
        problems.append(
            f"{label}: a tool with execution_mode='provider' takes no handler: "
            f"{tool.execution_provider or 'the provider'} runs it inside the model call"
        )
    if tool.approval != "never":
        problems.append(
            f"{label}: approval cannot gate a tool the provider runs (it runs inside the model "
            "call, before toren sees it); drop approval or make it a local tool"
        )
    defaults = Tool(name=None, description="", handler=None)
    for key in ("timeout_ms", "max_attempts", "approval_timeout_s", "uses", "variables"):
        if getattr(tool, key) != getattr(defaults, key):
            word = "approval_timeout" if key == "approval_timeout_s" else key
            problems.append(
                f"{label}: {word} has no effect on a tool the provider runs (toren never runs "
                "it); drop it"
            )
    problems += _json_problems(label, "provider_options", tool.provider_options)
    if isinstance(tool.provider_options, dict) and "name" in tool.provider_options:
        problems.append(
            f"{label}: provider_options: 'name' is the tool's own name; set name= instead"
        )
    return problems


def _progress_problems(tool: Tool, label: str) -> list[str]:
    name = tool.progress_argument
    if name is None:
        return []
    properties = sorted(tool.schema.get("properties") or {})
    if not isinstance(name, str) or name not in properties:
        allowed = ", ".join(repr(p) for p in properties) or "none: the tool takes no arguments"
        return [
            f"{label}: progress_argument {name!r} is not an argument of the tool's input "
            f"(its arguments: {allowed}){did_you_mean(str(name), properties)}"
        ]
    return []


def _json_problems(label: str, key: str, value: Any) -> list[str]:
    """`value` must be a JSON object: its problems, each naming the key inside it."""
    if not isinstance(value, dict):
        return [f"{label}: {key} must be a dict of JSON values, got {type(value).__name__}"]
    problems = []
    for name, item in value.items():
        if not isinstance(name, str):
            problems.append(f"{label}: {key}: key {name!r} must be a string")
            continue
        try:
            json.dumps(item, allow_nan=False)
        except (TypeError, ValueError) as err:
            problems.append(f"{label}: {key}[{name!r}] is not JSON-serialisable: {err}")
    return problems
