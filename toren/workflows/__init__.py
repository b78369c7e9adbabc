"""Workflows: `AgentRun`, one per agent run; `AgentThread`, one per conversation."""

from toren.workflows._agent_run import AgentRun
from toren.workflows._agent_thread import AgentThread

__all__ = ["AgentRun", "AgentThread"]
