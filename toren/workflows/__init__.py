"""Workflow code: `AgentRun`, one per agent run; `AgentThread`, one per conversation.

Deterministic code only: it runs inside Temporal's workflow sandbox and is replayed from
history, so it does no I/O, reads no clock but Temporal's, and imports only the deterministic
contract of `toren.agent` (`_types`, `_transcript`, `_schema`, `_converter`, `_sdk_private`) and
`toren.errors`. Model and tool calls leave it as activities (`toren.worker.activities`).
"""

from toren.workflows._agent_run import AgentRun
from toren.workflows._agent_thread import AgentThread

__all__ = ["AgentRun", "AgentThread"]
