"""The agents a worker's runtime serves, and what its activities share about them.

`AgentRuntime` is built from this with the model half (`_model_call`) and the tool half
(`_tool_activities`); each half reads the served agents through `_get`, which refuses an agent
this worker does not serve with the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.exceptions import ApplicationError

from toren.agent._transcript import TranscriptCache
from toren.worker._loaded import LoadedAgent
from toren.worker._mcp._pool import McpPool
from toren.worker._telemetry import Telemetry

__all__ = ["Served"]


class Served:
    """The served agents by name, the transcript cache, telemetry, task queues, MCP sessions."""

    def __init__(self, agents: Sequence[LoadedAgent]) -> None:
        self.agents: dict[str, LoadedAgent] = {a.agent.name: a for a in agents}
        self.transcripts = TranscriptCache()
        self.telemetry = Telemetry()
        """Spans and metrics of model and tool calls; set by the worker when configured."""
        self.search_attributes: list[str] = []
        """toren's search attributes the namespace has; set by the worker at start."""
        self.queues: dict[str, set[str]] = {}
        """Agent → the task queues where a worker registers its tool activities."""
        self.mcp: McpPool | None = None
        """The worker's MCP sessions, once it listed the agents' `mcp_servers`."""
        self.handoffs: dict[str, list[str]] = {}
        """Agent → the agents its `handoffs:` name (served on its queue too)."""
        self.companions: set[str] = set()
        """Agents served only as another's handoff target (no worker on their own queue)."""

    def _get(self, agent: str) -> LoadedAgent:
        loaded = self.agents.get(agent)
        if loaded is None:
            served = ", ".join(sorted(self.agents)) or "none"
            raise ApplicationError(
                f"this worker does not serve agent {agent!r} (it serves: {served}); "
                "start a worker for it with `toren worker <folder>`",
                type="UnknownAgent",
                non_retryable=True,
            )
        return loaded
