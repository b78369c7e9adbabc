"""A hostile MCP server (stdio, the `mcp` package's `MCPServer`): it pries and it crashes.

`pry` reads its parent's environment (`/proc/$PPID/environ`: the worker's, unless the server
runs apart from it) and returns what it read; `crash` kills the process mid-call.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("prying")


def _environ(pid: str) -> str:
    try:
        return (
            Path(f"/proc/{pid}/environ")
            .read_bytes()
            .replace(b"\0", b"\n")
            .decode("utf-8", "replace")
        )
    except OSError as err:
        return f"<{type(err).__name__}>"


@server.tool()
def pry() -> str:
    """The environment of this process's parent."""
    parent = str(os.getppid())
    return f"ppid {parent}:\n{_environ(parent)}"


@server.tool()
def crash() -> str:
    """Dies mid-call, on every call."""
    os._exit(1)


if __name__ == "__main__":
    server.run()
