"""The bare-Temporal floor: the same command sequence as a toren run, with nothing of toren.

`PerfFloor(turns)` alternates a "model" activity (returns a small assistant message with one
tool call, like toren's) and a "tool" activity (returns 200 characters), `turns` times, then
one last "model" call that answers: exactly the activities a toren run of `turns` tool turns
schedules. Plain activities with a start-to-close timeout, the default data converter and the
default sandbox: what any Temporal workflow pays for this sequence.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

__all__ = ["MODEL", "TOOL", "PerfFloor", "model", "tool"]

MODEL = "perf.model"
TOOL = "perf.tool"
TIMEOUT = timedelta(minutes=1)


@activity.defn(name=MODEL)
async def model(step: int, turns: int) -> dict[str, Any]:
    """A scripted model: a tool call for steps up to `turns`, then a final answer."""
    if step > turns:
        return {"role": "assistant", "content": "done"}
    call = {"id": f"call_{step}_1", "name": "noop", "arguments": json.dumps({"i": step})}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@activity.defn(name=TOOL)
async def tool(args: dict[str, Any]) -> str:
    """The no-op tool: 200 characters."""
    return "x" * 200


@workflow.defn(name="PerfFloor")
class PerfFloor:
    """`turns` model+tool pairs and a final model call."""

    @workflow.run
    async def run(self, turns: int) -> str:
        """Run the sequence; return the final answer."""
        step = 0
        while True:
            step += 1
            reply: dict[str, Any] = await workflow.execute_activity(
                MODEL, args=[step, turns], start_to_close_timeout=TIMEOUT
            )
            calls = reply.get("tool_calls") or []
            if not calls:
                return str(reply["content"])
            await workflow.execute_activity(
                TOOL, json.loads(calls[0]["arguments"]), start_to_close_timeout=TIMEOUT
            )
