"""A worker's MCP servers: listed at start, one open session each, reopened when one dies.

```python
pool = McpPool()
await pool.attach(runtime.agents.values())   # before the workers register their activities
...                                          # tool activities call pool.call(...)
await pool.close()                           # stops every stdio server
```

`attach` lists each declared server's tools and adds them to the agent as `Tool`s, so they are
in the spec every run records (`toren.agent_spec`): a replay reads the recorded list and never
needs a live server. A server that cannot be reached at start is logged and its tools are left
out of runs until it answers: a run's start tries it again (`refresh`, at most every 30 s), and
its tools, registered late, run through the worker's dynamic activity; `toren check` says why.

A call that finds its server gone (a stdio server that died, an HTTP server that went away)
closes the session and raises a retryable error: Temporal retries the call within the tool's
`max_attempts`, and the retry opens a new session, starting the stdio server again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError

from toren.agent._context import ToolContext, ToolResult
from toren.errors import ConfigError
from toren.worker._loaded import LoadedAgent
from toren.worker._mcp._session import (
    IDEMPOTENCY_META_KEY,
    LIST_TIMEOUT_S,
    SEPARATOR,
    call_result,
    duplicate_names,
    mcp_tools,
    open_session,
    reason,
)

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["McpPool"]

log = logging.getLogger("toren")

PING_TIMEOUT_S = 2.0
"""Seconds a stdio server has to answer the ping before each call, or it is started again."""
CLOSE_TIMEOUT_S = 10.0
"""Seconds a session gets to close (a stdio server: stdin closed, then SIGTERM, then SIGKILL)."""


class _Connection:
    """One open session, held by a task of its own.

    anyio closes a context in the task that opened it, while calls come from many activity tasks.
    """

    def __init__(self, loaded: LoadedAgent, server: str) -> None:
        self._loaded = loaded
        self._server = server
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.session: ClientSession | None = None
        self.closed = False

    async def open(self, timeout_s: float = LIST_TIMEOUT_S) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp {self._server}")
        try:
            async with asyncio.timeout(timeout_s):
                self.session = await asyncio.shield(ready)
        except TimeoutError:
            await self.close()
            raise ConnectionError(f"no answer in {timeout_s:g}s") from None
        except BaseException:
            await self.close()
            raise
        return self.session

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        agent = self._loaded.agent
        config = agent.config.mcp_servers[self._server]
        try:
            async with open_session(agent.folder, self._server, config, self._loaded.env) as s:
                ready.set_result(s)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
        except BaseException as err:  # the opener's failure is the caller's to report
            if not ready.done():
                ready.set_exception(err)
            else:
                log.debug("MCP server %r closed: %s", self._server, reason(err))
        finally:
            self.closed = True

    async def close(self) -> None:
        self.closed = True
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT_S)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()


class McpPool:
    """The MCP sessions of one worker, one per (agent, server)."""

    refresh_every_s = 30.0
    """How often a run's start may try again a server that could not be listed."""
    refresh_timeout_s = 5.0
    """How long that try may hold up the run's start."""

    def __init__(self) -> None:
        self._tried: dict[tuple[str, str], float] = {}
        self._connections: dict[tuple[str, str], _Connection] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._agents: dict[str, LoadedAgent] = {}
        self.unreachable: dict[tuple[str, str], str] = {}
        """(agent, server) → why listing it at start failed."""
        self.collisions: list[str] = []
        """MCP tools whose names another tool of the agent already has."""

    async def attach(self, agents: Iterable[LoadedAgent]) -> None:
        """List every declared server of `agents` and add its tools to the agent.

        Servers are listed concurrently.

        Raises:
            ConfigError: an MCP tool's name is taken by one of the agent's own tools or a
                built-in: the worker does not start rather than pick one of the two.
        """
        jobs = []
        for loaded in agents:
            self._agents[loaded.agent.name] = loaded
            for server in loaded.agent.config.mcp_servers:
                jobs.append(self._attach_one(loaded, server))
        await asyncio.gather(*jobs)
        if self.collisions:
            raise ConfigError(self.collisions)

    async def refresh(self, agent: str) -> None:
        """Try again the servers of `agent` that could not be listed.

        At most every `refresh_every_s`; a server that answers now adds its tools for the runs
        to come (this one included: its spec is read after this).
        """
        now = asyncio.get_running_loop().time()
        due = [
            server
            for (name, server) in list(self.unreachable)
            if name == agent and now - self._tried.get((name, server), 0.0) >= self.refresh_every_s
        ]
        if due:
            loaded = self._agents[agent]
            await asyncio.gather(
                *(self._attach_one(loaded, s, self.refresh_timeout_s) for s in due)
            )

    async def _attach_one(
        self, loaded: LoadedAgent, server: str, timeout_s: float = LIST_TIMEOUT_S
    ) -> None:
        agent = loaded.agent
        config = agent.config.mcp_servers[server]
        self._tried[(agent.name, server)] = asyncio.get_running_loop().time()
        try:
            session = await self._session(loaded.agent.name, server, timeout_s)
            async with asyncio.timeout(timeout_s):
                listed = await session.list_tools()
        except Exception as err:
            why = loaded.redactor().text(reason(err))
            self.unreachable[(agent.name, server)] = why
            await self._drop(agent.name, server)
            log.warning(
                "agent %s: MCP server %r could not be listed (%s): its tools are left out of "
                "this worker's runs",
                agent.name,
                server,
                why,
            )
            return
        if self.unreachable.pop((agent.name, server), None) is not None:
            log.info(
                "agent %s: MCP server %r answers now; its tools join new runs", agent.name, server
            )
        source = f"{agent.folder / 'agent.yaml'}: mcp_servers.{server}"
        # At start this stops the worker (`attach`); later, the tools stay out.
        twins = duplicate_names(server, listed.tools, config.allowed())
        self.collisions += [f"{source}: {problem}" for problem in twins.values()]
        tools, skipped = mcp_tools(server, config, listed.tools, self.caller(agent.name), source)
        for tool in tools:
            assert tool.name
            held = agent.tools.get(tool.name)
            if held is not None and held.annotations.get("mcp_server") != server:
                # At start this stops the worker (`attach`); later, the tool stays out.
                self.collisions.append(
                    f"{source}: MCP tool {tool.name!r} has the name of {held.source}; rename "
                    "the server or the tool, or leave it out with tools:"
                )
                skipped.append(f"{tool.name!r} is also the name of {held.source}; left out")
                continue
            agent.tools[tool.name] = tool
        for problem in skipped:
            log.warning("agent %s: %s", agent.name, problem)

    def caller(self, agent: str) -> Any:
        """The `call(server, tool, args, ctx)` of `agent`'s MCP tools."""

        async def call(server: str, tool: str, args: dict[str, Any], ctx: ToolContext) -> Any:
            return await self.call(agent, server, tool, args, ctx)

        return call

    async def call(
        self, agent: str, server: str, tool: str, args: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """Run `tools/call` on `server`; an `isError` result is an error result.

        Raises:
            ApplicationError: retryable, when the server is gone or cannot be reached; the
                session is closed first, so the retry starts afresh.
            MCPError: the server refused the request (the model reads it as an error result).
        """
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        loaded = self._agents[agent]
        keyed = loaded.agent.tools[f"{server}{SEPARATOR}{tool}"].idempotency == "keyed"
        meta: Any = {IDEMPOTENCY_META_KEY: ctx.idempotency_key} if keyed else None
        try:
            session = await self._live_session(agent, server)
            result = await session.call_tool(tool, args, meta=meta)
        except MCPError as err:
            if err.error.code != CONNECTION_CLOSED:
                raise
            await self._drop(agent, server)
            raise _unavailable(server, err) from None
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as err:  # a transport failure: the server is not there
            await self._drop(agent, server)
            raise _unavailable(server, err) from None
        return call_result(f"{server}{SEPARATOR}{tool}", result)

    async def _live_session(self, agent: str, server: str) -> ClientSession:
        """The session, after a ping for a stdio server.

        One that died while idle is started again before the call, so the call does not spend
        an attempt finding out.
        """
        session = await self._session(agent, server)
        if self._agents[agent].agent.config.mcp_servers[server].command is None:
            return session  # HTTP: a ping would cost a request; a failed call retries
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await session.send_ping()
        except Exception as err:
            log.info(
                "MCP server %r did not answer a ping (%s); starting it again", server, reason(err)
            )
            await self._drop(agent, server)
            session = await self._session(agent, server)
        return session

    async def _session(
        self, agent: str, server: str, timeout_s: float = LIST_TIMEOUT_S
    ) -> ClientSession:
        key = (agent, server)
        async with self._locks.setdefault(key, asyncio.Lock()):
            held = self._connections.get(key)
            if held is not None and not held.closed and held.session is not None:
                return held.session
            if held is not None:
                await held.close()
            connection = _Connection(self._agents[agent], server)
            self._connections[key] = connection
            return await connection.open(timeout_s)

    async def _drop(self, agent: str, server: str) -> None:
        connection = self._connections.pop((agent, server), None)
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        """Close every session (stopping every stdio server)."""
        connections, self._connections = list(self._connections.values()), {}
        with contextlib.suppress(Exception):
            await asyncio.gather(*(c.close() for c in connections))


def _unavailable(server: str, err: BaseException) -> ApplicationError:
    return ApplicationError(
        f"MCP server {server!r} is not reachable: {reason(err)}", type="McpServerUnavailable"
    )
