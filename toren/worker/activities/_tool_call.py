"""One tool call inside its activity: its timeout, errors, variables and `ToolContext` powers.

The powers (run state, invoked tools, messages) are wired to the run here.

```python
result = await run_tool_call(loaded, tool, input)   # -> ToolCallResult (recorded in history)
```
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from toren.agent._asking import AskPending, current_answers
from toren.agent._code_run import CodeRequest, CodeRun
from toren.agent._config import SandboxConfig
from toren.agent._context import ExecutionState, ToolContext, ToolResult
from toren.agent._payload_limits import MAX_CHANGES_BYTES, cut_text
from toren.agent._schema import validate_args
from toren.agent._spec import DEFAULT_TOOL_TIMEOUT_MS
from toren.agent._tool import Tool
from toren.agent._types import ToolCallInput, ToolCallResult
from toren.store._payloads import result_limit
from toren.store._store import StoreError
from toren.store._workspace import Workspaces, WorkspaceTooLarge
from toren.worker._loaded import LoadedAgent
from toren.worker._redact import Redactor
from toren.worker._redact import redactor as redactor_of
from toren.worker._thread_env import env_types, seal_env, thread_env_values
from toren.worker.activities._run_reads import RunReads
from toren.worker.activities._transcripts import read_transcript
from toren.worker.tools._sandbox import code_jail, run_code

__all__ = [
    "RunHooks",
    "missing_variables",
    "read_transcript",
    "run_key_of",
    "run_tool_call",
    "validation_text",
]

log = logging.getLogger("toren")

MAX_INVOKE_DEPTH = 5
"""How deep `invoke_tool` may nest (a tool invoking a tool invoking …)."""
INVOKED_RESULT_CHARS = 2000
"""How much of an invoked tool's result the event log keeps (the caller got all of it)."""


def missing_variables(tool: Tool, environ: Mapping[str, str]) -> list[str]:
    """Required `variables` of `tool` that `environ` lacks."""
    return [v.name for v in tool.variables if v.required and not environ.get(v.name)]


def run_key_of(given: str) -> str:
    """`given`, or (a run leaves it out) the `<workflow id>/<run id>` this activity serves."""
    if given:
        return given
    info = activity.info()
    return f"{info.workflow_id}/{info.workflow_run_id}"


def workspaces() -> Workspaces:
    """This worker's workspaces: the cache `TOREN_WORKSPACES` and the store `TOREN_STORE`."""
    key = (os.environ.get("TOREN_WORKSPACES", ""), os.environ.get("TOREN_STORE", ""), os.getcwd())
    spaces = _spaces.get(key)
    if spaces is None:
        spaces = _spaces[key] = Workspaces.from_env()
    return spaces


_spaces: dict[tuple[str, str, str], Workspaces] = {}


def store_failure(err: StoreError, what: str) -> ApplicationError:
    """A store error as a retryable activity failure (the next attempt may find it back)."""
    return ApplicationError(f"{what}: {err}", type="StoreError")


class RunHooks(RunReads):
    """Connects a `ToolContext` to its run: reads (`RunReads`), nested calls for invokes."""

    def __init__(
        self,
        loaded: LoadedAgent,
        run_key: str,
        version: str | None = None,
        local: ToolCallInput | None = None,
    ) -> None:
        super().__init__(run_key, local)
        self.loaded = loaded
        self.depth = 0
        self.version = version
        """The workspace version the call starts from (what history recorded last)."""
        self.prepared: Workspaces | None = None
        """Set once the call used the workspace: it is then stored when the call returns."""
        self.workspace_error: str | None = None
        """Why the call's workspace was not stored (over `workspaceMB`), for the model."""

    async def workspace(self, ctx: ToolContext) -> Path:
        """The run's workspace, made to match `version` on first use in this call."""
        spaces = self.prepared or workspaces()
        if self.prepared is None:
            try:
                await spaces.prepare(ctx.run_id, self.version)
            except StoreError as err:
                raise store_failure(err, "restoring the workspace failed") from None
            self.prepared = spaces
        return spaces.path(ctx.run_id)

    async def finish_workspace(self, run_id: str, writes: bool) -> str | None:
        """Store the workspace if the call used it and may write; return the version it left."""
        if self.prepared is None:
            return None
        try:
            if not writes:
                await self.prepared.release(run_id)
                return None
            # The sandbox's limits hold for every workspace writer (as for `ctx.run_code`).
            options = self.loaded.agent.config.sandbox or SandboxConfig()
            limit = options.limits.workspace_mb << 20
            return await self.prepared.commit(run_id, self.version, limit)
        except WorkspaceTooLarge as err:
            self.workspace_error = str(err)
            return self.version
        except StoreError as err:
            raise store_failure(err, "storing the workspace failed") from None

    async def run_code(self, ctx: ToolContext, request: CodeRequest) -> CodeRun:
        """Run `request` in bash's jail (without network) in the run's workspace."""
        jail = code_jail(self.loaded.agent.config)
        workspace = await self.workspace(ctx)
        return await run_code(
            jail,
            workspace,
            request.source,
            modules=request.modules,
            entry=request.entry,
            args=request.args,
            timeout_s=request.timeout_s,
        )

    async def invoke(self, ctx: ToolContext, name: str, args: Mapping[str, Any]) -> ToolResult:
        """Run tool `name` inside the calling tool's activity."""
        target = self.loaded.agent.tools.get(name)
        if target is None:
            raise LookupError(f"tool {ctx.tool!r} cannot invoke {name!r}: no such tool")
        if target.approval != "never":
            raise PermissionError(
                f"tool {ctx.tool!r} cannot invoke {name!r}: it is gated by approval "
                f"({target.approval_kind}); use ctx.queue_tool({name!r}, ...) so a person can "
                "approve it"
            )
        if self.depth >= MAX_INVOKE_DEPTH:
            raise RecursionError(f"invoke_tool nested deeper than {MAX_INVOKE_DEPTH} calls")
        problem = validate_args(target.schema, dict(args))
        if problem is not None:
            result = ToolResult(status="error", error=f"invalid arguments for {name}: {problem}")
        else:
            n = sum(1 for i in ctx.changes.invoked if i["tool"] == name) + 1
            child = ToolContext(
                env={**self.loaded.env, **_variables(target, os.environ)},
                idempotency_key=f"{ctx.idempotency_key}/{name}#{n}",
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                agent=ctx.agent,
                tool=name,
                attempt=ctx.attempt,
                arguments=ctx.arguments,
                attachments=ctx.attachments,
                uses=target.uses,
                changes=ctx.changes,
                hooks=self,
            )
            self.depth += 1
            try:
                result = await _call(target, dict(args), child)
            finally:
                self.depth -= 1
        ctx.changes.invoked.append(
            {
                "tool": name,
                "args": dict(args),
                # Redacted before the cut: a cut secret would no longer match.
                "result": self.loaded.redactor().text(result.text)[:INVOKED_RESULT_CHARS],
                "is_error": result.is_error,
            }
        )
        return result


async def run_tool_call(loaded: LoadedAgent, tool: Tool, input: ToolCallInput) -> ToolCallResult:
    """Run one call of `tool` under its contract; never raises for a handler's failure.

    Everything it returns or raises has gone through the agent's redactor: the result, every
    change (state, events, queued and invoked calls, messages, attachment names) and a
    retryable error's message and details.

    Raises:
        ApplicationError: The handler asked Temporal to retry (redacted), or toren failed.
    """
    # Values a tool set with ctx.set_env are as secret as declared env.
    # Read from the store once per call, off the event loop (S3 is a network call).
    thread_env = await asyncio.to_thread(thread_env_values, input.env) if input.env else {}
    redactor = _redactor(loaded, thread_env, input.env or {})
    try:
        return await _run_tool_call(loaded, tool, input, redactor, thread_env)
    except asyncio.CancelledError:
        raise
    except Exception as err:
        raise redactor.failure(err) from None


async def _run_tool_call(
    loaded: LoadedAgent,
    tool: Tool,
    input: ToolCallInput,
    redactor: Redactor,
    thread_env: dict[str, str],
) -> ToolCallResult:
    info = activity.info()
    absent = missing_variables(tool, os.environ)
    if absent:
        return ToolCallResult(
            f"tool {tool.name} needs variable(s) {', '.join(absent)}, missing from the worker's "
            "environment",
            True,
        )
    hooks = RunHooks(
        loaded, run_key_of(input.run_key), input.workspace, input if info.is_local else None
    )
    execution = input.execution or {}
    ctx = ToolContext(
        env={**loaded.env, **_variables(tool, os.environ), **thread_env},
        idempotency_key=input.idempotency_key,
        run_id=info.workflow_id or "",
        call_id=input.call_id,
        agent=loaded.agent.name,
        tool=tool.name or "",
        attempt=info.attempt,
        arguments=dict(input.arguments or {}),
        attachments=tuple(input.attachments or ()),
        uses=tool.uses,
        user_id=input.user_id,
        execution=ExecutionState(
            flow_id=str(execution.get("flow_id") or info.workflow_id),
            step_count=int(execution.get("step_count") or input.step),
            start=int(execution.get("start") or 0),
            hooks=hooks,
        ),
        context=dict(input.context or {}),
        env_types=env_types(loaded, tool, input.env),
        hooks=hooks,
    )

    def redact(value: Any) -> Any:
        # Read when the handler returns: values it set with ctx.set_env are secret too.
        new = {name: str(entry["value"]) for name, entry in ctx.changes.env.items()}
        kinds = {**(input.env or {}), **ctx.changes.env}
        return _redactor(loaded, {**thread_env, **new}, kinds).value(value)

    current_answers.set([dict(a) for a in input.answers or []])
    try:
        result = await _call(tool, input.args, ctx, redact)
    except AskPending as asked:
        # The handler stops to ask a person (`ctx.ask`): nothing it did so far is kept; the
        # run asks, then runs this call again with the answer.
        await hooks.finish_workspace(ctx.run_id, writes=False)
        return ToolCallResult("", ask=redactor.value(asked.request))
    version = await hooks.finish_workspace(ctx.run_id, writes=tool.effects != "none")
    if hooks.workspace_error:
        result = ToolResult(
            status="error", error=f"{result.text}\n[toren] {tool.name}: {hooks.workspace_error}"
        )
    try:
        ctx.context_changes()
    except (TypeError, ValueError) as err:
        result = ToolResult(
            status="error", error=f"tool {tool.name} left a non-JSON value in ctx.context: {err}"
        )
    if ctx.changes.env:
        # Secret values leave this call only as references; the result is redacted of them.
        kinds = {**(input.env or {}), **ctx.changes.env}
        new = {name: str(entry["value"]) for name, entry in ctx.changes.env.items()}
        redactor = _redactor(loaded, {**thread_env, **new}, kinds)
        ctx.changes.env = await asyncio.to_thread(seal_env, ctx.changes.env)
    if result.attachments:
        from toren.store._attachments import store_result_attachments

        # Up to 15 MB of file writes: in a thread, so heartbeats and other calls go on.
        refs = await asyncio.to_thread(store_result_attachments, result.attachments)
        ctx.changes.attachments += refs
        listing = ", ".join(f"{r['name']} ({r['id']})" for r in refs)
        result.result = (result.result or "") + f"\n[attachments: {listing}]"
    # With external storage a big result leaves history; only the store's own cap applies.
    # Redacted before the cut, so a secret across the cut cannot leave a piece behind.
    text = cut_text(redactor.text(result.text), result_limit(), what=f"tool {tool.name}'s result")
    changes = redactor.value(ctx.changes.to_json())
    if changes and len(json.dumps(changes).encode()) > MAX_CHANGES_BYTES:
        text = (
            f"tool {tool.name} recorded {len(json.dumps(changes).encode()):,} bytes of state, "
            f"events and messages, over the {MAX_CHANGES_BYTES:,}-byte limit; none were kept"
        )
        return ToolCallResult(
            text, True, call_id=input.call_id if info.is_local else None, workspace=version
        )
    return ToolCallResult(
        text,
        result.is_error,
        changes=changes,
        call_id=input.call_id if info.is_local else None,
        workspace=version,
    )


async def _call(
    tool: Tool,
    args: Mapping[str, Any],
    ctx: ToolContext,
    redact: Callable[[Any], Any] | None = None,
) -> ToolResult:
    """Run the handler under `timeout_ms`; its failure as an error result (not yet redacted).

    `redact` applies to a structured return value before it is serialized (see `Tool.call`).
    """
    timeout_ms = tool.timeout_ms or DEFAULT_TOOL_TIMEOUT_MS
    deadline = asyncio.timeout(timeout_ms / 1000)
    try:
        async with deadline:
            return await tool.call(args, ctx, redact)
    except TimeoutError as err:
        if not deadline.expired():
            # The handler's own TimeoutError (an upstream call of its own timed out).
            return _failed(tool, err)
        return ToolResult(status="error", error=f"tool {tool.name} timed out after {timeout_ms}ms")
    except ValidationError as err:
        return ToolResult(
            status="error", error=f"invalid arguments for {tool.name}: {validation_text(err)}"
        )
    except (asyncio.CancelledError, AskPending):
        raise
    except Exception as err:
        if isinstance(err, ApplicationError) and not err.non_retryable:
            # The handler asked Temporal to retry (e.g. an upstream 429/5xx), per max_attempts;
            # `run_tool_call` redacts it on the way out.
            raise
        return _failed(tool, err)


def _failed(tool: Tool, err: BaseException) -> ToolResult:
    return ToolResult(status="error", error=f"tool {tool.name} failed: {type(err).__name__}: {err}")


def _redactor(loaded: LoadedAgent, values: Mapping[str, str], kinds: Mapping[str, Any]) -> Redactor:
    """The agent's redactor plus the secret values a tool set with `ctx.set_env`."""
    secret = [v for n, v in values.items() if (kinds.get(n) or {}).get("type") != "text"]
    return redactor_of([*loaded.secret_values(), *secret])


def _variables(tool: Tool, environ: Mapping[str, str]) -> dict[str, str]:
    return {v.name: environ[v.name] for v in tool.variables if environ.get(v.name)}


def validation_text(err: ValidationError) -> str:
    """A pydantic validation error in one line, as the model sees it."""
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"{where}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts)
