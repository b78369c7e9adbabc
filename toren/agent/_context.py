"""What a handler gets besides its args: `ToolContext`, and what it may return: `ToolResult`.

```python
async def handler(args, ctx: ToolContext) -> ToolResult:
    seen = await ctx.get_value("seen") or 0          # durable run state
    await ctx.set_value("seen", seen + 1)
    ctx.emit("progress", {"step": "lookup"})         # for a front end (query `events`)
    found = await ctx.invoke_tool("lookup", {"q": args.q})   # needs uses=["lookup"]
    ctx.queue_tool("notify", {"text": found.result})  # runs after this turn's calls
    await ctx.inject_message("user", "Also check the invoice.")
    return ToolResult(status="success", result="ok",
                      attachments=[Attachment(name="chart.png", mime_type="image/png", data=png)])
```

Every power is durable the same way: what a handler changes (state writes, queued tools,
events, injected messages) travels back in the call's recorded result and the workflow applies
it, so a replay or a resumed run sees exactly the same thing. Reads (`get_value`,
`get_messages`) ask the run; they never put the state or transcript into history.
"""

from __future__ import annotations

import contextvars
import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from toren.agent._asking import Asking
from toren.agent._code_run import CodeRequest, CodeRun

__all__ = [
    "Attachment",
    "CallHooks",
    "Changes",
    "ExecutionState",
    "ToolContext",
    "ToolResult",
    "Variable",
]


class LiveStream(Protocol):
    """What `ToolContext.emit` publishes on: the running activity's stream."""

    def base(self, type_: str) -> dict[str, Any]: ...

    def publish(self, item: dict[str, Any]) -> None: ...


current_stream: contextvars.ContextVar[LiveStream | None] = contextvars.ContextVar(
    "toren_stream", default=None
)
"""The stream of the activity running in this context (`ctx.emit` publishes on it); the worker's
runtime sets it around each call."""


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ABSENT = object()


def type_name(value: Any) -> str:
    """`value`'s type as a person names it."""
    return type(value).__name__


@dataclass
class Attachment:
    """A file a handler returns; stored in the attachment store, referenced by id in history."""

    name: str
    mime_type: str
    data: bytes
    width: int | None = None
    height: int | None = None


@dataclass
class ToolResult:
    """A structured result: `status`, the `result` text or the `error`, and attachments."""

    status: Literal["success", "error"] = "success"
    result: str | None = None
    error: str | None = None
    stack: str | None = None
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        """Whether the model sees this as an error."""
        return self.status == "error"

    @property
    def text(self) -> str:
        """The text the model sees."""
        if self.is_error:
            return self.error or self.result or "error"
        return self.result or ""


@dataclass(frozen=True)
class Variable:
    """An env value a tool needs, resolved from the worker's environment before each call.

    A missing `required` one fails the call with a clear error the model sees; the worker warns
    at start. `secret` values are redacted from anything that enters history.
    """

    name: str
    type: Literal["text", "secret"] = "secret"
    required: bool = True
    description: str = ""


@dataclass
class Changes:
    """What a call changed in its run; recorded in its result, applied by the workflow."""

    state: dict[str, Any] = field(default_factory=dict)
    queued: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    invoked: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    """Keys of `ctx.context` set by this call."""
    context_deleted: list[str] = field(default_factory=list)
    """Keys of `ctx.context` this call deleted."""
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`ctx.set_env` values; the activity turns secret ones into references before recording."""

    def to_json(self) -> dict[str, Any] | None:
        """The non-empty parts, or `None` when the call changed nothing."""
        data = {k: v for k, v in self.__dict__.items() if v}
        return data or None


@dataclass(frozen=True)
class ExecutionState:
    """The execution a call belongs to: one answer to one message (an `AgentRun` is one).

    `ctx.execution` is this during every call; a thread's `execution` query answers `None`
    while the thread rests between messages.
    """

    flow_id: str
    """Which execution: `<workflow id>#<n>` in a thread, the workflow id in an `AgentRun`."""
    step_count: int
    """Model steps taken in this execution so far."""
    start: int = 0
    """Index in the conversation of the message this execution answers."""
    current_side: str = "a"
    """The side taking this step (toren runs one agent per execution: always `a`)."""
    stopped: bool = False
    """Whether the execution has stopped (never while one of its calls runs)."""
    hooks: CallHooks | None = field(default=None, repr=False, compare=False)

    async def message_history(self) -> list[dict[str, Any]]:
        """This execution's messages so far: the user's message, replies and tool results."""
        messages = await self.hooks.read_messages() if self.hooks else []
        return messages[self.start :]


class CallHooks(Protocol):
    """How a context reaches its run (the activity runtime implements it)."""

    async def read_state(self) -> dict[str, Any]:
        """The run's state as of this turn's start."""
        ...

    async def read_messages(self) -> list[dict[str, Any]]:
        """The conversation so far."""
        ...

    async def invoke(self, ctx: ToolContext, name: str, args: Mapping[str, Any]) -> ToolResult:
        """Run another tool of the agent now, inside this call."""
        ...

    async def run_code(self, ctx: ToolContext, request: CodeRequest) -> CodeRun:
        """Run `request`'s Python source in the sandbox, in the run's workspace."""
        ...

    async def workspace(self, ctx: ToolContext) -> Path:
        """The run's workspace on this worker, made to match its last recorded version."""
        ...


@dataclass
class ToolContext(Asking):
    """What a handler may use besides its arguments (`ask`: `toren.agent._asking`).

    Handlers read configuration from `env` only, never from `os.environ`: it holds exactly the
    names the agent declared in agent.yaml, plus the tool's own `variables`.
    """

    env: Mapping[str, str]
    """The agent's declared env values, read from the worker's environment at start."""
    idempotency_key: str
    """`<workflow id>:<step>:<tool-use id>`; identical on every attempt of one call."""
    run_id: str
    """The run's workflow id."""
    call_id: str
    """The model's tool-use id of this call."""
    agent: str
    """The agent's name."""
    tool: str
    """This tool's name."""
    attempt: int = 1
    """Which attempt of this call this is (1 on the first; more after a worker died)."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The run's invocation `arguments` (read-only)."""
    attachments: tuple[str, ...] = ()
    """Ids of the files attached to the run (`RunInput.attachments`)."""
    uses: tuple[str, ...] = ()
    """The tools this one may `invoke_tool` (its `uses=[...]`)."""
    user_id: str | None = None
    """Who the thread or run belongs to (`user_id` of its input), if anyone said."""
    execution: ExecutionState | None = None
    """The execution this call belongs to."""
    context: dict[str, Any] = field(default_factory=dict)
    """Scratch data of the current execution: mutate it freely (JSON values); later calls of
    the same execution see the changes, the next execution starts with it empty."""
    env_types: Mapping[str, Literal["text", "secret"]] = field(default_factory=dict)
    """The type of each `env` name that is not a secret by default (see `env_type`)."""
    changes: Changes = field(default_factory=Changes)
    """What this call changed so far (applied by the workflow when it completes)."""
    hooks: CallHooks | None = field(default=None, repr=False)
    """The connection to the run; `None` outside a run (e.g. in a unit test)."""
    _state: dict[str, Any] | None = field(default=None, repr=False)
    _context_before: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.env = dict(self.env)  # set_env adds to it
        self._context_before = copy.deepcopy(self.context)

    @property
    def thread_id(self) -> str:
        """The thread's (or the run's) workflow id."""
        return self.run_id

    @property
    def agent_id(self) -> str:
        """The agent's name."""
        return self.agent

    # -- env set by tools --------------------------------------------------------------------

    def env_type(self, name: str) -> Literal["text", "secret"]:
        """`text` for a value safe to show, else `secret` (the default, also for unknown names)."""
        return self.env_types.get(name, "secret")

    def set_env(self, name: str, value: str, type: Literal["text", "secret"] = "secret") -> None:
        """Set an env value that later calls and executions of this thread see in `env`.

        A `secret` one (the default) is redacted everywhere like declared env and enters
        history only as a reference into the worker's secret store; use `type="text"` only
        for a value safe to show in tool output and errors.
        """
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValueError(f"env name {name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if not isinstance(value, str):
            raise TypeError(f"set_env({name!r}, ...) takes a string value, got {type_name(value)}")
        if type not in ("text", "secret"):
            raise ValueError(f"set_env type must be 'text' or 'secret', got {type!r}")
        self.changes.env[name] = {"type": type, "value": value}
        self.env[name] = value  # type: ignore[index]
        self.env_types = {**self.env_types, name: type}

    def context_changes(self) -> None:
        """Record what this call did to `context` (the activity calls it once, at the end)."""
        before = self._context_before
        now = json.loads(json.dumps(self.context))
        self.changes.context = {k: v for k, v in now.items() if before.get(k, _ABSENT) != v}
        self.changes.context_deleted = [k for k in before if k not in now]

    # -- run state ---------------------------------------------------------------------------

    async def get_value(self, key: str) -> Any:
        """A value of the run's durable key-value state, or `None` when absent."""
        if key in self.changes.state:
            return copy.deepcopy(self.changes.state[key])
        if self._state is None:
            self._state = await self.hooks.read_state() if self.hooks else {}
        return copy.deepcopy(self._state.get(key))

    async def set_value(self, key: str, value: Any) -> None:
        """Set a value (JSON) in the run's state; later calls of the run see it.

        Calls of one turn run concurrently and see the state as of the turn's start; their
        writes are applied in call order when the turn ends, so the last writer in call order
        wins.
        """
        if not isinstance(key, str) or not key:
            raise ValueError("state keys are non-empty strings")
        self.changes.state[key] = json.loads(json.dumps(value))

    # -- tools -------------------------------------------------------------------------------

    def queue_tool(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """Run tool `name` after this turn's calls, as if the model had asked for it."""
        self.changes.queued.append({"name": name, "args": json.loads(json.dumps(args or {}))})

    async def invoke_tool(self, name: str, args: Mapping[str, Any] | None = None) -> ToolResult:
        """Call tool `name` now, inside this call, and return its result.

        Only names in this tool's `uses=[...]` may be invoked, and never a gated tool.
        """
        if name not in self.uses:
            raise PermissionError(
                f"tool {self.tool!r} cannot invoke {name!r}: it is not in its uses="
                f"{list(self.uses)!r} (add it to define_tool(uses=[...]))"
            )
        if self.hooks is None:
            raise RuntimeError("invoke_tool needs a run (no hooks in this context)")
        return await self.hooks.invoke(self, name, dict(args or {}))

    async def run_code(
        self,
        source: str,
        *,
        modules: Mapping[str, str] | None = None,
        entry: str = "main",
        args: Sequence[Any] = (),
        timeout_s: float = 30,
    ) -> CodeRun:
        r"""Run Python `source` in the sandbox and return what `entry(*args)` returned.

        ```python
        run = await ctx.run_code(
            "from helpers import double\ndef main(x):\n    return {'y': double(x)}\n",
            modules={"helpers.py": "def double(v):\n    return 2 * v\n"},
            args=[21],
        )
        run.ok, run.result, run.stdout     # (True, {'y': 42}, '')
        ```

        It runs with the worker's system `python3` in the jail bash uses, always without
        network, in the run's workspace (its cwd; the only writable place besides `/tmp`).
        `modules` are importable helper files by relative path (`"pkg/util.py"`); `args` and
        the returned value are JSON. The code's own failure (an exception, a timeout, a value
        that is not JSON) comes back as `ok=False` with a one-line `error`.

        Raises:
            UsageError: A bad module name, entry, args or timeout (at most 600 s).
            SandboxError: bubblewrap does not work on this worker.
            RuntimeError: Outside a run.
        """
        if self.hooks is None:
            raise RuntimeError("run_code needs a run (no hooks in this context)")
        request = CodeRequest(source, dict(modules or {}), entry, args, timeout_s)
        return await self.hooks.run_code(self, request)

    async def workspace(self) -> Path:
        """The run's workspace directory on this worker, as the run's last call left it.

        The files follow the run from host to host (`toren.store._workspace`): the first use in a
        call restores the version history recorded last, if this host's copy is not it, and
        the call's changes are stored when it returns. A tool that writes here should declare
        `effects="sandbox"`, so its calls run one at a time with the other workspace calls.

        Raises:
            RuntimeError: Outside a run.
            temporalio.exceptions.ApplicationError: The store failed (the call is retried).
        """
        if self.hooks is None:
            raise RuntimeError("workspace needs a run (no hooks in this context)")
        return await self.hooks.workspace(self)

    # -- events and messages -----------------------------------------------------------------

    def emit(self, event: str, data: Any = None) -> None:
        """Emit an event for a front end, live on the run's stream and in the call's result.

        The stream's item is a `tool_progress`; the result's event reaches query `events` and
        `toren events --follow`.
        """
        entry = {"event": str(event), "data": json.loads(json.dumps(data))}
        self.changes.events.append(entry)
        live = current_stream.get()
        if live is not None:
            live.publish({**live.base("tool_progress"), "name": self.tool, **entry})

    async def get_messages(self, limit: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
        """The conversation so far (`offset` from the start, at most `limit` messages)."""
        messages = await self.hooks.read_messages() if self.hooks else []
        end = None if limit is None else offset + limit
        return messages[offset:end]

    async def inject_message(self, role: Literal["user", "assistant"], content: str) -> None:
        """Add a message the model sees on its next step."""
        if role not in ("user", "assistant"):
            raise ValueError(f"role must be 'user' or 'assistant', got {role!r}")
        self.changes.messages.append({"role": role, "content": str(content)})
