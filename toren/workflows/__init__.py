"""Workflows: `AgentRun`, one per agent run."""

from toren.workflows._agent_run import AgentRun

__all__ = ["AgentRun"]
