"""How a tool call reads its run: queries, or what a local call's run sent in its input.

Reads ask the run (queries `state` and `transcript_segment`). But a local activity runs
inside its workflow task, which stays open until the call returns, so its own run cannot answer
a query meanwhile: `ctx.get_value` would wait until the call times out. The workflow puts those
answers into a local call's input instead (`ToolCallInput.state`, `ToolCallInput.transcript`),
which history never records. The runs a thread or a long run continued from are closed and
answer their queries as usual.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from toren.agent._types import ToolCallInput
from toren.worker.activities._transcripts import read_transcript

__all__ = ["RunReads"]


class RunReads:
    """A call's reads of its run (`ctx.get_value`, `ctx.get_messages`, `message_history`)."""

    def __init__(self, run_key: str, local: ToolCallInput | None = None) -> None:
        self.run_key = run_key
        """`<workflow id>/<run id>` of the run the call belongs to."""
        self.local = local
        """The input of a call running as a local activity: its run's answers ride in it."""

    def _handle(self) -> Any:
        workflow_id, _, run_id = self.run_key.rpartition("/")
        return activity.client().get_workflow_handle(workflow_id, run_id=run_id or None)

    async def read_state(self) -> dict[str, Any]:
        """The run's state as of this turn's start (query `state`, or a local call's input)."""
        if self.local is not None:
            return dict(_local_answer(self.local, "state", "ctx.get_value"))
        state: dict[str, Any] = await self._handle().query("state")
        return state

    async def read_messages(self) -> list[dict[str, Any]]:
        """The conversation so far, across continue-as-new (queries `transcript_segment`)."""
        if self.local is not None:
            own = _local_answer(self.local, "transcript", "ctx.get_messages")
            return await read_transcript(self.run_key, own)
        return await read_transcript(self.run_key)


def _local_answer(input: ToolCallInput, field: str, power: str) -> dict[str, Any]:
    """What a local call's run sent in its input in place of a query it cannot answer.

    Raises:
        RuntimeError: The input lacks it (the call was scheduled without it): waiting on the
            query would only time out, so this says why at once.
    """
    value = getattr(input, field)
    if value is None:
        raise RuntimeError(
            f"{power} cannot read the run here: tool {input.tool!r} runs as a local activity "
            f"and its run sent no {field!r} with the call (its workflow task, open while the "
            "call runs, cannot answer a query); give the tool a timeout_ms above 10000 or "
            "effects other than 'none' to run it as a regular activity"
        )
    answer: dict[str, Any] = value
    return answer
