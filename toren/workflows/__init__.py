"""Workflows: `AgentRun`, one per agent run."""

from toren.workflows.agent_run import AgentRun

__all__ = ["AgentRun"]
