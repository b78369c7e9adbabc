"""MCP servers on the worker: sessions, the stdio servers' jail, and the pool that keeps them.

A session per server (`_session`), stdio servers confined by bubblewrap (`_jail`), the pool
that keeps sessions open across calls (`_pool`). Declared in agent.yaml
(`toren.agent._mcp_config`); each server's tools are tools of the agent, with the contract the
agent declares for them.
"""

__all__: list[str] = []
