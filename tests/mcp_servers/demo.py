"""A real MCP server for tests/test_mcp.py, written with the `mcp` package's `MCPServer`.

Run as a stdio server (`python demo.py`), or serve `server.streamable_http_app()` over HTTP.
`DEMO_STARTS`, when set, names a file that gets one line per start of the process.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("demo")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def fail(why: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"refused: {why}")


@server.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep(3600)
    return "woke up"


@server.tool()
def die_once(marker: str) -> str:
    """Kill this server process the first time (a crash mid-call); answer after that."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(1)
    return "survived"


@server.tool()
def token() -> str:
    """The DEMO_TOKEN this process was given (a secret the redactor must catch)."""
    return f"token is {os.environ.get('DEMO_TOKEN', 'unset')}"


@server.tool()
def key(ctx: Context) -> str:
    """The idempotency key toren sent in the request's `_meta`."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("io.toren/idempotency_key", "none"))


if __name__ == "__main__":
    starts = os.environ.get("DEMO_STARTS")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run()
