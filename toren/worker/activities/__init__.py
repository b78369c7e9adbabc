"""Activities: `toren.call_model`, one `<agent>.<tool>` per tool, and the loop's local ones."""

from toren.worker.activities._runtime import AgentRuntime

__all__ = ["AgentRuntime"]
