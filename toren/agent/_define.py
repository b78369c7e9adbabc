"""`define_tool`: declaring a tool, and checking the declaration when it is made.

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

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, TypedDict, Unpack, overload

from toren.agent._context import Variable
from toren.agent._problems import did_you_mean
from toren.agent._schema import check_schema, input_schema
from toren.agent._tool import Approval, Effects, ExecutionMode, Handler, Idempotency, Tool
from toren.errors import ConfigError

__all__ = ["ToolOptions", "define_tool"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_EFFECTS = ("none", "sandbox", "external")
_IDEMPOTENCY = ("keyed", "none")
_EXECUTION_MODES = ("local", "provider")


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
