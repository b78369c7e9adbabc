"""MCP servers as toren tools: sessions to a server, its tools as `Tool`s, its results as text.

```python
async with open_session(folder, server, env) as session:   # stdio or streamable HTTP
    listed = await session.list_tools()
tools, skipped = mcp_tools("files", server, listed.tools, call)   # `files__read_file`, ...
```

A listed tool becomes a `Tool` named `<server>__<tool>` with the server's JSON Schema and the
contract agent.yaml sets, so every part of toren's machinery applies to it unchanged: the
recorded spec, argument validation in the workflow, approvals, the activity `<agent>.<tool>`
with its timeout and retries. Its handler (`call`) is the worker's pool (`toren.worker.activities.
_mcp_pool`). The `mcp` package is imported only here and only when an agent declares a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toren.agent._context import ToolContext, ToolResult
from toren.agent._mcp_config import McpServerConfig
from toren.agent._tool import Tool
from toren.worker._mcp._jail import stdio_argv

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult
    from mcp.types import Tool as McpTool

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "LIST_TIMEOUT_S",
    "SEPARATOR",
    "McpCall",
    "call_result",
    "check_server",
    "duplicate_names",
    "describe_server",
    "headers_of",
    "mcp_tools",
    "open_session",
    "reason",
    "stdio_env",
]

SEPARATOR = "__"
"""Between the server's name and the tool's in the name the model sees."""
IDEMPOTENCY_META_KEY = "io.toren/idempotency_key"
"""The `_meta` key of a `tools/call` that carries a keyed call's idempotency key."""
LIST_TIMEOUT_S = 20.0
"""Seconds to start or reach a server and list its tools."""
MAX_NAME_CHARS = 64
"""The longest tool name the model providers take."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")

McpCall = Callable[[str, str, dict[str, Any], ToolContext], Awaitable[ToolResult]]
"""`call(server, tool, args, ctx)`: run the MCP tool `tool` of `server` (the pool's `call`)."""


def stdio_env(server: McpServerConfig, env: Mapping[str, str]) -> dict[str, str]:
    """The declared env values a stdio server gets (the `mcp` package adds PATH, HOME, ...)."""
    return {name: env[name] for name in server.env if env.get(name) is not None}


def headers_of(name: str, server: McpServerConfig, env: Mapping[str, str]) -> dict[str, str]:
    """An HTTP server's headers, their values read from the agent's resolved env.

    Raises:
        ValueError: a header's env name has no value here.
    """
    headers = {}
    for header, value in server.headers.items():
        if not env.get(value.env):
            raise ValueError(
                f"MCP server {name!r}: header {header!r} needs env {value.env!r}, which is not set"
            )
        headers[header] = value.prefix + env[value.env]
    return headers


@contextlib.asynccontextmanager
async def open_session(
    folder: Path, name: str, server: McpServerConfig, env: Mapping[str, str]
) -> AsyncIterator[ClientSession]:
    """An initialized session to `server`; a stdio server runs for as long as it is open.

    Enter and leave it in one task (anyio's rule); `toren.worker._mcp._pool` keeps one open
    in a task of its own and calls it from others.
    """
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with contextlib.AsyncExitStack() as stack:
        if server.command is not None:
            cwd = (folder / server.cwd).resolve() if server.cwd else folder
            # Apart from the worker: it must not read the worker's environment (`_mcp_jail`).
            argv = await asyncio.to_thread(stdio_argv, server.command, cwd)
            params = StdioServerParameters(
                command=argv[0], args=argv[1:], env=stdio_env(server, env), cwd=cwd
            )
            read, write = await stack.enter_async_context(stdio_client(params))
        else:
            assert server.url is not None
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=headers_of(name, server, env))
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=http)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


async def check_server(
    folder: Path, name: str, server: McpServerConfig, environ: Mapping[str, str]
) -> tuple[list[Tool], list[str]]:
    """List server `name` once, as `toren check` does: its allowed tools and the left-out ones.

    Raises:
        Exception: whatever kept it from answering within `LIST_TIMEOUT_S` (see `reason`).
    """

    async def no_call(server: str, tool: str, args: dict[str, Any], ctx: ToolContext) -> Any:
        raise NotImplementedError("toren check never calls a tool")

    env = {n: environ[n] for n in server.env_used() if environ.get(n)}
    async with asyncio.timeout(LIST_TIMEOUT_S), open_session(folder, name, server, env) as s:
        listed = await s.list_tools()
    source = f"{folder / 'agent.yaml'}: mcp_servers.{name}"
    return mcp_tools(name, server, listed.tools, no_call, source)


def describe_server(server: McpServerConfig) -> str:
    """`stdio: python server.py` or `http: https://...`, for people."""
    if server.command is not None:
        return "stdio: " + " ".join(server.command)
    return f"http: {server.url}"


def mcp_tools(
    name: str, server: McpServerConfig, listed: Sequence[McpTool], call: McpCall, source: str
) -> tuple[list[Tool], list[str]]:
    """The allowed tools of server `name` as toren `Tool`s, and why any were left out.

    Args:
        name: The server's name in agent.yaml.
        server: Its block.
        listed: What its `tools/list` answered.
        call: Runs a call (the pool's `call`).
        source: Where the server is declared, for error messages.
    """
    from jsonschema.validators import validator_for

    allowed = server.allowed()
    by_name = {t.name: t for t in listed}
    skipped = [
        f"MCP server {name!r} lists no tool {wanted!r} (it lists: {', '.join(by_name) or 'none'})"
        for wanted in allowed or ()
        if wanted not in by_name
    ]
    twins = duplicate_names(name, listed, allowed)
    skipped += twins.values()
    tools = []
    for listed_tool in listed:
        if allowed is not None and listed_tool.name not in allowed:
            continue
        if listed_tool.name in twins:
            continue
        full = f"{name}{SEPARATOR}{listed_tool.name}"
        schema = dict(listed_tool.input_schema or {"type": "object", "properties": {}})
        problem = None
        if not _TOOL_NAME.match(listed_tool.name) or len(full) > MAX_NAME_CHARS:
            problem = f"its name {full!r} is not [A-Za-z0-9_-]{{1,{MAX_NAME_CHARS}}}"
        elif schema.get("type") != "object":
            problem = "its input schema is not an object schema"
        else:
            try:
                validator_for(schema).check_schema(schema)
            except Exception as err:  # jsonschema.SchemaError: the workflow could not use it
                why = getattr(err, "message", err)
                problem = f"its input schema is not valid JSON Schema: {why}"
        if problem:
            skipped.append(f"MCP server {name!r}: tool {listed_tool.name!r} left out: {problem}")
            continue
        contract = server.contract(listed_tool.name)
        tools.append(
            Tool(
                name=full,
                description=listed_tool.description or listed_tool.title or listed_tool.name,
                handler=_handler(call, name, listed_tool.name),
                input=schema,
                schema=schema,
                effects=contract.effects or "external",
                idempotency=contract.idempotency or "keyed",
                approval=contract.approval or "never",
                timeout_ms=contract.timeout_ms,
                max_attempts=contract.max_attempts,
                annotations={"mcp_server": name, "mcp_tool": listed_tool.name},
                source=source,
            )
        )
    return tools, skipped


def duplicate_names(
    name: str, listed: Sequence[McpTool], allowed: Collection[str] | None = None
) -> dict[str, str]:
    """Tool names server `name` lists more than once (of the `allowed` ones) → the problem.

    A worker (and `toren check`) refuses them: a call could reach either tool, and the last
    one listed used to win silently.
    """
    names = [t.name for t in listed]
    return {
        tool: (
            f"MCP server {name!r} lists {names.count(tool)} tools named {tool!r}: a call could "
            "reach either, so none is used; fix the server (each tool needs its own name)"
        )
        for tool in dict.fromkeys(names)
        if names.count(tool) > 1 and (allowed is None or tool in allowed)
    }


def _handler(call: McpCall, server: str, tool: str) -> Callable[..., Awaitable[ToolResult]]:
    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await call(server, tool, args, ctx)

    return handler


def call_result(tool: str, result: CallToolResult) -> ToolResult:
    """A `tools/call` result as the model sees it; `isError` makes an error result."""
    parts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            data = str(getattr(block, "data", ""))
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}, {len(data)} base64 chars]")
        else:
            dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            parts.append(json.dumps(dumped, ensure_ascii=False))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        return ToolResult(status="error", error=text or f"tool {tool} reported an error")
    return ToolResult(result=text)


def reason(err: BaseException) -> str:
    """What went wrong, in one line: the first leaf of an exception group (anyio's habit)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
